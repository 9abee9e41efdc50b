/**
 * Layer 10: observability, events.
 *
 * Every layer records what it did as events that carry the correlation context of
 * the request (request_id always, session_id in chat, step_name in plans,
 * tool_call_id for tools). The current correlation travels with the fiber
 * (`currentCorrelation`), so a loop sets it once and every event below it is
 * stamped. Spans come from `Effect.fn`/`Effect.withSpan` for OpenTelemetry.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import type * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Tracer from "effect/Tracer"
import type { Event } from "../domain/Event.js"
import { CorrelationContext } from "../domain/System.js"
import * as Local from "./internal/Local.js"
import * as Construct from "../domain/Construct.js"

/** The correlation context of the running fiber; events read it when recorded. */
export const currentCorrelation: FiberRef.FiberRef<CorrelationContext> = FiberRef.unsafeMake(
  new CorrelationContext({ requestId: "unscoped" })
)

export interface Service {
  readonly record: (event: Event) => Effect.Effect<void>
  /** False for a log that keeps nothing: `recordEvent` then does not even build the event. */
  readonly enabled?: boolean
  /** A copy of the events kept (a bounded log drops the oldest first), in the order recorded. */
  readonly events: Effect.Effect<ReadonlyArray<Event>>
  /**
   * The events recorded from now on, as they are recorded, until the scope
   * closes (each the same instance `events` holds). A subscriber that falls
   * behind loses its oldest unread events, never holding up the recorder. A
   * log without it is read by polling `events`.
   */
  readonly subscribe?: Effect.Effect<Queue.Dequeue<Event>, never, Scope.Scope> | undefined
}

/** Records events. */
export class EventLog extends Context.Tag("pagantic/EventLog")<EventLog, Service>() {}

/** What every event is stamped with when recorded. */
export interface EventBase {
  readonly timestamp: number
  readonly correlation: CorrelationContext
}

/**
 * Records an event built from the current correlation and the Clock's time.
 * Records nothing when no EventLog is in the context, so observability is opt-in.
 * The event's span id is the span it is recorded in, its parent span id that
 * span's parent (unless the correlation names them already).
 */
export const recordEvent = (build: (base: EventBase) => Event): Effect.Effect<void> =>
  // the log read from the fiber's context in the step that decides (no serviceOption and flatMap: most calls find none)
  Effect.withFiberRuntime((fiber) => {
    const log = fiber.currentContext.unsafeMap.get(EventLog.key) as Service | undefined
    if (log === undefined || log.enabled === false) return Effect.void
    return Effect.flatMap(Clock.currentTimeMillis, (timestamp) =>
      Effect.withFiberRuntime((now) => {
        const correlation = now.getFiberRef(currentCorrelation)
        const span = Context.getOption(now.currentContext, Tracer.ParentSpan)
        return log.record(build({ correlation: withSpanIds(correlation, span), timestamp }))
      }))
  })

const withSpanIds = (correlation: CorrelationContext, span: Option.Option<Tracer.AnySpan>): CorrelationContext => {
  if (Option.isNone(span) || correlation.spanId !== undefined) return correlation
  const parent = span.value._tag === "Span" ? span.value.parent : Option.none()
  return Construct.unchecked(CorrelationContext, {
    ...correlation,
    spanId: span.value.spanId,
    ...(Option.isSome(parent) ? { parentSpanId: parent.value.spanId } : {})
  })
}

/** Runs `effect` with fields of the correlation context replaced. */
export const withCorrelation =
  (fields: Partial<CorrelationContext>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Local.locallyWith(effect, currentCorrelation, (current) => Construct.unchecked(CorrelationContext, { ...current, ...fields }))
