/**
 * An engine's parts by callback (Engine.streamFrom, runParts, tapParts,
 * unwrapParts): a source and the stream it is attached to give the same parts,
 * failures and interruptions; `runParts` runs a source in the caller's fiber; a
 * Stream combinator's result never runs the source of the stream it wraps.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Engine from "../src/services/Engine.js"
import { InferenceResult, StreamPart } from "../src/services/Engine.js"

const result = new InferenceResult({
  content: "a b",
  toolCalls: [],
  usage: TokenUsage.make({ promptTokens: 3, outputTokens: 2 }),
  finishReason: "stop"
})
const parts: ReadonlyArray<StreamPart> = [StreamPart.textDelta("a "), StreamPart.textDelta("b"), StreamPart.finish(result)]

/** A source of `parts`, counting its runs and noting the fiber each emit ran in. */
const counted = () => {
  const state = { runs: 0, fibers: [] as Array<string> }
  const source: Engine.PartSource = (emit) =>
    Effect.suspend(() => {
      state.runs++
      return Effect.forEach(parts, (part) =>
        Effect.zipRight(
          Effect.flatMap(Effect.fiberId, (id) => Effect.sync(() => state.fibers.push(String(id)))),
          emit(part)
        ), { discard: true })
    })
  return { state, stream: Engine.streamFrom(source) }
}

const collect = (stream: Stream.Stream<StreamPart, InferenceFailure>) =>
  Effect.gen(function*() {
    const seen: Array<StreamPart> = []
    yield* Engine.runParts(stream, (part) => Effect.sync(() => seen.push(part)))
    return seen
  })

const boom = InferenceFailure.engineError("the engine broke")

describe("Engine parts by callback", () => {
  it.effect("a source and its stream give the same parts in order", () =>
    Effect.gen(function*() {
      const { state, stream } = counted()
      const byCallback = yield* collect(stream)
      const byStream = Chunk.toReadonlyArray(yield* Stream.runCollect(stream))
      expect(byCallback).toEqual(parts)
      expect(byStream).toEqual(parts)
      expect(state.runs).toBe(2)
    }))

  it.effect("runParts runs a source in the caller's fiber; the stream runs it in a fiber of its own", () =>
    Effect.gen(function*() {
      const { state, stream } = counted()
      const caller = String(yield* Effect.fiberId)
      yield* collect(stream)
      expect(new Set(state.fibers)).toEqual(new Set([caller]))
      state.fibers.length = 0
      yield* Stream.runDrain(stream)
      expect(state.fibers).toHaveLength(parts.length)
      expect(state.fibers).not.toContain(caller)
    }))

  it.effect("a Stream combinator's result is run as a stream, never by the source it wraps", () =>
    Effect.gen(function*() {
      const { stream } = counted()
      const mapped = Stream.map(stream, (part) => part._tag === "TextDelta" ? StreamPart.textDelta(part.text.toUpperCase()) : part)
      const seen = yield* collect(mapped)
      expect(seen.map((p) => p._tag === "TextDelta" ? p.text : p._tag)).toEqual(["A ", "B", "Finish"])
      // a stream without a source is run by Stream.runForEach
      expect(yield* collect(Stream.fromIterable(parts))).toEqual(parts)
    }))

  it.effect("tapParts taps each part once, before it is emitted, by callback and as a stream", () =>
    Effect.gen(function*() {
      const { state, stream } = counted()
      const order: Array<string> = []
      const tapped = Engine.tapParts(stream, (part) => Effect.sync(() => order.push(`tap ${part._tag}`)))
      const caller = String(yield* Effect.fiberId)
      yield* Engine.runParts(tapped, (part) => Effect.sync(() => order.push(`emit ${part._tag}`)))
      expect(order).toEqual([
        "tap TextDelta", "emit TextDelta", "tap TextDelta", "emit TextDelta", "tap Finish", "emit Finish"
      ])
      // by callback all the way down
      expect(new Set(state.fibers)).toEqual(new Set([caller]))
      order.length = 0
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(tapped))).toEqual(parts)
      expect(order).toEqual(["tap TextDelta", "tap TextDelta", "tap Finish"])
    }))

  it.effect("tapParts passes on a part its tap returns undefined for, by callback and as a stream", () =>
    Effect.gen(function*() {
      const { stream } = counted()
      const order: Array<string> = []
      const tapped = Engine.tapParts(stream, (part) =>
        part._tag === "Finish" ? Effect.sync(() => void order.push("tap Finish")) : undefined)
      yield* Engine.runParts(tapped, (part) => Effect.sync(() => void order.push(`emit ${part._tag}`)))
      expect(order).toEqual(["emit TextDelta", "emit TextDelta", "tap Finish", "emit Finish"])
      order.length = 0
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(tapped))).toEqual(parts)
      expect(order).toEqual(["tap Finish"])
    }))

  it.effect("unwrapParts makes its stream once per run and runs it by its source", () =>
    Effect.gen(function*() {
      const { state, stream } = counted()
      let made = 0
      const unwrapped = Engine.unwrapParts(Effect.sync(() => {
        made++
        return stream
      }))
      const caller = String(yield* Effect.fiberId)
      expect(yield* collect(unwrapped)).toEqual(parts)
      expect(made).toBe(1)
      expect(new Set(state.fibers)).toEqual(new Set([caller]))
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(unwrapped))).toEqual(parts)
      expect(made).toBe(2)
      // a failure making the stream is the stream's failure, either way
      const failing = Engine.unwrapParts(Effect.fail(boom))
      expect(yield* Effect.flip(collect(failing))).toBe(boom)
      expect(yield* Effect.flip(Stream.runCollect(failing))).toBe(boom)
    }))

  it.effect("a source's failure after a part fails both ways, the part first", () =>
    Effect.gen(function*() {
      const failing = Engine.streamFrom((emit) => Effect.zipRight(emit(StreamPart.textDelta("x")), Effect.fail(boom)))
      const seen: Array<StreamPart> = []
      const exit = yield* Effect.exit(Engine.runParts(failing, (part) => Effect.sync(() => seen.push(part))))
      expect(exit).toEqual(Exit.fail(boom))
      expect(seen).toEqual([StreamPart.textDelta("x")])
      seen.length = 0
      const streamed = yield* Effect.exit(Stream.runForEach(failing, (part) => Effect.sync(() => seen.push(part))))
      expect(streamed).toEqual(Exit.fail(boom))
      expect(seen).toEqual([StreamPart.textDelta("x")])
      // a consumer's own failure stops the source and is the run's failure
      const { state, stream } = counted()
      const stopped = yield* Effect.flip(Engine.runParts(stream, () => Effect.fail("enough" as const)))
      expect(stopped).toBe("enough")
      expect(state.fibers).toHaveLength(1)
    }))

  it.live("interrupting the consumer interrupts the source, both ways", () =>
    Effect.gen(function*() {
      for (const run of ["callback", "stream"] as const) {
        const started = yield* Deferred.make<void>()
        const stopped = yield* Deferred.make<void>()
        const hanging = Engine.streamFrom((emit) =>
          Effect.zipRight(
            emit(StreamPart.textDelta("x")),
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
          ).pipe(Effect.onInterrupt(() => Deferred.succeed(stopped, undefined)))
        )
        const consumer = yield* Effect.fork(
          run === "callback" ? Engine.runParts(hanging, () => Effect.void) : Stream.runDrain(hanging)
        )
        yield* Deferred.await(started)
        yield* Fiber.interrupt(consumer)
        // bounded: a source left running would never complete `stopped`
        expect(yield* Effect.timeout(Deferred.await(stopped), "2 seconds").pipe(Effect.option)).toEqual(
          expect.objectContaining({ _tag: "Some" })
        )
      }
    }))
})
