/**
 * The HTTP contract: endpoints, bodies and error shapes, apart from the handlers.
 *
 *   POST /v1/run               a SystemRequest in, the SystemResponse out
 *   POST /v1/chat/completions  OpenAI-compatible chat completions (JSON or SSE)
 *   GET  /health               the engine's model and "ok"
 *
 * A failed request is still a full SystemResponse (request id, partial output,
 * the SystemError under `error`), sent with the status its error code maps to
 * (see `Status.ts`). Each status is its own error class so that HttpApi can
 * encode it with `.addError(Err, { status })`; they share the response's fields.
 * The OpenAI endpoint answers OpenAI's `{ error: { message, type, code } }`
 * with the taxonomy code as `code`.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as Schema from "effect/Schema"
import { ModelInfo } from "../../domain/ModelInfo.js"
import { SystemRequest, SystemResponse } from "../../domain/System.js"

// ---------------------------------------------------------------------------
// /v1/run failures: a SystemResponse with its error, one class per status
// ---------------------------------------------------------------------------

const fields = SystemResponse.fields

export class RunBadRequest extends Schema.Class<RunBadRequest>("RunBadRequest")(fields) {}
export class RunTooLarge extends Schema.Class<RunTooLarge>("RunTooLarge")(fields) {}
export class RunUnprocessable extends Schema.Class<RunUnprocessable>("RunUnprocessable")(fields) {}
export class RunClientClosed extends Schema.Class<RunClientClosed>("RunClientClosed")(fields) {}
export class RunInternal extends Schema.Class<RunInternal>("RunInternal")(fields) {}
export class RunBadGateway extends Schema.Class<RunBadGateway>("RunBadGateway")(fields) {}
export class RunUnavailable extends Schema.Class<RunUnavailable>("RunUnavailable")(fields) {}
export class RunTimeout extends Schema.Class<RunTimeout>("RunTimeout")(fields) {}

/** The error classes of `/v1/run` by status. */
export const runErrors = {
  400: RunBadRequest,
  413: RunTooLarge,
  422: RunUnprocessable,
  499: RunClientClosed,
  500: RunInternal,
  502: RunBadGateway,
  503: RunUnavailable,
  504: RunTimeout
} as const

export type ErrorStatus = keyof typeof runErrors
export type RunError = InstanceType<(typeof runErrors)[ErrorStatus]>

// ---------------------------------------------------------------------------
// OpenAI-compatible chat completions
// ---------------------------------------------------------------------------

const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })

export const ChatToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.optional(Schema.Literal("function")),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})
export type ChatToolCall = typeof ChatToolCall.Type

export const ChatMessage = Schema.Struct({
  role: Schema.Literal("system", "developer", "user", "assistant", "tool"),
  content: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(TextPart)))),
  name: Schema.optional(Schema.String),
  tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ChatToolCall))),
  tool_call_id: Schema.optional(Schema.String)
})
export type ChatMessage = typeof ChatMessage.Type

export const ChatTool = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: Schema.String,
    description: Schema.optional(Schema.String),
    parameters: Schema.optional(Schema.Unknown)
  })
})

export const ResponseFormat = Schema.Union(
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    json_schema: Schema.Struct({
      name: Schema.optional(Schema.String),
      description: Schema.optional(Schema.String),
      schema: Schema.optional(Schema.Unknown),
      strict: Schema.optional(Schema.NullOr(Schema.Boolean))
    })
  })
)

const OptionalBetween = (min: number, max: number) =>
  Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.between(min, max))))
const OptionalCount = Schema.optional(Schema.NullOr(Schema.NonNegativeInt))

/**
 * The request body of `/v1/chat/completions`. `tools` are matched by name against
 * the server's registered tools (a whitelist: the server runs them itself, so
 * their descriptions and parameters are not used; an unregistered name is
 * TOOL_NOT_FOUND); unknown fields are ignored.
 */
export const ChatCompletionRequest = Schema.Struct({
  model: Schema.optional(Schema.String),
  messages: Schema.Array(ChatMessage),
  tools: Schema.optional(Schema.NullOr(Schema.Array(ChatTool))),
  tool_choice: Schema.optional(Schema.Unknown),
  response_format: Schema.optional(Schema.NullOr(ResponseFormat)),
  stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
  stream_options: Schema.optional(Schema.Unknown),
  max_tokens: OptionalCount,
  max_completion_tokens: OptionalCount,
  temperature: OptionalBetween(0, 2),
  top_p: OptionalBetween(0, 1),
  n: OptionalCount,
  user: Schema.optional(Schema.String)
})
export type ChatCompletionRequest = typeof ChatCompletionRequest.Type

export const Usage = Schema.Struct({
  prompt_tokens: Schema.Number,
  completion_tokens: Schema.Number,
  total_tokens: Schema.Number
})

export const FinishReason = Schema.Literal("stop", "length", "tool_calls")
export type FinishReason = typeof FinishReason.Type

/** Beyond OpenAI: what pagantic did for the request (tools it ran, ids, stop reason). */
export const PaganticExtension = Schema.Struct({
  requestId: Schema.String,
  sessionId: Schema.optional(Schema.String),
  stopReason: Schema.optional(Schema.String),
  toolCallsMade: Schema.Array(
    Schema.Struct({
      id: Schema.String,
      name: Schema.String,
      arguments: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
      result: Schema.String,
      isError: Schema.Boolean
    })
  ),
  structuredOutput: Schema.optional(Schema.Unknown)
})

export const ChatCompletion = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("chat.completion"),
  created: Schema.Number,
  model: Schema.String,
  choices: Schema.Array(
    Schema.Struct({
      index: Schema.Number,
      message: Schema.Struct({
        role: Schema.Literal("assistant"),
        content: Schema.NullOr(Schema.String),
        tool_calls: Schema.optional(Schema.Array(ChatToolCall))
      }),
      finish_reason: FinishReason
    })
  ),
  usage: Usage,
  pagantic: PaganticExtension
})
export type ChatCompletion = typeof ChatCompletion.Type

export const OpenAiErrorDetail = Schema.Struct({
  message: Schema.String,
  type: Schema.String,
  code: Schema.String,
  param: Schema.NullOr(Schema.String)
})
export type OpenAiErrorDetail = typeof OpenAiErrorDetail.Type

const errorFields = { error: OpenAiErrorDetail }

export class ChatBadRequest extends Schema.Class<ChatBadRequest>("ChatBadRequest")(errorFields) {}
export class ChatTooLarge extends Schema.Class<ChatTooLarge>("ChatTooLarge")(errorFields) {}
export class ChatUnprocessable extends Schema.Class<ChatUnprocessable>("ChatUnprocessable")(errorFields) {}
export class ChatClientClosed extends Schema.Class<ChatClientClosed>("ChatClientClosed")(errorFields) {}
export class ChatInternal extends Schema.Class<ChatInternal>("ChatInternal")(errorFields) {}
export class ChatBadGateway extends Schema.Class<ChatBadGateway>("ChatBadGateway")(errorFields) {}
export class ChatUnavailable extends Schema.Class<ChatUnavailable>("ChatUnavailable")(errorFields) {}
export class ChatTimeout extends Schema.Class<ChatTimeout>("ChatTimeout")(errorFields) {}

/** The error classes of `/v1/chat/completions` by status. */
export const chatErrors = {
  400: ChatBadRequest,
  413: ChatTooLarge,
  422: ChatUnprocessable,
  499: ChatClientClosed,
  500: ChatInternal,
  502: ChatBadGateway,
  503: ChatUnavailable,
  504: ChatTimeout
} as const satisfies Record<ErrorStatus, unknown>

export type ChatError = InstanceType<(typeof chatErrors)[ErrorStatus]>

// ---------------------------------------------------------------------------
// Health
// ---------------------------------------------------------------------------

export const Health = Schema.Struct({
  status: Schema.Literal("ok"),
  model: ModelInfo
})

// ---------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------

export const run = HttpApiEndpoint.post("run", "/v1/run")
  .setPayload(SystemRequest)
  .addSuccess(SystemResponse)
  .addError(RunBadRequest, { status: 400 })
  .addError(RunTooLarge, { status: 413 })
  .addError(RunUnprocessable, { status: 422 })
  .addError(RunClientClosed, { status: 499 })
  .addError(RunInternal, { status: 500 })
  .addError(RunBadGateway, { status: 502 })
  .addError(RunUnavailable, { status: 503 })
  .addError(RunTimeout, { status: 504 })

export const chatCompletions = HttpApiEndpoint.post("chatCompletions", "/v1/chat/completions")
  .setPayload(ChatCompletionRequest)
  .addSuccess(ChatCompletion)
  .addError(ChatBadRequest, { status: 400 })
  .addError(ChatTooLarge, { status: 413 })
  .addError(ChatUnprocessable, { status: 422 })
  .addError(ChatClientClosed, { status: 499 })
  .addError(ChatInternal, { status: 500 })
  .addError(ChatBadGateway, { status: 502 })
  .addError(ChatUnavailable, { status: 503 })
  .addError(ChatTimeout, { status: 504 })

export const health = HttpApiEndpoint.get("health", "/health").addSuccess(Health)

export class PaganticGroup extends HttpApiGroup.make("pagantic").add(run).add(chatCompletions).add(health) {}

export class PaganticApi extends HttpApi.make("pagantic").add(PaganticGroup) {}
