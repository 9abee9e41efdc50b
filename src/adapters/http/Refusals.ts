/**
 * What a client gets when its request is refused, shaped by the endpoint it
 * called: OpenAI's `{ error }` under the OpenAI-compatible routes, a
 * SystemResponse with its SystemError everywhere else. Every error is cut for
 * the client (`forClient`: short excerpts, bounded nesting, no stack frames),
 * names the field at fault, and carries the request id in `x-request-id`; every
 * 5xx is logged.
 */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { excerptCause, SystemError, SystemResponse, ToolCallRecord } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import { ChatFailure, type OpenAiErrorBody, type RefusalStatus, RunFailure } from "./Api.js"
import type * as Guard from "./Guard.js"
import { openAiErrorType, statusOfError } from "./Status.js"

const encodeResponse = Schema.encodeSync(SystemResponse)

const printableAscii = /^[\x21-\x7e]*$/

/**
 * The request id as an `x-request-id` value: as the client sent it when it is
 * printable ASCII, otherwise its UTF-8 bytes percent-encoded (a header value
 * carries no control characters and Node refuses anything past Latin-1: setting
 * it raw would fail the response after the handler ran). The body carries the id
 * unchanged.
 */
export const requestIdHeader = (requestId: string): string =>
  printableAscii.test(requestId) && !requestId.includes("%")
    ? requestId
    : Array.from(Buffer.from(requestId, "utf8"), (byte) =>
      byte >= 0x21 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`).join("")

/**
 * The edge's own answers (401, 403, 404, 405, 500), outside any endpoint's
 * handler, shaped as the endpoint at `path` shapes its errors.
 */
export const errorResponse = (
  path: string,
  status: number,
  error: SystemError,
  requestId: string,
  headers: Record<string, string> = {}
): HttpServerResponse.HttpServerResponse => {
  return HttpServerResponse.unsafeJson(
    path === "/v1/chat/completions" || path === "/v1/responses" || path === "/v1/models" || path.startsWith("/v1/models/")
      ? openAiError(error, status)
      : encodeResponse(failedResponse(error, requestId, undefined)),
    { status, headers: { "x-request-id": requestIdHeader(requestId), ...headers } }
  )
}

/**
 * A refused request as its endpoint's typed error, with the status its error
 * says (whose fault it is). Every 5xx is logged with the request id and the code;
 * no user content beyond the error's short message excerpt. The response carries
 * the request id in `x-request-id`.
 */
const refusal = <F>(error: SystemError, requestId: string, status: RefusalStatus, failure: F): Effect.Effect<never, F> =>
  Effect.gen(function* () {
    if (status >= 500) {
      yield* Effect.logError("request failed").pipe(
        Effect.annotateLogs({ requestId, status, code: error.code, message: Text.excerpt(error.message, 200) })
      )
    }
    yield* HttpApp.appendPreResponseHandler((_, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "x-request-id", requestIdHeader(requestId)))
    )
    return yield* Effect.fail(failure)
  })

/** Refuses a `/v1/run` request: its SystemResponse (with partial output, when there is one) under `error`. */
export const refuseRun = (
  error: SystemError,
  requestId: string,
  status: RefusalStatus = statusOfError(error),
  partial?: SystemResponse
): Effect.Effect<never, RunFailure> =>
  refusal(error, requestId, status, new RunFailure({ status, response: failedResponse(error, requestId, partial) }))

/** Refuses a `/v1/chat/completions` request: OpenAI's `{ error }`. */
export const refuseChat = (
  error: SystemError,
  requestId: string,
  status: RefusalStatus = statusOfError(error)
): Effect.Effect<never, ChatFailure> =>
  refusal(error, requestId, status, new ChatFailure({ status, body: openAiError(error, status, requestId) }))

/**
 * The longest excerpt of a caller's input an error response quotes: the project's
 * default excerpt (domain/Text), so an error never sends a long hostile string back
 * whole.
 */
const QUOTED = Text.defaultExcerptLength
const quoted = { maxString: QUOTED, maxDepth: 5, maxItems: 20 } as const

/**
 * A refused request's SystemResponse: its partial output, and the tool calls it
 * made (it reports what it did), each call's arguments and result cut to an
 * excerpt as the error's details are: a refusal never sends a client's large
 * input back.
 */
const failedResponse = (error: SystemError, requestId: string, partial: SystemResponse | undefined): SystemResponse => {
  const base = partial ?? new SystemResponse({ requestId, content: "", toolCallsMade: [], tokenUsage: TokenUsage.empty })
  return new SystemResponse(
    {
      ...base,
      toolCallsMade: base.toolCallsMade.map((call) =>
        new ToolCallRecord({
          ...call,
          id: Text.excerpt(call.id, QUOTED),
          name: Text.excerpt(call.name, QUOTED),
          arguments: Text.bounded(call.arguments, quoted) as Record<string, unknown>,
          result: Text.excerpt(call.result, QUOTED)
        }, true)
      ),
      error: forClient(error)
    },
    true
  )
}

/**
 * An error as OpenAI's `{ error }` body (also an SSE event once a stream has
 * begun): the taxonomy code as `code`, the field at fault as `param` (the
 * details' `param`, else their `field`), and the rest of the SystemError under
 * `pagantic`.
 */
export const openAiError = (error: SystemError, status: number = statusOfError(error), requestId?: string): OpenAiErrorBody => {
  const safe = forClient(error)
  const { param, field } = error.details
  return {
    error: {
      message: safe.message,
      type: openAiErrorType(status),
      code: safe.code,
      param: typeof param === "string" ? Text.excerpt(param, 200) : typeof field === "string" ? Text.excerpt(field, 200) : null,
      pagantic: {
        ...(requestId === undefined ? {} : { requestId }),
        category: safe.category,
        retryable: safe.retryable,
        details: safe.details
      }
    }
  }
}

/**
 * An error as a client may see it: the message and every string in the details
 * cut to a short excerpt, nesting and counts bounded, stack-frame lines dropped.
 */
export const forClient = (error: SystemError): SystemError =>
  new SystemError(
    {
      ...error,
      message: Text.excerpt(error.message, 1_000),
      details: Text.bounded(withoutStacks(error.details), quoted) as Record<string, unknown>,
      ...(error.causedBy === undefined ? {} : { causedBy: excerptCause(error.causedBy, QUOTED) })
    },
    true
  )

const STACK_FRAME = /^\s*at\s.*(\(.*\)|:\d+:\d+)\s*$/

const withoutStacks = (details: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(details).map(([k, v]) => [
      k,
      typeof v === "string" ? v.split("\n").filter((line) => !STACK_FRAME.test(line)).join("\n") : v
    ])
  )

/** A Guard problem as the client's mistake, naming the field. */
export const fromProblem = (problem: Guard.Problem): SystemError =>
  invalidRequest(`${problem.field}: ${problem.message}`, { field: problem.field })

/** A client's mistake at the edge (CONFIG_INVALID_REQUEST, not retryable). */
export const invalidRequest = (message: string, details: Record<string, unknown> = {}): SystemError =>
  new SystemError({
    code: "CONFIG_INVALID_REQUEST",
    category: "ConfigurationFailure",
    retryable: false,
    message,
    details
  })
