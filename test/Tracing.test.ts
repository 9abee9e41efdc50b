/**
 * services/internal/Tracing.withSpan: Effect.withSpan's span (name, options,
 * parent, the exit it ends with) at fewer operations; Tracing.annotate:
 * Effect.annotateCurrentSpan in one step.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import * as Tracing from "../src/services/internal/Tracing.js"
import { operations } from "./support/Operations.js"

const ended = (span: Tracer.Span) => (span.status._tag === "Ended" ? span.status : undefined)

describe("Tracing.withSpan", () => {
  it.effect("the effect runs in the span (its parent the caller's span); the span ends with the effect's exit", () =>
    Effect.gen(function* () {
      const [outer, inner, after] = yield* Effect.all([
        Effect.currentSpan,
        Tracing.withSpan("inner", { kind: "client", attributes: { a: 1 } })(Effect.currentSpan),
        Effect.currentSpan
      ]).pipe(Effect.withSpan("outer"))
      expect(after).toBe(outer)
      expect(inner.name).toBe("inner")
      expect(inner.kind).toBe("client")
      expect(inner.attributes.get("a")).toBe(1)
      expect(Option.getOrThrow(inner.parent)).toBe(outer)
      expect(ended(inner)?.exit).toEqual(Exit.succeed(inner))
      // the caller's span is the current one again
      expect(yield* Effect.option(Effect.currentSpan)).toEqual(Option.none())
    }))

  it.effect("a failure ends the span with the failure; the context is set back", () =>
    Effect.gen(function* () {
      let seen: Tracer.Span | undefined
      const exit = yield* Effect.exit(
        Tracing.withSpan("failing")(Effect.flatMap(Effect.currentSpan, (s) => ((seen = s), Effect.fail("no" as const))))
      )
      expect(exit).toEqual(Exit.fail("no"))
      expect(ended(seen!)?.exit).toEqual(Exit.fail("no"))
      expect(yield* Effect.option(Effect.currentSpan)).toEqual(Option.none())
    }))

  it.effect("an interrupted effect ends its span, interrupted", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<Tracer.Span>()
      const fiber = yield* Effect.fork(
        Tracing.withSpan("hangs")(Effect.zipRight(Effect.flatMap(Effect.currentSpan, (s) => Deferred.succeed(started, s)), Effect.never))
      )
      const span = yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      const status = ended(span)
      expect(status !== undefined && Exit.isInterrupted(status.exit)).toBe(true)
    }))

  it.effect("a span the effect ended itself is not ended again", () =>
    Effect.gen(function* () {
      let span: Tracer.Span | undefined
      yield* Tracing.withSpan("self-ended")(Effect.flatMap(Effect.currentSpan, (s) =>
        Effect.sync(() => {
          span = s
          s.end(1n, Exit.fail("early"))
        })))
      expect(ended(span!)).toMatchObject({ endTime: 1n, exit: Exit.fail("early") })
    }))

  it.effect("the span opened as Effect.makeSpan opens it: the fiber's span annotations and links; a no-op span with tracing off", () =>
    Effect.gen(function* () {
      const linked = yield* Effect.makeSpan("linked")
      const annotated = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        effect.pipe(Effect.annotateSpans({ k: "v" }), Effect.linkSpans(linked, { why: "test" }))
      const ours = yield* annotated(Tracing.withSpan("s", { attributes: { a: 1 } })(Effect.currentSpan))
      const effects = yield* annotated(Effect.withSpan(Effect.currentSpan, "s", { attributes: { a: 1 }, captureStackTrace: false }))
      expect([...ours.attributes.entries()]).toEqual([...effects.attributes.entries()])
      expect(ours.links).toEqual(effects.links)
      const off = (span: Tracer.Span) => [span.name, span.spanId, span.sampled, span.status._tag, Option.isNone(span.parent)]
      const oursOff = yield* Tracing.withSpan("off")(Effect.currentSpan).pipe(Effect.withTracerEnabled(false))
      const effectsOff = yield* Effect.withSpan(Effect.currentSpan, "off").pipe(Effect.withTracerEnabled(false))
      expect(off(oursOff)).toEqual(off(effectsOff))
    }))

  it.effect("costs fewer operations than Effect.withSpan", () =>
    Effect.gen(function* () {
      const ours = yield* operations(Tracing.withSpan("s")(Effect.void))
      const effects = yield* operations(Effect.withSpan(Effect.void, "s", { captureStackTrace: false }))
      expect(ours).toBeLessThanOrEqual(8)
      expect(ours).toBeLessThan(effects)
    }))
})

describe("Tracing.annotate", () => {
  it.effect("puts the attributes on the span the fiber runs in, as Effect.annotateCurrentSpan; nothing outside a span", () =>
    Effect.gen(function* () {
      const span = yield* Tracing.withSpan("s")(Effect.zipRight(Tracing.annotate({ a: 1, b: "x" }), Effect.currentSpan))
      expect([...span.attributes.entries()]).toEqual([["a", 1], ["b", "x"]])
      // outside any span: nothing to annotate, no failure
      yield* Tracing.annotate({ a: 1 })
      // the same attributes as Effect's own on the same span
      const both = yield* Tracing.withSpan("t")(
        Effect.zipRight(Tracing.annotate({ c: 1 }), Effect.zipRight(Effect.annotateCurrentSpan({ d: 1 }), Effect.currentSpan))
      )
      expect([...both.attributes.entries()]).toEqual([["c", 1], ["d", 1]])
      const effects = yield* operations(Effect.annotateCurrentSpan({ a: 1 }))
      expect(yield* operations(Tracing.annotate({ a: 1 }))).toBeLessThan(effects)
    }))
})
