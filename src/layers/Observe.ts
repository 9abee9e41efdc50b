/**
 * Observe layers: in-memory (for tests and development) and no-op (for paths that
 * do not need observability) implementations of EventLog, Metrics and CostTracker.
 * The in-memory ones are safe under concurrency (a Ref is updated atomically) and
 * copy on read, so no caller can alias another's view.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import type { Event } from "../domain/Event.js"
import type { TokenUsage } from "../domain/TokenUsage.js"
import type { CostTrackerService, EventLogService, MetricsService, MetricsSnapshot } from "../services/Observe.js"
import { CostTracker, EventLog, Metrics } from "../services/Observe.js"

// ---------------------------------------------------------------------------
// EventLog
// ---------------------------------------------------------------------------

/** An in-memory event log. Events are immutable Schema values; the array is copied on read. */
export const makeEventLog: Effect.Effect<EventLogService> = Effect.map(
  Ref.make<ReadonlyArray<Event>>([]),
  (ref) => ({
    record: (event) => Ref.update(ref, (events) => [...events, event]),
    events: Effect.map(Ref.get(ref), (events) => events.slice())
  })
)

export const eventLogMemory: Layer.Layer<EventLog> = Layer.effect(EventLog, makeEventLog)

export const eventLogNoop: Layer.Layer<EventLog> = Layer.succeed(EventLog, {
  enabled: false,
  record: () => Effect.void,
  events: Effect.succeed([])
})

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

const emptySnapshot: MetricsSnapshot = { latencies: {}, counters: {}, promptTokens: 0, outputTokens: 0 }

export const makeMetrics: Effect.Effect<MetricsService> = Effect.map(Ref.make(emptySnapshot), (ref) => ({
  recordLatency: (layer, millis) =>
    Ref.update(ref, (s) => ({ ...s, latencies: { ...s.latencies, [layer]: [...(s.latencies[layer] ?? []), millis] } })),
  recordTokens: (usage: TokenUsage) =>
    Ref.update(ref, (s) => ({
      ...s,
      promptTokens: s.promptTokens + usage.promptTokens,
      outputTokens: s.outputTokens + usage.outputTokens
    })),
  increment: (name, delta = 1) =>
    Ref.update(ref, (s) => ({ ...s, counters: { ...s.counters, [name]: (s.counters[name] ?? 0) + delta } })),
  snapshot: Effect.map(Ref.get(ref), (s) => ({
    latencies: Object.fromEntries(Object.entries(s.latencies).map(([k, v]) => [k, v.slice()])),
    counters: { ...s.counters },
    promptTokens: s.promptTokens,
    outputTokens: s.outputTokens
  }))
}))

export const metricsMemory: Layer.Layer<Metrics> = Layer.effect(Metrics, makeMetrics)

export const metricsNoop: Layer.Layer<Metrics> = Layer.succeed(Metrics, {
  recordLatency: () => Effect.void,
  recordTokens: () => Effect.void,
  increment: () => Effect.void,
  snapshot: Effect.succeed(emptySnapshot)
})

// ---------------------------------------------------------------------------
// CostTracker
// ---------------------------------------------------------------------------

/** Price per million tokens, per model. A model missing from the table costs nothing. */
export interface Price {
  readonly promptPerMillion: number
  readonly outputPerMillion: number
}

export const makeCostTracker = (prices: Readonly<Record<string, Price>>): Effect.Effect<CostTrackerService> =>
  Effect.map(Ref.make(0), (total) => ({
    recordUsage: (model, usage) => {
      const price = prices[model]
      if (price === undefined) return Effect.void
      const cost =
        (usage.promptTokens * price.promptPerMillion + usage.outputTokens * price.outputPerMillion) / 1_000_000
      return Ref.update(total, (t) => t + cost)
    },
    totalCost: Ref.get(total)
  }))

export const costTrackerMemory = (prices: Readonly<Record<string, Price>> = {}): Layer.Layer<CostTracker> =>
  Layer.effect(CostTracker, makeCostTracker(prices))

export const costTrackerNoop: Layer.Layer<CostTracker> = Layer.succeed(CostTracker, {
  recordUsage: () => Effect.void,
  totalCost: Effect.succeed(0)
})

/** All three in memory. */
export const layerMemory = (prices: Readonly<Record<string, Price>> = {}): Layer.Layer<EventLog | Metrics | CostTracker> =>
  Layer.mergeAll(eventLogMemory, metricsMemory, costTrackerMemory(prices))

/** All three as no-ops. */
export const layerNoop: Layer.Layer<EventLog | Metrics | CostTracker> = Layer.mergeAll(
  eventLogNoop,
  metricsNoop,
  costTrackerNoop
)
