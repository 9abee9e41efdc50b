/**
 * The tool calls of a run: each one observed (events, metrics, span), retried
 * while its failure is retryable, and turned into its record and its tool
 * message (the text the model reads, the handler's raw value beside it). A
 * failure is an error result the model can react to; calls that were not run
 * (a limit, an abort) are answered "not executed" so the transcript stays
 * well-formed for any engine.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import type * as Duration from "effect/Duration"
import type * as Tracer from "effect/Tracer"
import * as Text from "../../domain/Text.js"
import { ToolFailure } from "../../domain/Failure.js"
import type * as Message from "../../domain/Message.js"
import { ToolCallRecord } from "../../domain/System.js"
import type * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Observed from "../internal/Observed.js"
import * as Retry from "../internal/Retry.js"
import { RunToolResult } from "./Message.js"
import type { ToolOutcome } from "./Types.js"
import * as Construct from "../../domain/Construct.js"

/** What tool calls run with. */
export interface ToolEnv {
  readonly registry: Option.Option<ToolRegistry.Service>
  readonly allowTools: ReadonlyArray<string> | undefined
  readonly toolTimeout: Duration.DurationInput | undefined
  readonly toolRetry: Schedule.Schedule<unknown, ToolFailure>
}

/** A call's outcome: its record, the result kept in the transcript, and the failure when it failed. */
export type Outcome = ToolOutcome

/**
 * One requested call, observed and retried while its failure is retryable; never
 * fails. A chain of steps (no generator): the clock read in the step that starts
 * the call and in the one that ends it.
 */
export const run = (
  env: ToolEnv,
  call: Message.ToolCall,
  inferenceId: string,
  requestedBy: Option.Option<Tracer.AnySpan>
): Effect.Effect<Outcome> =>
  Effect.withFiberRuntime((fiber) => {
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    const started = clock.unsafeCurrentTimeMillis()
    let attempt = 0
    const once = Effect.suspend(() => {
      attempt++
      return Observed.toolCall({ call, attempt, inferenceId, requestedBy, execute: execute(env, call) })
    })
    return Effect.match(Retry.retry(once, { schedule: env.toolRetry, while: isRetryable }), {
      onFailure: (failure) => outcomeOf(call, Either.left(failure), clock.unsafeCurrentTimeMillis() - started),
      onSuccess: (output) => outcomeOf(call, Either.right(output), clock.unsafeCurrentTimeMillis() - started)
    })
  })

/** A call's outcome once it ran: its record, its result, its failure. */
const outcomeOf = (
  call: Message.ToolCall,
  outcome: Either.Either<ToolRegistry.ToolOutput, ToolFailure>,
  durationMs: number
): Outcome => {
  const content = Either.isRight(outcome)
    ? outcome.right.content
    : `Error [${outcome.left.code}]: ${outcome.left.message}`
  const isError = Either.isLeft(outcome)
  return {
    record: Construct.unchecked(ToolCallRecord, { id: call.id, name: call.name, arguments: call.arguments, result: content, isError, durationMs }),
    result: Construct.unchecked(RunToolResult, {
      callId: call.id,
      name: call.name,
      content,
      isError,
      ...(Either.isRight(outcome) ? { raw: outcome.right.value } : {})
    }),
    failure: Either.isLeft(outcome) ? Option.some(outcome.left) : Option.none()
  }
}

const isRetryable = (f: ToolFailure): boolean => f.retryable

const execute = (env: ToolEnv, call: Message.ToolCall): Effect.Effect<ToolRegistry.ToolOutput, ToolFailure> =>
  Option.isSome(env.registry)
    ? env.registry.value.execute(call, { allow: env.allowTools, timeout: env.toolTimeout })
    : Effect.fail(
        ToolFailure.notFound(Text.excerpt(call.name), `Tool "${Text.excerpt(call.name)}" does not exist; no tools are registered`, {
          toolCallId: call.id
        })
      )

/** The answer to a call that was not run. */
export const notExecuted = (call: Message.ToolCall, reason: string): Outcome => {
  const content = `Error: not executed: ${reason}`
  return {
    record: Construct.unchecked(ToolCallRecord, { id: call.id, name: call.name, arguments: call.arguments, result: content, isError: true, durationMs: 0 }),
    result: Construct.unchecked(RunToolResult, { callId: call.id, name: call.name, content, isError: true }),
    failure: Option.none()
  }
}
