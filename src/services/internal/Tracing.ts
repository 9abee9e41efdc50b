/**
 * Whether spans go anywhere. With Effect's native tracer (no tracer installed)
 * a span is built, timed and dropped: about 35 Effect operations and a few
 * allocations for nothing. Engines and loops open their own spans only when the
 * tracer in use exports them (the loops also when events are recorded, whose
 * records carry span ids: programs/internal/Observed).
 */
import type * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as HashMap from "effect/HashMap"
import * as Option from "effect/Option"
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
  Effect.withFiberRuntime((fiber) => exports(fiber.currentTracer) ? spanIn(fiber, name, options, effect) : effect)

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
 * `Effect.withSpan` (never with a stack trace) at a third of its operations (8
 * against 35): see `spanIn`.
 */
export const withSpan = (name: string, options: Omit<Tracer.SpanOptions, "captureStackTrace"> = {}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>> =>
  Effect.withFiberRuntime((fiber) => spanIn(fiber, name, options, effect))

/**
 * What `spanIn` does besides the span, in the steps that open and end it (its
 * methods called as methods: a class's instance serves, with no closure made
 * per span).
 */
export interface SpanExtras<A, B> {
  /** A fiber ref set to a value for the effect (once the span is open), set back when it ends. */
  readonly local?: LocalValue | undefined
  /** Run on the span as it opens, after the options' attributes are put on it (to put the caller's own), before `local` is set. */
  onOpen?(span: Tracer.Span): void
  /** What a success becomes, in the step that ends the span (still open: it may be annotated): the span's exit and the result. */
  onSuccess?(a: A, span: Tracer.Span): B
}

/** A fiber ref and the value `spanIn` sets it to. */
export interface LocalValue {
  readonly ref: FiberRef.FiberRef<unknown>
  readonly value: unknown
}

/** `ref` set to `value` by `spanIn` (see `SpanExtras.local`). */
export const local = <V>(ref: FiberRef.FiberRef<V>, value: V): LocalValue => ({ ref: ref as FiberRef.FiberRef<unknown>, value })

/**
 * `effect` in a span `fiber` opens, for a caller already in a step of `fiber`
 * (`withFiberRuntime`). Effect's `withSpan` opens the span, sets it as the
 * parent with `provideService` (an `acquireUseRelease`, about 22 operations)
 * inside an `onExit` that ends it (about 9 more): some 35 operations a span.
 * Here one uninterruptible region opens the span as `Effect.makeSpan` does (the
 * parent, the tracer's span, the annotations and links of the fiber, the
 * options' attributes), sets it as the parent, runs the effect in the caller's
 * interruptibility and, however it ends, ends the span (with the exit, at the
 * Clock's time when tracer timing is on, unless it was ended already, as
 * Effect's does) and sets the context back, the context set by the fiber itself
 * in the steps that open and end the span (services/internal/Local). With
 * `extras`, the same steps also set a fiber ref for the effect, put the caller's
 * attributes on the span, and turn the success into its result.
 */
export const spanIn = <A, E, R, B = A>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  name: string,
  options: Omit<Tracer.SpanOptions, "captureStackTrace">,
  effect: Effect.Effect<A, E, R>,
  extras?: SpanExtras<A, B>
): Effect.Effect<B, E, Exclude<R, Tracer.ParentSpan>> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.matchCauseEffect(restore(effect) as Effect.Effect<A, E>, new Region<A, E, B>(fiber, name, options, extras))
  )

/**
 * One span of `spanIn`: opened when made (in the step that starts the effect),
 * ended by whichever of `onFailure` and `onSuccess` the effect's end calls (the
 * handlers of its match, bound once: no closure per span).
 */
class Region<A, E, B> {
  readonly span: Tracer.Span
  readonly outer: Context.Context<never>
  readonly old: unknown
  readonly onFailure: (cause: Cause.Cause<E>) => Exit.Exit<never, E>
  readonly onSuccess: (a: A) => Exit.Exit<B>

  constructor(
    readonly fiber: Fiber.RuntimeFiber<unknown, unknown>,
    name: string,
    options: Tracer.SpanOptions,
    readonly extras: SpanExtras<A, B> | undefined
  ) {
    const outer = this.outer = fiber.currentContext
    const span = this.span = open(fiber, outer, name, options)
    extras?.onOpen?.(span)
    // nothing set before the span is made and annotated (either may throw); then the fiber ref, and the span as the
    // parent inside, set and set back by the fiber itself in the steps that run (services/internal/Local)
    const local = extras?.local
    if (local !== undefined) {
      this.old = fiber.getFiberRef(local.ref)
      Local.setRef(fiber, local.ref, local.value)
    }
    Local.setRef(fiber, FiberRef.currentContext, Context.add(outer, Tracer.ParentSpan, span))
    this.onFailure = this.failed.bind(this)
    this.onSuccess = this.succeeded.bind(this)
  }

  failed(cause: Cause.Cause<E>): Exit.Exit<never, E> {
    const exit = Exit.failCause(cause)
    this.leave(exit)
    return exit
  }

  succeeded(a: A): Exit.Exit<B> {
    const extras = this.extras
    const exit = Exit.succeed(extras?.onSuccess === undefined ? a as unknown as B : extras.onSuccess(a, this.span))
    this.leave(exit)
    return exit
  }

  private leave(exit: Exit.Exit<unknown, unknown>): void {
    const { fiber, span } = this
    if (span.status._tag !== "Ended") {
      const timed = fiber.getFiberRef(FiberRef.currentTracerTimingEnabled)
      span.end(timed ? Context.get(fiber.getFiberRef(DefaultServices.currentServices), Clock.Clock).unsafeCurrentTimeNanos() : 0n, exit)
    }
    Local.setRef(fiber, FiberRef.currentContext, this.outer)
    const local = this.extras?.local
    if (local !== undefined) Local.setRef(fiber, local.ref, this.old)
  }
}

/**
 * The span `Effect.makeSpan(name, options)` would open in `fiber` (whose context
 * is `context`), without a stack trace: a no-op span when tracing is off or the
 * options' context disables propagation.
 */
const open = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  context: Context.Context<never>,
  name: string,
  options: Tracer.SpanOptions
): Tracer.Span => {
  const parent = options.parent !== undefined
    ? Option.some(options.parent)
    : options.root === true
    ? Option.none()
    : propagated(context.unsafeMap.get(Tracer.ParentSpan.key) as Tracer.AnySpan | undefined)
  if (
    !fiber.getFiberRef(FiberRef.currentTracerEnabled) ||
    (options.context !== undefined && Context.get(options.context, Tracer.DisablePropagation))
  ) {
    return Object.assign(Object.create(noopSpanProto), {
      name,
      parent,
      context: Context.add(options.context ?? Context.empty(), Tracer.DisablePropagation, true)
    })
  }
  const services = fiber.getFiberRef(DefaultServices.currentServices)
  const timed = fiber.getFiberRef(FiberRef.currentTracerTimingEnabled)
  const annotations = fiber.getFiberRef(FiberRef.currentTracerSpanAnnotations)
  const linked = fiber.getFiberRef(FiberRef.currentTracerSpanLinks)
  const links = Chunk.isEmpty(linked)
    ? options.links ?? []
    : options.links !== undefined
    ? [...Chunk.toReadonlyArray(linked), ...options.links]
    : Chunk.toReadonlyArray(linked)
  const span = Context.get(services, Tracer.Tracer).span(
    name,
    parent,
    options.context ?? Context.empty(),
    links,
    timed ? Context.get(services, Clock.Clock).unsafeCurrentTimeNanos() : 0n,
    options.kind ?? "internal",
    options
  )
  if (HashMap.size(annotations) > 0) HashMap.forEach(annotations, (value, key) => span.attribute(key, value))
  if (options.attributes !== undefined) for (const key in options.attributes) span.attribute(key, options.attributes[key])
  return span
}

/** The parent span as Effect finds it: the nearest span up the chain that does not disable propagation. */
const propagated = (span: Tracer.AnySpan | undefined): Option.Option<Tracer.AnySpan> => {
  while (span !== undefined) {
    if (!Context.get(span.context, Tracer.DisablePropagation)) return Option.some(span)
    span = span._tag === "Span" ? Option.getOrUndefined(span.parent) : undefined
  }
  return Option.none()
}

/** Effect's no-op span (what `Effect.makeSpan` opens when tracing is off), the same fields. */
const noopSpanProto: Omit<Tracer.Span, "name" | "parent" | "context"> = {
  _tag: "Span",
  spanId: "noop",
  traceId: "noop",
  sampled: false,
  status: { _tag: "Ended", startTime: 0n, endTime: 0n, exit: Exit.void },
  attributes: new Map(),
  links: [],
  kind: "internal",
  attribute() {},
  event() {},
  end() {},
  addLinks() {}
}
