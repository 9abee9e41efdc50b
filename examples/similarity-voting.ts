/**
 * A custom voting strategy: similarity voting.
 *
 *   npx tsx examples/similarity-voting.ts                 # on the bundled model
 *   PAGANTIC_MODEL_PATH=/path/to/model.gguf npx tsx examples/similarity-voting.ts
 *
 * Majority voting needs replicas that agree exactly. For open-ended extraction
 * (summaries, tag lists) replicas rarely do, so every candidate gets one vote and
 * the confidence is 1/N. Similarity voting instead picks the most central
 * candidate: the one most similar, on average, to all the others, where the
 * similarity of two JSON candidates is the Jaccard index of their leaves
 * (`path = value` pairs) and of two texts that of their words. The confidence is
 * that average similarity. Ties go to the first candidate, like the built-in
 * strategies.
 *
 * A strategy is just a value of the `VotingStrategy` interface, handed to the
 * RedundantLoop as its `voting` option. The test (test/Voting.test.ts) runs this
 * program on a ScriptedEngine.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { Failure, JsonConstraint, RedundantLoop, type Voting } from "pagantic"
import { LlamaEngine } from "pagantic/llama"

/** The leaves of a JSON value as `path=value` strings; the words of a text otherwise. */
const features = (candidate: string): ReadonlySet<string> => {
  const parsed = Either.try(() => JSON.parse(candidate) as unknown)
  if (Either.isLeft(parsed)) return new Set(candidate.toLowerCase().split(/\W+/).filter(Boolean))
  const out = new Set<string>()
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, `${path}[${i}]`))
    else if (typeof value === "object" && value !== null) {
      for (const [k, v] of Object.entries(value)) walk(v, `${path}.${k}`)
    } else out.add(`${path}=${JSON.stringify(value)}`)
  }
  walk(parsed.right, "$")
  return out
}

/** Jaccard index of two sets; two empty sets are identical. */
export const jaccard = (a: ReadonlySet<string>, b: ReadonlySet<string>): number => {
  if (a.size === 0 && b.size === 0) return 1
  let shared = 0
  for (const x of a) if (b.has(x)) shared++
  return shared / (a.size + b.size - shared)
}

/** Picks the candidate most similar, on average, to the others. */
export const SimilarityVoting: Voting.VotingStrategy = {
  name: "similarity",
  vote: Effect.fn("SimilarityVoting.vote")(function* (candidates: ReadonlyArray<string>) {
    if (candidates.length === 0) {
      return yield* Failure.OrchestrationFailure.noConsensus("similarity voting: no candidates")
    }
    if (candidates.length === 1) return { winner: 0, content: candidates[0]!, confidence: 1 } satisfies Voting.Vote
    const sets = candidates.map(features)
    let best = 0
    let bestScore = -1
    sets.forEach((a, i) => {
      const total = sets.reduce((sum, b, j) => (i === j ? sum : sum + jaccard(a, b)), 0)
      const score = total / (sets.length - 1)
      if (score > bestScore) {
        best = i
        bestScore = score
      }
    })
    return { winner: best, content: candidates[best]!, confidence: bestScore } satisfies Voting.Vote
  })
}

const Summary = Schema.Struct({
  topic: Schema.String,
  sentiment: Schema.Literal("positive", "negative", "neutral"),
  tags: Schema.Array(Schema.String)
})

/** Three replicas summarize a review; similarity voting picks the most central summary. */
export const program = Effect.gen(function* () {
  const result = yield* RedundantLoop.run(
    "Summarize this review as JSON (topic, sentiment, tags): 'Rust made our service fast and safe.'",
    { schema: Summary, n: 3, voting: SimilarityVoting, temperature: 0.7, systemPrompt: "You summarize reviews." }
  )
  yield* Console.log(`winner (replica ${result.winner}): ${result.content}`)
  yield* Console.log(`confidence: ${result.confidence.toFixed(2)} over ${result.candidates.length} candidates`)
  for (const candidate of result.candidates) yield* Console.log(`  candidate: ${candidate}`)
  return result
})

/** The program's services, given a layer that provides the Engine. */
export const MainLive = <ROut, E>(engine: Layer.Layer<ROut, E>) => Layer.merge(JsonConstraint.layer, engine)

if (import.meta.url === `file://${process.argv[1]}`) {
  NodeRuntime.runMain(program.pipe(Effect.provide(MainLive(LlamaEngine.layerConfig()))))
}
