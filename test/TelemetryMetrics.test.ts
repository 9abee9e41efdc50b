/**
 * Telemetry's Metrics service (layers/Telemetry `metrics`): it records through
 * Effect's `Metric` only, and its snapshot reads that same registry back, so what
 * is exported and what the service reports are one store.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import { CostTracker } from "../src/services/CostTracker.js"
import { Metrics } from "../src/services/Metrics.js"

const count = (metric: Metric.Metric.Counter<number>) => Effect.map(Metric.value(metric), (s) => s.count)
const samples = (layer: string) => Effect.map(Metric.value(Metric.tagged(Telemetry.latency, "layer", layer)), (s) => s.count)
const inputTokens = Metric.tagged(Telemetry.tokenUsage, "gen_ai.token.type", "input")

describe("Telemetry.metrics", () => {
  it.effect("what the service records is what Effect's Metric holds, and the snapshot says the same", () =>
    Effect.gen(function* () {
      const metrics = yield* Metrics
      const before = yield* metrics.snapshot
      const exportedBefore = yield* count(Telemetry.counter("tm_widgets"))
      const tokensBefore = yield* count(inputTokens)
      const latencyBefore = yield* samples("tm_layer")

      yield* metrics.increment("tm_widgets", 3)
      yield* metrics.increment("tm_widgets")
      yield* metrics.recordTokens(TokenUsage.make({ promptTokens: 7, outputTokens: 2 }))
      yield* metrics.recordLatency("tm_layer", 12)
      yield* metrics.recordLatency("tm_layer", 30)

      const after = yield* metrics.snapshot
      expect((yield* count(Telemetry.counter("tm_widgets"))) - exportedBefore).toBe(4)
      expect((after.counters["tm_widgets"] ?? 0) - (before.counters["tm_widgets"] ?? 0)).toBe(4)
      expect(after.counters["tm_widgets"]).toBe(yield* count(Telemetry.counter("tm_widgets")))
      expect((yield* count(inputTokens)) - tokensBefore).toBe(7)
      expect(after.promptTokens - before.promptTokens).toBe(7)
      expect(after.promptTokens).toBe(yield* count(inputTokens))
      expect((yield* samples("tm_layer")) - latencyBefore).toBe(2)
      expect(after.latencies["tm_layer"]).toEqual([12, 30])
    }).pipe(Effect.provide(Telemetry.metrics)))

  it.effect("one store, not two: a count added to Effect's Metric directly is in the snapshot too", () =>
    Effect.gen(function* () {
      const metrics = yield* Metrics
      const before = (yield* metrics.snapshot).counters["tm_direct"] ?? 0
      yield* Metric.incrementBy(Telemetry.counter("tm_direct"), 5)
      expect((yield* metrics.snapshot).counters["tm_direct"]).toBe(before + 5)
    }).pipe(Effect.provide(Telemetry.metrics)))

  it.effect("names past the bound share one, in the snapshot and in what is exported", () =>
    Effect.gen(function* () {
      const metrics = yield* Telemetry.makeMetricsBounded({ maxNames: 2, maxSamples: 2 })
      const otherLatency = yield* samples(Observe.otherName)
      const otherCount = yield* count(Telemetry.counter(Observe.otherName))
      for (const layer of ["tm_a", "tm_b", "tm_c", "tm_d"]) yield* metrics.recordLatency(layer, 1)
      yield* metrics.recordLatency("tm_a", 2)
      yield* metrics.recordLatency("tm_a", 3)
      for (const name of ["tm_n1", "tm_n2", "tm_n3"]) yield* metrics.increment(name)

      const snapshot = yield* metrics.snapshot
      expect(Object.keys(snapshot.latencies).sort()).toEqual([Observe.otherName, "tm_a", "tm_b"].sort())
      expect(snapshot.latencies["tm_a"]).toEqual([2, 3])
      expect(snapshot.latencies[Observe.otherName]).toEqual([1, 1])
      expect((yield* samples(Observe.otherName)) - otherLatency).toBe(2)
      expect(yield* samples("tm_c")).toBe(0)
      expect((yield* count(Telemetry.counter(Observe.otherName))) - otherCount).toBe(1)
      expect(snapshot.counters[Observe.otherName]).toBe(yield* count(Telemetry.counter(Observe.otherName)))
    }))
})

describe("Telemetry.costTracker", () => {
  it.effect("usage is priced into pagantic.cost per model, and the total is read back from there", () =>
    Effect.gen(function* () {
      const tracker = yield* CostTracker
      const perModel = (model: string) => count(Metric.tagged(Telemetry.cost, "gen_ai.request.model", model))
      const totalBefore = yield* tracker.totalCost
      const [aBefore, bBefore] = [yield* perModel("tm-a"), yield* perModel("tm-b")]
      yield* tracker.recordUsage("tm-a", TokenUsage.make({ promptTokens: 1_000, outputTokens: 500 }))
      yield* tracker.recordUsage("tm-b", TokenUsage.make({ promptTokens: 2_000, outputTokens: 0 }))
      yield* tracker.recordUsage("tm-unpriced", TokenUsage.make({ promptTokens: 9_000, outputTokens: 9_000 }))
      // tm-a: (1000 * 2 + 500 * 4) / 1e6; tm-b: 2000 * 1 / 1e6
      expect((yield* perModel("tm-a")) - aBefore).toBeCloseTo(0.004, 12)
      expect((yield* perModel("tm-b")) - bBefore).toBeCloseTo(0.002, 12)
      expect(yield* perModel("tm-unpriced")).toBe(0)
      expect((yield* tracker.totalCost) - totalBefore).toBeCloseTo(0.006, 12)
      // one store: cost added to the metric directly is in the total too
      yield* Metric.incrementBy(Metric.tagged(Telemetry.cost, "gen_ai.request.model", "tm-direct"), 1)
      expect((yield* tracker.totalCost) - totalBefore).toBeCloseTo(1.006, 12)
    }).pipe(
      Effect.provide(
        Telemetry.costTracker({
          "tm-a": { promptPerMillion: 2, outputPerMillion: 4 },
          "tm-b": { promptPerMillion: 1, outputPerMillion: 1 }
        })
      )
    ))
})
