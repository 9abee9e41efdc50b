/**
 * Folding cost: consensus and ensemble_weighted (with a compiled CEL weight) over
 * 1,000 classification responses arriving in shuffled order, each fold timed
 * ROUNDS times after a warm-up; the row gives the median against the goal's
 * budget (ratio = median / budget, met at <= 1), the interquartile range beside it.
 * And single_shot with k = 5 LLM responders in memory against RedundantLoop with
 * N = 5 replicas, both on a zero-latency scripted engine, alternating which runs
 * first; the ratio is the median of per-round ratios (goal <= 1.2).
 *
 *   npm run bench                  (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/folds.bench.ts   (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { fileURLToPath } from "node:url"
import * as AnswerShape from "../src/domain/AnswerShape.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Cel from "../src/programs/Cel.js"
import * as Folds from "../src/programs/Folds.js"
import * as Check from "../src/programs/query/Check.js"
import * as SingleShot from "../src/programs/query/SingleShot.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const ROUNDS = Number(process.env.FOLDS_BENCH_ROUNDS ?? 50)
const RESPONSES = 1_000
const categories = ["research", "news", "spam", "opinion", "review"]

const shape = AnswerShape.checker({ kind: "core.classification.v1", labels: categories })

/** Deterministic pseudo-random order (a linear congruential shuffle). */
const shuffled = <A>(items: ReadonlyArray<A>): ReadonlyArray<A> => {
  const out = [...items]
  let seed = 42
  for (let i = out.length - 1; i > 0; i--) {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
    const j = seed % (i + 1)
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

const responses: ReadonlyArray<Folds.Response> = shuffled(
  Array.from({ length: RESPONSES }, (_, i) =>
    Folds.answered({
      responder: `r${i % 50}`,
      responderIndex: i % 50,
      attempt: 1 + Math.floor(i / 50),
      recordId: `rec-${i}`,
      body: { category: categories[(i * 7) % 5 === 0 ? 0 : i % 5]!, _confidence: (i % 10) / 10, _rationale: "because" }
    })
  )
)

const weight = Either.getOrThrow(Cel.compile("weight", "fold.weight_expression", "response.confidence * (response.kind == 'actor' ? 2.0 : 1.0)"))

const time = (fold: () => Either.Either<Folds.Output, unknown>) =>
  Effect.sync(() => {
    for (let i = 0; i < 10; i++) fold()
    const ms: Array<number> = []
    for (let round = 0; round < ROUNDS; round++) {
      const start = performance.now()
      const out = fold()
      ms.push(performance.now() - start)
      if (Either.isLeft(out)) throw new Error("the benchmark's fold failed")
    }
    return ms
  })

const row = (name: string, ms: ReadonlyArray<number>, budgetMs: number | undefined): Row => {
  const m = median(ms)
  return {
    name,
    ours: `${m.toFixed(2)} ms`,
    baseline: budgetMs === undefined ? "-" : `${budgetMs} ms budget`,
    ratio: budgetMs === undefined ? 1 : m / budgetMs,
    spread: `${quantile(ms, 0.25).toFixed(2)}-${quantile(ms, 0.75).toFixed(2)} ms`,
    goal: budgetMs === undefined ? "(reference)" : "<= 1",
    met: budgetMs === undefined || m <= budgetMs
  }
}

const K = 5
const SHOT_ROUNDS = Number(process.env.FOLDS_BENCH_SHOT_ROUNDS ?? 200)
const answer = '{"category":"news"}'

/** single_shot k=5 against RedundantLoop N=5, per-round ratios. */
const singleShotVsRedundant = Effect.gen(function*() {
  const { engine } = yield* ScriptedEngine.make([ScriptedEngine.reply(answer)], { whenExhausted: "repeat-last" })
  const responders = Array.from({ length: K }, (_, i) => ({ id: `llm-${i}`, kind: "llm" as const, model: `m${i}`, engine }))
  const shotLayer = Layer.mergeAll(InMemoryResponders.layer({ responders }), LexicalReranker.layer())
  const shotContext = yield* Layer.build(shotLayer).pipe(Effect.scoped, Effect.orDie)
  const checked = Either.getOrThrow(
    Check.check({
      kind: "infer.query.v1",
      input: { inline: "classify this" },
      responders: responders.map((r) => ({ kind: "llm", model: r.model })),
      answer_shape: { kind: "core.classification.v1", labels: ["news", "spam"] },
      top_k: K
    })
  )
  const shot = SingleShot.run(checked).pipe(Effect.provide(shotContext), Effect.orDie, Effect.asVoid)
  const loopContext = yield* Layer.build(
    Layer.mergeAll(ScriptedEngine.layer([ScriptedEngine.reply(answer)], { whenExhausted: "repeat-last" }), JsonConstraint.layer)
  ).pipe(Effect.scoped)
  const Category = Schema.Struct({ category: Schema.Literal("news", "spam") })
  const loop = RedundantLoop.run("classify this", { schema: Category, n: K }).pipe(Effect.provide(loopContext), Effect.orDie, Effect.asVoid)
  const timed = (effect: Effect.Effect<void>) =>
    Effect.gen(function*() {
      const start = performance.now()
      yield* effect
      return performance.now() - start
    })
  for (let i = 0; i < 20; i++) yield* Effect.zip(shot, loop)
  const ratios: Array<number> = []
  const shotMs: Array<number> = []
  const loopMs: Array<number> = []
  for (let round = 0; round < SHOT_ROUNDS; round++) {
    const first = round % 2 === 0
    const a = yield* timed(first ? shot : loop)
    const b = yield* timed(first ? loop : shot)
    const [s, l] = first ? [a, b] : [b, a]
    shotMs.push(s)
    loopMs.push(l)
    ratios.push(s / l)
  }
  const ratio = median(ratios)
  return {
    name: `single_shot k=${K} in memory vs RedundantLoop N=${K}, zero-latency engine`,
    ours: `${median(shotMs).toFixed(3)} ms`,
    baseline: `${median(loopMs).toFixed(3)} ms`,
    ratio,
    spread: `${quantile(ratios, 0.25).toFixed(2)}-${quantile(ratios, 0.75).toFixed(2)}`,
    goal: "<= 1.2",
    met: ratio <= 1.2
  } satisfies Row
})

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.gen(function*() {
  const consensus = yield* time(() => Folds.consensus(responses, { shape }))
  const ensemble = yield* time(() => Folds.ensembleWeighted(responses, { shape, weight }))
  const unweighted = yield* time(() => Folds.ensembleWeighted(responses, { shape }))
  return [
    row(`consensus over ${RESPONSES.toLocaleString("en-US")} responses`, consensus, 5),
    row(`ensemble_weighted over ${RESPONSES.toLocaleString("en-US")}, compiled CEL weight`, ensemble, 2),
    row(`ensemble_weighted over ${RESPONSES.toLocaleString("en-US")}, default weight (no CEL)`, unweighted, undefined),
    yield* singleShotVsRedundant
  ]
})

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      )
    )
  )
}
