/**
 * Whether spans go anywhere. With Effect's native tracer (no tracer installed)
 * a span is built, timed and dropped: about 35 Effect operations and a few
 * allocations for nothing. Engines and loops open their own spans only when the
 * tracer in use exports them (the loops also when events are recorded, whose
 * records carry span ids: programs/internal/Observed).
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberRef from "effect/FiberRef"
import * as Tracer from "effect/Tracer"

const nativeTracer = Context.get(DefaultServices.liveServices, Tracer.Tracer)

/** Whether the tracer in use exports spans: any tracer but Effect's native one. */
export const exporting: Effect.Effect<boolean> = Effect.withFiberRuntime((fiber) => Effect.succeed(fiber.currentTracer !== nativeTracer))

/** Whether `tracer` exports spans: any tracer but Effect's native one. */
export const exports = (tracer: Tracer.Tracer): boolean => tracer !== nativeTracer

/** A span around `effect` when the tracer exports spans; `effect` alone otherwise. Never with a stack trace. */
export const exportedSpan = (name: string, options: Omit<Tracer.SpanOptions, "captureStackTrace"> = {}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => exports(fiber.currentTracer) ? withSpan(name, options)(effect) : effect)

/**
 * `Effect.withSpan` (never with a stack trace) at half of its
 * operations. Effect's opens the span, sets it as the parent with
 * `provideService` (an `acquireUseRelease`, about 22 operations) inside an
 * `onExit` that ends it (about 9 more): some 35 operations a span, on a traced
 * AgentLoop turn of four spans. Here one uninterruptible region sets the parent,
 * runs the effect in the caller's interruptibility and, however it ends, ends
 * the span (with the exit, at the Clock's time when tracer timing is on, unless
 * it was ended already, as Effect's does) and sets the context back.
 */
export const withSpan = (name: string, options: Omit<Tracer.SpanOptions, "captureStackTrace"> = {}) => {
  const spanOptions: Tracer.SpanOptions = { ...options, captureStackTrace: false }
  return <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(Effect.makeSpan(name, spanOptions), (span) =>
        Effect.withFiberRuntime<A, E, Exclude<R, Tracer.ParentSpan>>((fiber) => {
          const outer = fiber.currentContext
          const end = (exit: Exit.Exit<unknown, unknown>) => {
            if (span.status._tag === "Ended") return
            const timed = fiber.getFiberRef(FiberRef.currentTracerTimingEnabled)
            span.end(timed ? Context.get(fiber.getFiberRef(DefaultServices.currentServices), Clock.Clock).unsafeCurrentTimeNanos() : 0n, exit)
          }
          const inside = Effect.zipRight(
            FiberRef.set(FiberRef.currentContext, Context.add(outer, Tracer.ParentSpan, span)),
            restore(effect) as Effect.Effect<A, E>
          )
          return Effect.matchCauseEffect(inside, {
            onFailure: (cause) => {
              end(Exit.failCause(cause))
              return Effect.zipRight(FiberRef.set(FiberRef.currentContext, outer), Effect.failCause(cause))
            },
            onSuccess: (a) => {
              end(Exit.succeed(a))
              return Effect.as(FiberRef.set(FiberRef.currentContext, outer), a)
            }
          })
        })
      )
    )
}
