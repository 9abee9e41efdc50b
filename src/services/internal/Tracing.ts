/**
 * Whether spans go anywhere. With Effect's native tracer (no tracer installed)
 * a span is built, timed and dropped: about 35 Effect operations and a few
 * allocations for nothing. Engines and loops open their own spans only when the
 * tracer in use exports them (the loops also when events are recorded, whose
 * records carry span ids: programs/internal/Observed).
 */
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as Effect from "effect/Effect"
import * as Tracer from "effect/Tracer"

const nativeTracer = Context.get(DefaultServices.liveServices, Tracer.Tracer)

/** Whether the tracer in use exports spans: any tracer but Effect's native one. */
export const exporting: Effect.Effect<boolean> = Effect.withFiberRuntime((fiber) => Effect.succeed(fiber.currentTracer !== nativeTracer))

/** Whether `tracer` exports spans: any tracer but Effect's native one. */
export const exports = (tracer: Tracer.Tracer): boolean => tracer !== nativeTracer

/** A span around `effect` when the tracer exports spans; `effect` alone otherwise. Never with a stack trace. */
export const exportedSpan = (name: string, options: Omit<Tracer.SpanOptions, "captureStackTrace"> = {}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(exporting, (on) => on ? Effect.withSpan(effect, name, { ...options, captureStackTrace: false }) : effect)
