/**
 * The wire of the OpenAI-compatible chat completions (`POST /v1/chat/completions`):
 * the request body, the completion, its usage, finish reasons and
 * log-probabilities, pagantic's extension, and OpenAI's error body. Schemas only;
 * the handler is ChatCompletions.ts, the translation to and from the facade
 * OpenAi.ts, and the endpoint Api.ts.
 */
import * as Schema from "effect/Schema"

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
    description: Schema.optional(Schema.NullOr(Schema.String)),
    parameters: Schema.optional(Schema.Unknown),
    strict: Schema.optional(Schema.NullOr(Schema.Boolean))
  })
})

/** Which tools the model may call: "auto", "none", "required", or one function by name. */
export const ChatToolChoice = Schema.Union(
  Schema.Literal("auto", "none", "required"),
  Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) })
)

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

/** Most choices (`n`) one request may ask for: each is a run of its own. */
export const maxChoices = 8

/**
 * The request body of `/v1/chat/completions` (see `OpenAi.ts` for how each field
 * is honoured). `tools` are the client's own: offered to the model and returned
 * as `tool_calls` for the client to run. `user` is accepted and ignored by design
 * (no per-user state is kept); `model` names nothing here (the loaded model
 * answers, and the response's `model` says which). OpenAI fields pagantic does not
 * implement are refused when set (`OpenAi.checkUnsupported`); other unknown fields
 * are ignored.
 */
export const ChatCompletionRequest = Schema.Struct({
  model: Schema.optional(Schema.String),
  messages: Schema.Array(ChatMessage),
  tools: Schema.optional(Schema.NullOr(Schema.Array(ChatTool))),
  tool_choice: Schema.optional(Schema.NullOr(ChatToolChoice)),
  parallel_tool_calls: Schema.optional(Schema.NullOr(Schema.Boolean)),
  response_format: Schema.optional(Schema.NullOr(ResponseFormat)),
  stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
  stream_options: Schema.optional(Schema.NullOr(Schema.Struct({ include_usage: Schema.optional(Schema.NullOr(Schema.Boolean)) }))),
  max_tokens: OptionalCount,
  max_completion_tokens: OptionalCount,
  temperature: OptionalBetween(0, 2),
  top_p: OptionalBetween(0, 1),
  stop: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(Schema.String)))),
  seed: Schema.optional(Schema.NullOr(Schema.Int)),
  presence_penalty: OptionalBetween(-2, 2),
  frequency_penalty: OptionalBetween(-2, 2),
  logprobs: Schema.optional(Schema.NullOr(Schema.Boolean)),
  top_logprobs: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.between(0, 20)))),
  n: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.between(1, maxChoices)))),
  user: Schema.optional(Schema.NullOr(Schema.String))
})
export type ChatCompletionRequest = typeof ChatCompletionRequest.Type

export const Usage = Schema.Struct({
  prompt_tokens: Schema.Number,
  completion_tokens: Schema.Number,
  total_tokens: Schema.Number,
  prompt_tokens_details: Schema.Struct({ cached_tokens: Schema.Number })
})

export const FinishReason = Schema.Literal("stop", "length", "tool_calls")

const TopLogprob = Schema.Struct({
  token: Schema.String,
  logprob: Schema.Number,
  bytes: Schema.NullOr(Schema.Array(Schema.Number))
})

/** One generated token with its log probability and the most likely alternatives (OpenAI's shape). */
export const TokenLogprob = Schema.Struct({ ...TopLogprob.fields, top_logprobs: Schema.Array(TopLogprob) })

/**
 * A choice's `logprobs` (null unless asked). OpenAI always sends the key, and
 * clients decode it as required (so does the `refusal` of a message).
 */
export const ChoiceLogprobs = Schema.Struct({
  content: Schema.NullOr(Schema.Array(TokenLogprob)),
  refusal: Schema.NullOr(Schema.Array(TokenLogprob))
})
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

/** Beyond OpenAI: the extension of a completion, with every choice's when `n` > 1. */
export const PaganticCompletionExtension = Schema.Struct({
  ...PaganticExtension.fields,
  choices: Schema.optional(Schema.Array(PaganticExtension))
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
        refusal: Schema.NullOr(Schema.String),
        tool_calls: Schema.optional(Schema.Array(ChatToolCall))
      }),
      logprobs: Schema.NullOr(ChoiceLogprobs),
      finish_reason: FinishReason
    })
  ),
  usage: Usage,
  pagantic: PaganticCompletionExtension
})
export type ChatCompletion = typeof ChatCompletion.Type

/**
 * OpenAI's error: `code` is the taxonomy code (CONFIG_INVALID_REQUEST, ...),
 * `param` the request field at fault when one is, and `pagantic` the rest of the
 * SystemError (category, retryability, details) with the request id.
 */
export const OpenAiErrorDetail = Schema.Struct({
  message: Schema.String,
  type: Schema.String,
  code: Schema.String,
  param: Schema.NullOr(Schema.String),
  pagantic: Schema.optional(
    Schema.Struct({
      requestId: Schema.optional(Schema.String),
      category: Schema.String,
      retryable: Schema.Boolean,
      details: Schema.Record({ key: Schema.String, value: Schema.Unknown })
    })
  )
})
export type OpenAiErrorDetail = typeof OpenAiErrorDetail.Type

/** OpenAI's error body. */
export const OpenAiErrorBody = Schema.Struct({ error: OpenAiErrorDetail })
export type OpenAiErrorBody = typeof OpenAiErrorBody.Type
