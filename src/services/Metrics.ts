/**
 * Metrics: latencies per layer, counters and token totals, with a snapshot that
 * reads them back.
 *
 * Two implementations, one store each. The exporting one (Telemetry's
 * `metrics`) records into Effect's `Metric` and nowhere else, and its snapshot
 * reads Effect's registry back, so what is exported and what is read cannot
 * drift. The in-memory one (InMemoryObserve's `metricsMemory`) keeps its own
 * counts: Effect's registry is global to the process, so counts kept there
 * would be shared by every layer built in the process, and a test (or a second
 * server in one process) could no longer read what its own layer saw. A
 * histogram keeps buckets, not samples, so the snapshot's latency lists are
 * recent samples kept beside it by either implementation.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type { TokenUsage } from "../domain/TokenUsage.js"

export interface Snapshot {
  /** Per layer, the latencies in milliseconds in the order recorded (a bounded implementation keeps the most recent). */
  readonly latencies: Readonly<Record<string, ReadonlyArray<number>>>
  readonly counters: Readonly<Record<string, number>>
  readonly promptTokens: number
  readonly outputTokens: number
}

export interface Service {
  readonly recordLatency: (layer: string, millis: number) => Effect.Effect<void>
  readonly recordTokens: (usage: TokenUsage) => Effect.Effect<void>
  readonly increment: (name: string, delta?: number) => Effect.Effect<void>
  readonly snapshot: Effect.Effect<Snapshot>
  /** False for metrics that keep nothing: the loops then count nobody listening (no clock read, no span, no metric call). */
  readonly enabled?: boolean
}

/** Collects metrics. */
export class Metrics extends Context.Tag("pagantic/Metrics")<Metrics, Service>() {}

/** Applies `f` to the Metrics service when one is in the context and keeps what it is given. */
export const withMetrics = (f: (metrics: Service) => Effect.Effect<void>): Effect.Effect<void> =>
  // read from the fiber's context in one step (most calls find none)
  Effect.withFiberRuntime((fiber) => {
    const m = fiber.currentContext.unsafeMap.get(Metrics.key) as Service | undefined
    return m === undefined || m.enabled === false ? Effect.void : f(m)
  })
