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
import * as Local from "./Local.js"

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
 * `Effect.annotateCurrentSpan(attributes)` in one step: the attributes put on
 * the span the fiber runs in (none outside a span, or under a span that
 * disables propagation, as Effect's).
 */
export const annotate = (attributes: Readonly<Record<string, unknown>>): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const span = fiber.currentContext.unsafeMap.get(Tracer.ParentSpan.key) as Tracer.AnySpan | undefined
    if (span !== undefined && span._tag === "Span" && !Context.get(span.context, Tracer.DisablePropagation)) {
      for (const key in attributes) span.attribute(key, attributes[key])
    }
    return Effect.void
  })

/**
 * `Effect.withSpan` (never with a stack trace) at a third of its
 * operations (12 against 35). Effect's opens the span, sets it as the parent with
 * `provideService` (an `acquireUseRelease`, about 22 operations) inside an
 * `onExit` that ends it (about 9 more): some 35 operations a span, on a traced
 * AgentLoop turn of four spans. Here one uninterruptible region sets the parent,
 * runs the effect in the caller's interruptibility and, however it ends, ends
 * the span (with the exit, at the Clock's time when tracer timing is on, unless
 * it was ended already, as Effect's does) and sets the context back, the
 * context set by the fiber itself in the steps that run (services/internal/Local).
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
          // the span is the parent inside, set and set back by the fiber itself in the steps that run (services/internal/Local)
          Local.setRef(fiber, FiberRef.currentContext, Context.add(outer, Tracer.ParentSpan, span))
          return Effect.matchCauseEffect(restore(effect) as Effect.Effect<A, E>, {
            onFailure: (cause) =>
              Effect.withFiberRuntime<never, E>((back) => {
                end(Exit.failCause(cause))
                Local.setRef(back, FiberRef.currentContext, outer)
                return Effect.failCause(cause)
              }),
            onSuccess: (a) =>
              Effect.withFiberRuntime<A>((back) => {
                end(Exit.succeed(a))
                Local.setRef(back, FiberRef.currentContext, outer)
                return Effect.succeed(a)
              })
          })
        })
      )
    )
}
