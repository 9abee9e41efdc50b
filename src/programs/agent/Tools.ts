/**
 * The tool calls of an AgentLoop turn: each one observed (events, metrics, span),
 * retried while its failure is retryable, and turned into a ToolCallRecord: an
 * error result the model can react to in "feedback" mode, the turn's failure in
 * "fail" mode. Calls past a limit are answered "not executed".
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Tracer from "effect/Tracer"
import { ToolFailure } from "../../domain/Failure.js"
import * as Message from "../../domain/Message.js"
import { ToolCallRecord } from "../../domain/System.js"
import type * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Observed from "../internal/Observed.js"
import type { Emit, Loop } from "./Loop.js"

/**
 * One requested tool call, observed, retried while its failure is retryable; its
 * record (an error result in "feedback" mode) is emitted and handed to `onToolResult`.
 */
export const runTool = (
  loop: Loop,
  call: Message.ToolCall,
  inferenceId: string,
  requestedBy: Option.Option<Tracer.AnySpan>,
  emit: Emit
) =>
  Effect.gen(function* () {
    const { options } = loop
    const attempts = yield* Ref.make(0)
    const started = yield* Clock.currentTimeMillis
    const once = Effect.flatMap(Ref.updateAndGet(attempts, (n) => n + 1), (attempt) =>
      Observed.toolCall({ call, attempt, inferenceId, requestedBy, execute: executeTool(loop, call) }))
    const outcome = yield* Effect.either(
      Effect.retry(once, { schedule: loop.toolRetry, while: (f: ToolFailure) => f.retryable })
    )
    const durationMs = (yield* Clock.currentTimeMillis) - started
    if (Either.isLeft(outcome) && options.toolErrorMode === "fail") return yield* outcome.left
    const record = new ToolCallRecord({
      id: call.id,
      name: call.name,
      arguments: call.arguments,
      result: Either.isRight(outcome)
        ? outcome.right.content
        : `Error [${outcome.left.code}]: ${outcome.left.message}`,
      isError: Either.isLeft(outcome),
      durationMs
    })
    yield* emit({ _tag: "ToolResultReady", record })
    if (options.onToolResult !== undefined) yield* options.onToolResult(record)
    return record
  })

const executeTool = (loop: Loop, call: Message.ToolCall): Effect.Effect<ToolRegistry.ToolOutput, ToolFailure> =>
  Option.isSome(loop.registry)
    ? loop.registry.value.execute(call, { allow: loop.options.allowTools, timeout: loop.options.toolTimeout })
    : Effect.fail(
        new ToolFailure({
          code: "TOOL_NOT_FOUND",
          tool: call.name,
          toolCallId: call.id,
          retryable: false,
          message: `Tool "${call.name}" does not exist; no tools are registered`
        })
      )

/** The record of a call that was not run (a limit was reached first). */
export const notExecuted = (call: Message.ToolCall, reason: string) =>
  new ToolCallRecord({
    id: call.id,
    name: call.name,
    arguments: call.arguments,
    result: `Error: not executed: ${reason}`,
    isError: true,
    durationMs: 0
  })

/** A record as the tool-result message the model reads. */
export const resultMessage = (r: ToolCallRecord) =>
  Message.toolResult(new Message.ToolResult({ callId: r.id, name: r.name, content: r.result, isError: r.isError }))
