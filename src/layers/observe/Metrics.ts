/**
 * The in-memory metrics, bounded: per layer a ring of the last `maxSamples`
 * latencies, counters summed per name, token totals; at most `maxNames` distinct
 * layers and counter names (further names share `otherName`). Each instance has
 * its own counts (Effect's `Metric` registry is process-wide, which is why the
 * exporting Metrics layer in Telemetry uses it and this one does not).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { TokenUsage } from "../../domain/TokenUsage.js"
import type { Service as MetricsService, Snapshot as MetricsSnapshot } from "../../services/Metrics.js"
import { Metrics } from "../../services/Metrics.js"
import { positive, Ring } from "./Ring.js"

/** Bounds of the in-memory metrics. */
export interface MetricsOptions {
  /** Latency samples kept per layer, the most recent. Default 1,024. */
  readonly maxSamples?: number | undefined
  /**
   * Distinct latency layers, and distinct counter names, kept at most; the
   * samples and counts of any further name go to `otherName`. Default 256.
   */
  readonly maxNames?: number | undefined
}

/** The bounds `metricsMemory` and `makeMetrics` use. */
export const metricsDefaults = { maxSamples: 1_024, maxNames: 256 } as const

/** Where latencies and counts of names past `maxNames` are kept. */
export const otherName = "(other)"

const emptySnapshot: MetricsSnapshot = { latencies: {}, counters: {}, promptTokens: 0, outputTokens: 0 }

/**
 * Names within `options.maxNames`: a name seen before, or a new one while fewer
 * than `maxNames` are known, is itself; any further name is `otherName`.
 */
export const makeNameSlots = (options: MetricsOptions = {}): ((name: string) => string) => {
  const maxNames = positive(options.maxNames, metricsDefaults.maxNames)
  const known = new Set<string>()
  return (name) => {
    if (known.has(name)) return name
    if (known.size >= maxNames) return otherName
    known.add(name)
    return name
  }
}

/** The most recent latency samples per layer, within `options`' bounds. */
export interface LatencySamples {
  /** Records a sample; returns the name it was kept under (`otherName` past `maxNames`). */
  readonly record: (layer: string, millis: number) => string
  /** Per layer, the kept samples, oldest first (copies). */
  readonly snapshot: () => Record<string, ReadonlyArray<number>>
}

/** Per layer a ring of the last `maxSamples` latencies, at most `maxNames` layers. */
export const makeLatencySamples = (options: MetricsOptions = {}): LatencySamples => {
  const maxSamples = positive(options.maxSamples, metricsDefaults.maxSamples)
  const slot = makeNameSlots(options)
  const rings = new Map<string, Ring<number>>()
  return {
    record: (layer, millis) => {
      const key = slot(layer)
      let ring = rings.get(key)
      if (ring === undefined) rings.set(key, (ring = new Ring(maxSamples)))
      ring.push(millis)
      return key
    },
    snapshot: () => Object.fromEntries([...rings].map(([layer, ring]) => [layer, ring.toArray()]))
  }
}

/**
 * In-memory metrics within `options`' bounds: per layer a ring of the last
 * `maxSamples` latencies (the snapshot lists them oldest first), counters summed
 * per name, token totals.
 */
export const makeMetricsBounded = (options: MetricsOptions = {}): Effect.Effect<MetricsService> =>
  Effect.sync(() => {
    const latencies = makeLatencySamples(options)
    const slot = makeNameSlots(options)
    const counters = new Map<string, number>()
    let promptTokens = 0
    let outputTokens = 0
    return {
      recordLatency: (layer, millis) => Effect.sync(() => void latencies.record(layer, millis)),
      recordTokens: (usage: TokenUsage) =>
        Effect.sync(() => {
          promptTokens += usage.promptTokens
          outputTokens += usage.outputTokens
        }),
      increment: (name, delta = 1) =>
        Effect.sync(() => {
          const key = slot(name)
          counters.set(key, (counters.get(key) ?? 0) + delta)
        }),
      snapshot: Effect.sync(() => ({
        latencies: latencies.snapshot(),
        counters: Object.fromEntries(counters),
        promptTokens,
        outputTokens
      }))
    } satisfies MetricsService
  })

/** In-memory metrics with the default bounds (`metricsDefaults`). */
export const makeMetrics: Effect.Effect<MetricsService> = makeMetricsBounded()

export const metricsMemory: Layer.Layer<Metrics> = Layer.effect(Metrics, makeMetrics)

/** In-memory metrics within `options`' bounds. */
export const metricsBounded = (options: MetricsOptions): Layer.Layer<Metrics> =>
  Layer.effect(Metrics, makeMetricsBounded(options))

export const metricsNoop: Layer.Layer<Metrics> = Layer.succeed(Metrics, {
  enabled: false,
  recordLatency: () => Effect.void,
  recordTokens: () => Effect.void,
  increment: () => Effect.void,
  snapshot: Effect.succeed(emptySnapshot)
})
