/**
 * One inference of an AgentLoop turn: observed (events, metrics, span), its
 * retryable failures retried on the loop's schedule; streamed when the turn is,
 * its text deltas emitted as they come.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../../domain/Failure.js"
import type * as Engine from "../../services/Engine.js"
import type { InferenceResult } from "../../services/Engine.js"
import * as Observed from "../internal/Observed.js"
import type { Emit, Loop } from "./Loop.js"

/**
 * One observed inference, retryable failures retried; with its id and span for the
 * tool calls it asks for. A streamed attempt that already emitted text is not
 * retried: its deltas are out (an SSE client has them), and a second attempt would
 * repeat them; the failure ends the turn with that text as its partial output.
 */
export const inferOnce = (loop: Loop, request: Engine.InferenceRequest, index: number, emit: Emit, streaming: boolean) =>
  Effect.gen(function* () {
    const inferenceId = yield* loop.nextId("inf")
    let emitted = false
    const emitting: Emit = (event) => {
      if (event._tag === "TextDelta" && event.text !== "") emitted = true
      return emit(event)
    }
    const [result, span] = yield* Effect.retry(
      Observed.inference({
        model: loop.model,
        request,
        inferenceId,
        call: streaming ? streamedInference(loop.engine, request, index, emitting) : loop.engine.infer(request)
      }),
      { schedule: loop.inferenceRetry, while: (f: InferenceFailure) => f.retryable && !emitted }
    )
    return { result, inferenceId, span }
  })

/** The engine's stream, its text deltas emitted, folded into the result of its Finish part. */
const streamedInference = (
  engine: Engine.Service,
  request: Engine.InferenceRequest,
  index: number,
  emit: Emit
): Effect.Effect<InferenceResult, InferenceFailure> =>
  Effect.gen(function* () {
    const last = yield* Ref.make<Option.Option<InferenceResult>>(Option.none())
    yield* Stream.runForEach(engine.stream(request), (part) => {
      switch (part._tag) {
        case "TextDelta":
          return emit({ _tag: "TextDelta", text: part.text, inference: index })
        case "ToolCallPart":
          return Effect.void
        case "Finish":
          return Ref.set(last, Option.some(part.result))
      }
    })
    const result = yield* Ref.get(last)
    if (Option.isNone(result)) {
      return yield* InferenceFailure.malformed("The engine's stream ended without a Finish part")
    }
    return result.value
  })
