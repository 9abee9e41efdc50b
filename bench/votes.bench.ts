/**
 * Votes on the bundled model: RedundantLoop N=5 on a sentiment review, the five
 * replicas started together, against the same five calls one after another
 * (concurrency 1), as the median of per-round ratios (order alternating, each
 * phase on a review of its own).
 *
 * - tree: the replicas drawn by one LlamaEngine.sampleMany (the prompt and the
 *   tokens they agree on decoded once); goal <= 0.35 at temperature 0.8, <= 0.6
 *   at temperature 8 (where the samples diverge early).
 * - independent: the same five replicas at once as five infers on five
 *   sequences (an engine without sampleMany); judged against the reference
 *   below: <= reference + 0.1.
 * - reference: llama.cpp decoding one token on each of 5 sequences in one batch
 *   versus 5 batches of one, the ceiling of any parallel-sequence speedup here.
 *
 * `npx tsx bench/votes.bench.ts` runs these rows alone.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { fileURLToPath } from "node:url"
import { getLlama } from "node-llama-cpp"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import { Engine } from "../src/services/Engine.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"
import { reviewPrompt as review, SENTIMENT } from "./Reviews.js"

const SEQUENCES = 6
const THREADS = 1

const now = Effect.sync(() => performance.now())
const iqr = (xs: ReadonlyArray<number>) => `${quantile(xs, 0.25).toFixed(2)}-${quantile(xs, 0.75).toFixed(2)}`
const fmt = (n: number) => n.toLocaleString("en-US", { maximumFractionDigits: 0 })
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const start = yield* now
    const value = yield* effect
    return { value, ms: (yield* now) - start }
  })

/** `rounds` pairs of sequential and concurrent runs, order alternating: median times and per-round ratio. */
const pairRow = <E, R>(
  name: string,
  goal: string,
  met: (ratio: number) => boolean,
  rounds: number,
  run: (round: number) => { readonly sequential: Effect.Effect<unknown, E, R>; readonly concurrent: Effect.Effect<unknown, E, R> }
) =>
  Effect.gen(function*() {
    const sequential: Array<number> = []
    const concurrent: Array<number> = []
    const ratios: Array<number> = []
    for (let round = 0; round < rounds; round++) {
      const pair = run(round)
      if (round % 2 === 0) {
        sequential.push((yield* timed(pair.sequential)).ms)
        concurrent.push((yield* timed(pair.concurrent)).ms)
      } else {
        concurrent.push((yield* timed(pair.concurrent)).ms)
        sequential.push((yield* timed(pair.sequential)).ms)
      }
      ratios.push(concurrent.at(-1)! / sequential.at(-1)!)
    }
    const ratio = median(ratios)
    return {
      name,
      ours: `${fmt(median(concurrent))} ms together`,
      baseline: `${fmt(median(sequential))} ms one after another`,
      ratio,
      spread: iqr(ratios),
      goal,
      met: met(ratio)
    } satisfies Row
  })

/** The vote at `temperature`, replicas at once or one after another; the sampling it used. */
const vote = (prompt: string, temperature: number, concurrency: number, seed: number) =>
  Effect.map(
    RedundantLoop.run(prompt, {
      schema: SENTIMENT,
      systemPrompt: "Classify the sentiment of the review.",
      n: 5,
      quorum: 1,
      concurrency,
      temperature,
      maxTokens: 24,
      seed
    }),
    (result) => result.sampling
  )

/** RedundantLoop N=5 together vs one after another; `key` spaces the reviews so no phase reuses another's prompt. */
const votes = (label: string, temperature: number, goal: string, met: (ratio: number) => boolean, rounds: number, key: number) =>
  Effect.gen(function*() {
    const sampling = yield* vote(review(key), temperature, 5, key) // warm-up, and which path the engine took
    return yield* pairRow(
      `RedundantLoop N=5 sentiment vote, temperature ${temperature}, ${label} (${sampling}) vs sequence`,
      goal,
      met,
      rounds,
      (round) => ({
        sequential: vote(review(key + 2 * round + 1), temperature, 1, round),
        concurrent: vote(review(key + 2 * round + 2), temperature, 5, round)
      })
    )
  }).pipe(Effect.provide(ConstraintLive.layer))

/** llama.cpp's own batching gain: 1 token on each of 5 sequences in one batch vs 5 batches. */
const batchReference = (steps: number) =>
  Effect.gen(function*() {
    const llama = yield* Effect.acquireRelease(
      Effect.promise(() => getLlama({ gpu: false, build: "never", maxThreads: THREADS })),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const model = yield* Effect.acquireRelease(
      Effect.promise(() => llama.loadModel({ modelPath: LlamaEngine.bundledModelPath(), gpuLayers: 0 })),
      (model) => Effect.promise(() => model.dispose())
    )
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => model.createContext({ sequences: 5, contextSize: 1024, threads: THREADS })),
      (context) => Effect.promise(() => context.dispose())
    )
    const sequences = Array.from({ length: 5 }, () => context.getSequence())
    const start = model.tokenize("Classify the sentiment of the review: the food was cold.")
    yield* Effect.promise(() => Promise.all(sequences.map((s) => s.evaluateWithoutGeneratingNewTokens(start))))
    const token = start[start.length - 1]!
    const one = (i: number) => Effect.promise(() => sequences[i]!.evaluateWithoutGeneratingNewTokens([token]))
    return yield* pairRow(
      "reference: llama.cpp decoding 1 token on each of 5 sequences, one batch vs 5 batches",
      "(reference)",
      () => true,
      steps,
      () => ({
        sequential: Effect.forEach([0, 1, 2, 3, 4], one, { discard: true }),
        concurrent: Effect.forEach([0, 1, 2, 3, 4], one, { discard: true, concurrency: "unbounded" })
      })
    )
  }).pipe(Effect.scoped)

/** The engine without sampleMany: replicas started together run as independent infers on their own sequences. */
const withoutTree = Layer.effect(
  Engine,
  Effect.map(Engine, (engine) => ({ infer: engine.infer, stream: engine.stream, modelInfo: engine.modelInfo }))
)

/** Every vote row, beside the batching reference. */
export const run = Effect.gen(function*() {
  const reference = yield* batchReference(200)
  const rows: Array<Row> = [
    yield* votes("tree", 0.8, "<= 0.35", (r) => r <= 0.35, 21, 1_000),
    yield* votes("tree", 8, "<= 0.6", (r) => r <= 0.6, 21, 2_000)
  ]
  const independent = yield* votes(
    "independent replicas",
    0.8,
    `<= ${(reference.ratio + 0.1).toFixed(2)} (reference + 0.1)`,
    (r) => r <= reference.ratio + 0.1,
    21,
    3_000
  ).pipe(Effect.provide(withoutTree))
  return [...rows, independent, reference]
}).pipe(Effect.provide(Layer.fresh(LlamaEngine.layer({ sequences: SEQUENCES, threads: THREADS }))))

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.goal === "(reference)" ? "" : r.met ? ", met" : ", NOT MET"})`)
      ))
  )
}
