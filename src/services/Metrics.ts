/**
 * Layer 10: observability, metrics: latencies per layer, counters and token totals.
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
}

/** Collects metrics. */
export class Metrics extends Context.Tag("pagantic/Metrics")<Metrics, Service>() {}

/** Applies `f` to the Metrics service when one is in the context. */
export const withMetrics = (f: (metrics: Service) => Effect.Effect<void>): Effect.Effect<void> =>
  Effect.flatMap(Effect.serviceOption(Metrics), (m) =>
    m._tag === "None" ? Effect.void : f(m.value)
  )
