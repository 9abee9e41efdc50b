/**
 * Layer 10: observability.
 *
 * Every layer records what it did as events that carry the correlation context of
 * the request (request_id always, session_id in chat, step_name in plans,
 * tool_call_id for tools). The current correlation travels with the fiber
 * (`currentCorrelation`), so a loop sets it once and every event below it is
 * stamped. Metrics and cost are separate services; each has in-memory and no-op
 * layers, and spans come from `Effect.fn`/`Effect.withSpan` for OpenTelemetry.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import type { Event } from "../domain/Event.js"
import { CorrelationContext } from "../domain/System.js"
import type { TokenUsage } from "../domain/TokenUsage.js"

/** The correlation context of the running fiber; events read it when recorded. */
export const currentCorrelation: FiberRef.FiberRef<CorrelationContext> = FiberRef.unsafeMake(
  new CorrelationContext({ requestId: "unscoped" })
)

export interface EventLogService {
  readonly record: (event: Event) => Effect.Effect<void>
  /** A copy of the events recorded so far, in order. */
  readonly events: Effect.Effect<ReadonlyArray<Event>>
}

/** Records events. */
export class EventLog extends Context.Tag("pagantic/EventLog")<EventLog, EventLogService>() {}

export interface MetricsSnapshot {
  readonly latencies: Readonly<Record<string, ReadonlyArray<number>>>
  readonly counters: Readonly<Record<string, number>>
  readonly promptTokens: number
  readonly outputTokens: number
}

export interface MetricsService {
  readonly recordLatency: (layer: string, millis: number) => Effect.Effect<void>
  readonly recordTokens: (usage: TokenUsage) => Effect.Effect<void>
  readonly increment: (name: string, delta?: number) => Effect.Effect<void>
  readonly snapshot: Effect.Effect<MetricsSnapshot>
}

/** Collects metrics. */
export class Metrics extends Context.Tag("pagantic/Metrics")<Metrics, MetricsService>() {}

export interface CostTrackerService {
  readonly recordUsage: (model: string, usage: TokenUsage) => Effect.Effect<void>
  readonly totalCost: Effect.Effect<number>
}

/** Tracks what inference cost. */
export class CostTracker extends Context.Tag("pagantic/CostTracker")<CostTracker, CostTrackerService>() {}
