/**
 * A request's end shaped into its SystemResponse: an Outcome becomes the answer
 * (COMPLETE); a failure of the taxonomy becomes its SystemError (CANCELLED for a
 * Cancellation, ERROR otherwise) with the partial output and the tokens and
 * tool calls the request spent before it failed; a defect or an
 * interruption is labelled ORCHESTRATION_DEFECT, telling what went wrong, never
 * where (stack frames stay in the logs). Every response is annotated on the
 * request's span and counted in the metrics. A response is built from values
 * the library made and checked itself, so it is not validated again (the HTTP
 * edge encodes it through its schema on the way out).
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as ParseResult from "effect/ParseResult"
import type { Failure } from "../../domain/Failure.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Issues from "../../domain/Issues.js"
import type { SystemError, ToolCallRecord } from "../../domain/System.js"
import { SystemResponse, toSystemError } from "../../domain/System.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import { withMetrics } from "../../services/Metrics.js"
import * as Observed from "../internal/Observed.js"
import * as Spans from "../internal/Spans.js"
import type * as Lifecycle from "../Lifecycle.js"
import { invalid } from "./Check.js"
import type * as Partial from "./Partial.js"
import type * as Spent from "./Spent.js"
import type { Outcome } from "./Types.js"
import * as Construct from "../../domain/Construct.js"
import * as Tracing from "../../services/internal/Tracing.js"

/** Who the response answers. */
export interface Addressee {
  readonly requestId: string
  readonly sessionId: string | undefined
}

const describeDefect = (defect: unknown): string =>
  defect instanceof Error ? `${defect.name}: ${defect.message}` : typeof defect === "string" ? defect : String(defect)

const errorOf = (cause: Cause.Cause<Failure>): SystemError =>
  Option.match(Cause.failureOption(cause), {
    onSome: toSystemError,
    onNone: () =>
      toSystemError(
        OrchestrationFailure.defect(
          Cause.isInterruptedOnly(cause)
            ? "The request was interrupted"
            : `Internal error: ${describeDefect(Cause.squash(cause))}`,
          { details: {} }
        )
      )
  })

/** A SystemResponse carries only the fields it has (no explicit undefined). */
const addressed = (to: Addressee) => ({
  requestId: to.requestId,
  ...(to.sessionId === undefined ? {} : { sessionId: to.sessionId })
})

const answered = (to: Addressee, o: Outcome): SystemResponse => {
  // the fields the outcome has, set one by one (no object spread per optional field)
  const fields: Record<string, unknown> = addressed(to)
  fields.content = o.content
  fields.toolCallsMade = o.toolCallsMade ?? []
  fields.tokenUsage = o.usage
  for (const key of optionalFields) if (o[key] !== undefined) fields[key] = o[key]
  return Construct.unchecked(SystemResponse, fields as ConstructorParameters<typeof SystemResponse>[0])
}

/** The outcome's fields a response carries under the same name, when present. */
const optionalFields = [
  "structuredOutput",
  "candidates",
  "confidence",
  "confidenceSource",
  "validationResult",
  "stopReason",
  "pendingToolCalls",
  "orchestration",
  "query",
  "logprobs"
] as const satisfies ReadonlyArray<keyof Outcome & keyof SystemResponse>

/**
 * An answer reports everything the request spent and did, as a failure does:
 * the recorder's usage and tool calls when it saw at least the inferences and
 * calls the mode counted (it sees every inference of the request, also those a
 * reranker, judge, planner or task processor made, which a mode's own count
 * leaves out); the mode's own where it saw fewer (a durable query's run spends
 * out of its sight, and reports what its journal says).
 */
const withSpent = (outcome: Outcome, spent: Spent.Spent): Outcome => {
  const { toolCalls, usage } = spent.unsafeSoFar()
  const own = outcome.toolCallsMade ?? []
  return {
    ...outcome,
    usage: usage.calls >= outcome.usage.calls ? usage : outcome.usage,
    toolCallsMade: own.length > 0 && own.length >= toolCalls.length ? own : toolCalls
  }
}

/** What a failed request had spent and done before it failed. */
interface SpentSoFar {
  readonly usage: TokenUsage.TokenUsage
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
}

const nothingSpent: SpentSoFar = { usage: TokenUsage.empty, toolCalls: [] }

const failed = (to: Addressee, content: string, error: SystemError, spent: SpentSoFar): SystemResponse =>
  Construct.unchecked(SystemResponse, {
    ...addressed(to),
    content,
    toolCallsMade: spent.toolCalls,
    tokenUsage: spent.usage,
    error
  })

/** The response to a request's end, its terminal lifecycle move made. */
export const respond = (
  to: Addressee,
  exit: Exit.Exit<Outcome, Failure>,
  tracker: Lifecycle.Tracker,
  partial: Partial.Partial,
  spent: Spent.Spent
): Effect.Effect<SystemResponse> =>
  Exit.matchEffect(exit, {
    // what was spent read in the step after the move (a synchronous step: atomic between the request's fibers)
    onSuccess: (outcome) =>
      Effect.map(tracker.transition("COMPLETE", "response assembled"), () => answered(to, withSpent(outcome, spent))),
    onFailure: (cause) =>
      Effect.gen(function* () {
        const error = errorOf(cause)
        const cancelled = Option.exists(Cause.failureOption(cause), (f) => f._tag === "Cancellation")
        yield* tracker.transition(cancelled ? "CANCELLED" : "ERROR", error.message, { error })
        const so = { usage: yield* spent.usage, toolCalls: yield* spent.toolCalls }
        return failed(to, partial.text, error, so)
      })
  })

/**
 * Annotates the request's span with the response and counts it (latency since
 * `startedAt`), when somebody observes (else the span, if any, goes nowhere and
 * nothing counts).
 */
export const observe = (response: SystemResponse, startedAt: number): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => Observed.listenedBy(fiber) ? observed(response, startedAt) : Effect.void)

const observed = (response: SystemResponse, startedAt: number): Effect.Effect<void> =>
  Effect.gen(function* () {
    yield* Tracing.annotate({
      [Spans.GenAi.usageInputTokens]: response.tokenUsage.promptTokens,
      [Spans.GenAi.usageOutputTokens]: response.tokenUsage.outputTokens,
      "pagantic.tool_calls": response.toolCallsMade.length,
      ...(response.stopReason === undefined ? {} : { "pagantic.stop_reason": response.stopReason }),
      ...(response.error === undefined ? {} : { [Spans.Pagantic.errorCode]: response.error.code })
    })
    const durationMs = (yield* Clock.currentTimeMillis) - startedAt
    yield* withMetrics((m) =>
      Effect.all(
        [
          m.recordLatency("request", durationMs),
          m.increment("requests"),
          response.error === undefined ? Effect.void : m.increment("request_errors")
        ],
        { discard: true }
      )
    )
  })

/** The answer to an envelope that did not decode: CONFIG_INVALID_REQUEST listing the issues. */
export const rejected = (requestId: string, error: ParseResult.ParseError): SystemResponse => {
  const issues = Issues.describe(error, "a SystemRequest object")
  return failed(
    { requestId, sessionId: undefined },
    "",
    toSystemError(invalid(`Invalid request: ${issues.join("; ")}`, { issues })),
    nothingSpent
  )
}
