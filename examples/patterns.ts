/**
 * Nested queries: classify a document, then summarise it only if it is research.
 *
 *   npx tsx examples/patterns.ts
 *
 * Query A classifies each document (a keyword classifier and a second opinion,
 * folded best_of). A trigger on A's KNOW (kind core.classification.v1, condition
 * `fold.answer.value.category == "research"`) starts query B with A's KNOW as its
 * input (`input.record_id`); B asks two summarisers and folds by consensus. The
 * responders here are plain functions so the example runs without a model; swap
 * in `llm` responders (an Engine each) for real ones. Runs are in memory; use
 * SqliteRuns for runs that survive a restart. Its test: test/PatternsNested.test.ts.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { InMemoryResponders, LexicalReranker, Orchestration, Records, type ResponderRegistry, Runs } from "pagantic"
import { InMemoryRuns } from "pagantic/durable"

const firstSentence = (text: string) => (text.split(/(?<=\.)\s/)[0] ?? text).trim()

/** The responders: two classifiers and two summarisers, as pure functions. */
export const responders: ReadonlyArray<ResponderRegistry.Responder> = [
  {
    id: "keywords",
    kind: "pattern",
    capabilities: {
      classification: (r) => ({ category: /\b(study|grant|experiment|hypothesis)\b/i.test(r.input) ? "research" : "news", _confidence: 0.7 })
    }
  },
  {
    id: "length",
    kind: "pattern",
    capabilities: { classification: (r) => ({ category: r.input.length > 120 ? "research" : "news", _confidence: 0.4 }) }
  },
  { id: "lead", kind: "pattern", capabilities: { summary: (r) => ({ summary: firstSentence(r.input) }) } },
  { id: "lead-again", kind: "pattern", capabilities: { summary: (r) => ({ summary: firstSentence(r.input) }) } }
]

/** Query A: classify. */
export const classify = (document: string) => ({
  kind: "infer.query.v1",
  input: { inline: document },
  responders: [{ kind: "pattern", capability: "classification" }],
  fold: { function: "best_of" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
})

/** The trigger: on a research classification, query B summarises the document. */
export const summariseResearch: Orchestration.Trigger = {
  name: "summary",
  kind: "core.classification.v1",
  condition: `fold.answer.value.category == "research"`,
  query: {
    kind: "infer.query.v1",
    responders: [{ kind: "pattern", capability: "summary" }],
    fold: { function: "consensus" },
    answer_shape: { kind: "core.summary.v1" }
  }
}

export interface Outcome {
  readonly document: string
  readonly category: unknown
  readonly summary?: unknown
}

/** The runs layer with the query definition (whose record inputs read other runs' KNOWs). */
export const make = Effect.gen(function* () {
  const handle = yield* Deferred.make<Runs.Service>()
  const queries = Orchestration.definition({ recordText: Orchestration.recordText(Deferred.await(handle)) })
  const layer = InMemoryRuns.layer({ definitions: [queries] }).pipe(
    Layer.provide(Layer.mergeAll(InMemoryResponders.layer({ responders }), LexicalReranker.layer()))
  )
  return { handle, queries, layer }
})

/** Classifies each document; summarises the research ones through the trigger. */
export const program = (
  documents: ReadonlyArray<string>,
  setup: Effect.Effect.Success<typeof make>
) =>
  Effect.gen(function* () {
    const runs = yield* Runs.Runs
    yield* Deferred.succeed(setup.handle, runs)
    const trigger = yield* Either.match(Orchestration.checkTrigger(summariseResearch), { onLeft: Effect.fail, onRight: Effect.succeed })
    return yield* Effect.forEach(documents, (document) =>
      Effect.gen(function* () {
        const parent = yield* Orchestration.start(runs, setup.queries, classify(document))
        const children = yield* Orchestration.follow(runs, setup.queries, parent, [trigger])
        const classified = yield* Schema.decodeUnknown(Records.Know)((yield* runs.poll(parent)).result).pipe(Effect.orDie)
        const outcome: Outcome = { document, category: classified.body.category }
        if (children.length === 0) return outcome
        const child = yield* runs.await(children[0]!)
        const know = yield* Schema.decodeUnknown(Records.Know)(child.result).pipe(Effect.orDie)
        return { ...outcome, summary: know.body.summary }
      }))
  })

export const documents = [
  "A two-year study of protein folding under heat stress. The experiment measured refolding rates in 40 strains and supports the chaperone hypothesis.",
  "The city council voted on Tuesday to extend the tram line."
]

if (import.meta.url === `file://${process.argv[1]}`) {
  NodeRuntime.runMain(
    Effect.gen(function* () {
      const setup = yield* make
      const outcomes = yield* program(documents, setup).pipe(Effect.provide(setup.layer))
      for (const o of outcomes) yield* Console.log(`${String(o.category)}: ${o.summary === undefined ? "(not summarised)" : String(o.summary)}`)
    })
  )
}
