/**
 * The model calls of a run: each one observed (events, metrics, span), its
 * retryable failures retried on the run's schedule; streamed when the run is,
 * its text deltas emitted as they come. A streamed attempt that already emitted
 * text is not retried (the deltas are out; a second attempt would repeat them).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import type * as Tracer from "effect/Tracer"
import { InferenceFailure } from "../../domain/Failure.js"
import * as Engine from "../../services/Engine.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import type * as Ids from "../internal/Ids.js"
import * as Observed from "../internal/Observed.js"
import * as Retry from "../internal/Retry.js"

export interface InferenceEnv {
  readonly engine: Engine.Service
  readonly model: Effect.Effect<string>
  readonly nextId: Ids.NextId
  readonly inferenceRetry: Schedule.Schedule<unknown, InferenceFailure>
  /** Whether anybody observes (internal/Observed `listened`): the inference id is drawn only then, as only events and spans read it. */
  readonly observed: boolean
  /**
   * Whether each call is the engine's call alone, with nothing around it: nobody observes, no CostTracker counts
   * (internal/Observed `observation` "quiet", read when the run started) and no step of the run wraps the call
   * (its fiber's services then stay as they were read).
   */
  readonly quiet: boolean
  /** Where text deltas go when the run is streamed; absent: `infer`, not `stream`. */
  readonly onDelta: Option.Option<(text: string) => Effect.Effect<void>>
}

/** The last call's id and span, so the tool calls it asked for link to it. */
export interface LastCall {
  inferenceId: string
  span: Option.Option<Tracer.AnySpan>
}

/** One observed, retried model call; its id and span are written to `last`. */
export const infer = (
  env: InferenceEnv,
  last: LastCall,
  request: InferenceRequest
): Effect.Effect<InferenceResult, InferenceFailure> =>
  // the inference id is read by events and spans only: drawn only when somebody observes
  env.observed
    ? Effect.flatMap(env.nextId("inf"), (inferenceId) => attempt(env, last, request, inferenceId))
    // made now: the loop makes one per model call and runs it at once (its retries are inside)
    : attempt(env, last, request, "")

/** The call under `inferenceId`, retried on the run's schedule: a chain of steps (no generator), made when the loop asks for it. */
const attempt = (
  env: InferenceEnv,
  last: LastCall,
  request: InferenceRequest,
  inferenceId: string
): Effect.Effect<InferenceResult, InferenceFailure> => {
  let call: Effect.Effect<InferenceResult, InferenceFailure>
  let retryable: (f: InferenceFailure) => boolean
  if (Option.isSome(env.onDelta)) {
    // a streamed attempt that already emitted text is not retried
    let emitted = false
    const onDelta = env.onDelta.value
    call = streamed(env.engine, request, (text) => {
      if (text !== "") emitted = true
      return onDelta(text)
    })
    retryable = (f) => f.retryable && !emitted
  } else {
    call = env.engine.infer(request)
    retryable = isRetryable
  }
  if (env.quiet) {
    // what Observed.inference runs when nobody observes and nothing counts: the call, without a span (one check less);
    // the last call's id and span stay what every quiet call leaves them, "" and none (one step less)
    return Retry.retry(call, { schedule: env.inferenceRetry, while: retryable })
  }
  return Effect.map(
    Retry.retry(Observed.inference({ model: env.model, request, inferenceId, call }), { schedule: env.inferenceRetry, while: retryable }),
    ([result, span]) => {
      last.inferenceId = inferenceId
      last.span = span
      return result
    }
  )
}

const isRetryable = (f: InferenceFailure): boolean => f.retryable

/** The engine's stream, its text deltas handed on, folded into the result of its Finish part. */
const streamed = (
  engine: Engine.Service,
  request: InferenceRequest,
  onDelta: (text: string) => Effect.Effect<void>
): Effect.Effect<InferenceResult, InferenceFailure> =>
  // a chain of two steps (no generator: two operations less), made when it runs
  Effect.suspend(() => {
    let last: InferenceResult | undefined
    return Effect.flatMap(
      Engine.runParts(engine.stream(request), (part) => {
        switch (part._tag) {
          case "TextDelta":
            return onDelta(part.text)
          case "ToolCallPart":
            return Effect.void
          case "Finish":
            return Effect.sync(() => {
              last = part.result
            })
        }
      }),
      () => last === undefined ? InferenceFailure.malformed("The engine's stream ended without a Finish part") : Effect.succeed(last)
    )
  })
