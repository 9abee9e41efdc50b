/**
 * The orchestration patterns on the bundled model, for `npm run eval`: accuracy
 * and mean CALLs per query of single_shot, waterfall and verify on held-out
 * sentiment reviews, each query an `infer.query.v1` run by the facade (mode
 * query, in memory), its CALLs counted by the run itself (`query.calls`).
 *
 * The responders are llm responders on the one loaded engine, each at its own
 * sampling (an engine configuration is what an llm responder is):
 *
 *   greedy   temperature 0
 *   warm     temperature `warm` (default 1), seed = the review's index + 1
 *   hot      temperature `hot` (default 2), top-p 1, seed = the review's index + 101
 *
 * `prompt` chooses what an llm responder sends: `query` (default) is the
 * library's own query prompt and the answer shape's JSON schema
 * (core.classification.v1, labels positive/negative/neutral); `trained` asks each
 * responder the way the bundled model was trained for sentiment (its system
 * prompt and `{"sentiment": ...}` schema), its answer read back as the category:
 * the demo's responders (src/adapters/cli/commands/DemoQuery.ts).
 *
 *   single_shot  greedy, warm and hot in parallel, consensus
 *   waterfall    stage 1 greedy and warm, consensus, accepted when they agree
 *                (`fold.answer.confidence >= 1.0`); stage 2 hot (two samples)
 *                and greedy, consensus
 *   verify       primary greedy, verifier warm, tiebreaker hot; agreement 1
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as DemoQuery from "../src/adapters/cli/commands/DemoQuery.js"
import * as Facade from "../src/programs/Facade.js"
import type { Constraint } from "../src/services/Constraint.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type * as EngineModule from "../src/services/Engine.js"
import type { Responder } from "../src/services/ResponderRegistry.js"

export interface Review {
  readonly review: string
  readonly label: string
}

export interface Options {
  readonly warm?: number | undefined
  readonly hot?: number | undefined
  readonly prompt?: "query" | "trained" | undefined
  readonly verbose?: boolean | undefined
}

export interface Row {
  readonly pattern: string
  readonly correct: number
  readonly failed: number
  readonly total: number
  /** CALLs of the queries that completed (a failed query's response does not say its CALLs). */
  readonly calls: number
  readonly completed: number
  /** How the queries ended: accepted, not_accepted... */
  readonly statuses: Readonly<Record<string, number>>
}

export const labels = ["positive", "negative", "neutral"] as const

type Sampling = DemoQuery.Sampling

/** `engine` at `sampling`: in the bundled model's trained form (the demo's responders), or with the query's own prompt. */
const sampled = (engine: EngineModule.Service, sampling: Sampling, trained: boolean): EngineModule.Service =>
  trained
    ? DemoQuery.bundledSentiment(engine, sampling)
    : { ...engine, infer: (request) => engine.infer(new InferenceRequest({ ...request, maxTokens: 48, ...sampling })) }

const query = (review: string, orchestration: Record<string, unknown>, responders?: ReadonlyArray<unknown>) => ({
  mode: "query",
  messages: [],
  query: {
    kind: "infer.query.v1",
    input: { inline: review },
    ...(responders === undefined ? {} : { responders, top_k: responders.length }),
    fold: { function: "consensus" },
    answer_shape: { kind: "core.classification.v1", labels },
    orchestration
  }
})

const llm = (model: string) => ({ kind: "llm", model: `~${model}` })

/** The three patterns' queries for one review. */
export const patternQueries = (review: string): ReadonlyArray<readonly [string, unknown]> => [
  ["single_shot", query(review, { pattern: "single_shot" }, [llm("greedy"), llm("warm"), llm("hot")])],
  [
    "waterfall",
    query(review, {
      pattern: "waterfall",
      stages: [
        { responders: [llm("greedy"), llm("warm")] },
        { responders: [llm("hot"), llm("hot2"), llm("greedy")] }
      ],
      accept_expression: "fold.answer.confidence >= 1.0"
    })
  ],
  [
    "verify",
    query(review, {
      pattern: "verify",
      primary: [llm("greedy")],
      verifier: llm("warm"),
      tiebreaker: llm("hot"),
      agreement_threshold: 1
    })
  ]
]

/** Runs the three patterns over `reviews`, one facade per review (its responders seeded by the review's index). */
export const run = (reviews: ReadonlyArray<Review>, options: Options = {}) =>
  Effect.gen(function* () {
    const engine = yield* Engine
    const trained = options.prompt === "trained"
    const rows = new Map<string, { correct: number; failed: number; calls: number; completed: number; statuses: Record<string, number> }>()
    for (const [index, r] of reviews.entries()) {
      const samplings: Record<string, Sampling> = {
        greedy: { temperature: 0 },
        warm: { temperature: options.warm ?? 1, seed: index + 1 },
        hot: { temperature: options.hot ?? 2, topP: 1, seed: index + 101 },
        hot2: { temperature: options.hot ?? 2, topP: 1, seed: index + 201 }
      }
      const responders = Object.entries(samplings).map(([id, sampling]): Responder => ({
        id,
        kind: "llm",
        model: id,
        engine: sampled(engine, sampling, trained)
      }))
      const registry = InMemoryResponders.layer({ responders, aliases: Object.fromEntries(responders.map((x) => [x.id, x.id])) })
      const facade = yield* Effect.provide(Facade.make(), Layer.orDie(registry))
      for (const [pattern, request] of patternQueries(r.review)) {
        const response = yield* facade.runUnknown(request)
        const row = rows.get(pattern) ?? { correct: 0, failed: 0, calls: 0, completed: 0, statuses: {} }
        const category = (response.structuredOutput as { category?: unknown } | undefined)?.category
        if (response.error !== undefined) {
          row.failed++
          if (options.verbose === true) console.log(`  ${pattern} failed: ${r.review}: ${response.error.code}: ${response.error.message.slice(0, 200)}`)
        } else if (category === r.label) row.correct++
        else if (options.verbose === true) console.log(`  ${pattern} miss: ${r.review}: ${String(category)} (want ${r.label})`)
        if (response.query?.calls !== undefined) {
          row.calls += response.query.calls
          row.completed++
        }
        const status = response.error?.code ?? response.stopReason ?? "?"
        row.statuses[status] = (row.statuses[status] ?? 0) + 1
        rows.set(pattern, row)
      }
    }
    return Array.from(rows, ([pattern, row]): Row => ({ pattern, ...row, total: reviews.length }))
  }) satisfies Effect.Effect<ReadonlyArray<Row>, unknown, Engine | Constraint>
