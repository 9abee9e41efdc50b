/**
 * The OpenAI chat-completions wire format, and nothing else.
 *
 * Pure conversions between pagantic's request/result and the JSON an
 * OpenAI-compatible server speaks (llama.cpp's server, vLLM, Ollama, hosted APIs):
 * the request body, the decoded completion, and the decoded stream chunk (./Stream.ts
 * folds chunks into StreamParts). Every way the server's JSON can be wrong ends in
 * an `INFERENCE_MALFORMED_RESPONSE`, never in a defect. No I/O here: ./Transport.ts
 * does the HTTP, the retries and the timing.
 */
import * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { InferenceFailure } from "../../domain/Failure.js"
import * as Issues from "../../domain/Issues.js"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import type { Message } from "../../domain/Message.js"
import { ToolCall } from "../../domain/Message.js"
import type { Logprobs } from "../../domain/Sampling.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import type { FinishReason, InferenceRequest } from "../../services/Engine.js"
import { InferenceResult } from "../../services/Engine.js"

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

/** An OpenAI chat message. */
export type WireMessage =
  | { readonly role: "system" | "user"; readonly content: string }
  | {
    readonly role: "assistant"
    readonly content: string | null
    readonly tool_calls?: ReadonlyArray<{
      readonly id: string
      readonly type: "function"
      readonly function: { readonly name: string; readonly arguments: string }
    }>
  }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

export const toWireMessage = (message: Message): WireMessage => {
  switch (message._tag) {
    case "SystemMessage":
    case "UserMessage":
      return { role: message.role, content: message.content }
    case "AssistantMessage":
      return message.toolCalls.length === 0
        ? { role: "assistant", content: message.content }
        : {
          role: "assistant",
          content: message.content === "" ? null : message.content,
          tool_calls: message.toolCalls.map((call) => ({
            id: call.id,
            type: "function" as const,
            function: { name: call.name, arguments: JSON.stringify(call.arguments) }
          }))
        }
    case "ToolMessage":
      return { role: "tool", tool_call_id: message.toolCallId, content: message.content }
  }
}

export interface BodyOptions {
  readonly model: string
  readonly stream: boolean
  /** `strict` of `response_format.json_schema`. */
  readonly strictJsonSchema: boolean
}

/**
 * The `/v1/chat/completions` body. The sampling controls go by OpenAI's names
 * (`stop`, `seed`, `presence_penalty`, `frequency_penalty`, `logprobs`,
 * `top_logprobs`, this one only with `logprobs`). A grammar takes precedence over the schema for
 * decoding (llama.cpp's server refuses both at once), so `response_format` is sent
 * only without a grammar. `options` are merged over the generated fields, except
 * `messages` and the streaming flags, which the parser depends on.
 */
export const chatBody = (request: InferenceRequest, options: BodyOptions): Record<string, unknown> => {
  const body: Record<string, unknown> = { model: options.model }
  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, description: tool.description, parameters: tool.parameters }
    }))
  }
  if (request.grammar !== undefined) {
    body.grammar = request.grammar
  } else if (request.schema !== undefined) {
    body.response_format = responseFormat(request.schema, options.strictJsonSchema)
  }
  if (request.maxTokens !== undefined) body.max_tokens = request.maxTokens
  if (request.temperature !== undefined) body.temperature = request.temperature
  if (request.topP !== undefined) body.top_p = request.topP
  if (request.seed !== undefined) body.seed = request.seed
  if (request.stop !== undefined) body.stop = request.stop
  if (request.presencePenalty !== undefined) body.presence_penalty = request.presencePenalty
  if (request.frequencyPenalty !== undefined) body.frequency_penalty = request.frequencyPenalty
  if (request.logprobs !== undefined) body.logprobs = request.logprobs
  // OpenAI refuses top_logprobs without logprobs
  if (request.logprobs === true && request.topLogprobs !== undefined) body.top_logprobs = request.topLogprobs
  return {
    ...body,
    ...request.options,
    messages: request.messages.map(toWireMessage),
    stream: options.stream,
    ...(options.stream ? { stream_options: { include_usage: true } } : {})
  }
}

const responseFormat = (schema: JsonSchema, strict: boolean) => ({
  type: "json_schema",
  json_schema: { name: "response", schema, strict }
})

// ---------------------------------------------------------------------------
// Response schemas (only the fields we read; extra fields are ignored)
// ---------------------------------------------------------------------------

const Arguments = Schema.Union(Schema.String, Schema.Record({ key: Schema.String, value: Schema.Unknown }))

const WireToolCall = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.optional(Schema.NullOr(Schema.Struct({
    name: Schema.optional(Schema.NullOr(Schema.String)),
    arguments: Schema.optional(Schema.NullOr(Arguments))
  })))
})
type RawArguments = string | { readonly [key: string]: unknown } | null | undefined

const WireUsage = Schema.Struct({
  prompt_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  prompt_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({
    cached_tokens: Schema.optional(Schema.NullOr(Schema.Number))
  }))),
  completion_tokens: Schema.optional(Schema.NullOr(Schema.Number)),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({
    reasoning_tokens: Schema.optional(Schema.NullOr(Schema.Number))
  })))
})
export type WireUsage = typeof WireUsage.Type

/** A token's log-probability as OpenAI sends it (`bytes` is not read). */
const WireTokenLogprob = Schema.Struct({
  token: Schema.String,
  logprob: Schema.Number,
  top_logprobs: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
    token: Schema.String,
    logprob: Schema.Number
  }))))
})

/** `choices[].logprobs`: the content tokens' log-probabilities (`refusal` is not read). */
const WireLogprobs = Schema.Struct({
  content: Schema.optional(Schema.NullOr(Schema.Array(WireTokenLogprob)))
})
export type WireLogprobs = typeof WireLogprobs.Type

const WireCompletion = Schema.Struct({
  choices: Schema.NonEmptyArray(Schema.Struct({
    message: Schema.Struct({
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
    }),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
    logprobs: Schema.optional(Schema.NullOr(WireLogprobs))
  })),
  usage: Schema.optional(Schema.NullOr(WireUsage))
})

const WireChunk = Schema.Struct({
  choices: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
    delta: Schema.optional(Schema.NullOr(Schema.Struct({
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
    }))),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
    logprobs: Schema.optional(Schema.NullOr(WireLogprobs))
  })))),
  usage: Schema.optional(Schema.NullOr(WireUsage)),
  error: Schema.optional(Schema.Unknown)
})

const decodeCompletion = Schema.decodeUnknownEither(Schema.parseJson(WireCompletion))
const decodeWireChunk = Schema.decodeUnknownEither(Schema.parseJson(WireChunk))

/** Why a reply does not decode, in plain words (the first problems, never the schema's tree). */
const reasonOf = (error: ParseResult.ParseError, expected: string): string =>
  Issues.describe(error, expected, "the reply").slice(0, 3).join("; ")

// ---------------------------------------------------------------------------
// Response -> InferenceResult
// ---------------------------------------------------------------------------

/** What the engine measured around the call, folded into the usage. */
export interface Measured {
  readonly elapsedMillis: number
  readonly contextWindow: number
}

/** At most `max` characters of a body, for failure details. */
export const excerpt = (text: string, max = 200): string =>
  text.length <= max ? text : `${text.slice(0, max)}…`

export const finishReason = (reason: string | null | undefined, hasToolCalls: boolean): FinishReason => {
  if (hasToolCalls) return "tool_calls"
  switch (reason) {
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      // the server says it called a tool but sent none: treat as a plain stop
      return "stop"
    case "content_filter":
    case "abort":
    case "cancelled":
      return "aborted"
    default:
      // "stop", "eos", null (some servers omit it), and anything unknown
      return "stop"
  }
}

export const usageOf = (usage: WireUsage | null | undefined, measured: Measured): TokenUsage.TokenUsage => {
  const count = (n: number | null | undefined) => (typeof n === "number" && Number.isFinite(n) ? Math.max(0, Math.round(n)) : 0)
  const promptTokens = count(usage?.prompt_tokens)
  // the server's cached prompt tokens are in its prompt_tokens; pagantic counts them apart
  const cached = Math.min(promptTokens, count(usage?.prompt_tokens_details?.cached_tokens))
  const completionTokens = count(usage?.completion_tokens)
  const reasoningTokens = Math.min(completionTokens, count(usage?.completion_tokens_details?.reasoning_tokens))
  const made = TokenUsage.make({
    promptTokens: promptTokens - cached,
    reasoningTokens,
    outputTokens: completionTokens - reasoningTokens,
    contextTokens: promptTokens + completionTokens,
    contextWindow: measured.contextWindow,
    tokensPerSecond: measured.elapsedMillis > 0 ? completionTokens / (measured.elapsedMillis / 1000) : 0
  })
  return cached === 0 ? made : new TokenUsage.TokenUsage({ ...made, cachedPromptTokens: cached }, true)
}

/** The content tokens' log-probabilities of a choice (none when the server sent none). */
export const logprobsOf = (wire: WireLogprobs | null | undefined): Logprobs =>
  (wire?.content ?? []).map((entry) => ({
    token: entry.token,
    logprob: entry.logprob,
    topLogprobs: (entry.top_logprobs ?? []).map((alternative) => ({ token: alternative.token, logprob: alternative.logprob }))
  }))

/** An INFERENCE_MALFORMED_RESPONSE with an excerpt of the body. */
export const malformed = (message: string, body: string, extra: Record<string, unknown> = {}) =>
  InferenceFailure.malformed(message, { body: excerpt(body), ...extra })

/**
 * Parses a tool call's arguments: a JSON string holding an object (or an object
 * already). Whitespace-only arguments mean no arguments (`{}`), which some servers
 * send for parameterless tools.
 */
export const parseArguments = (
  name: string,
  raw: RawArguments
): Either.Either<Record<string, unknown>, InferenceFailure> => {
  if (raw === null || raw === undefined) return Either.right({})
  if (typeof raw !== "string") return Either.right({ ...raw })
  if (raw.trim() === "") return Either.right({})
  return Either.flatMap(
    Either.try({
      try: (): unknown => JSON.parse(raw),
      catch: (cause) =>
        InferenceFailure.malformed(`the arguments of tool call "${name}" are not valid JSON`, {
          tool: name,
          arguments: excerpt(raw)
        }, cause)
    }),
    (parsed) =>
      typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
        ? Either.right(parsed as Record<string, unknown>)
        : Either.left(
          InferenceFailure.malformed(`the arguments of tool call "${name}" are not a JSON object`, {
            tool: name,
            arguments: excerpt(raw)
          })
        )
  )
}

/** The tool calls of a reply, each with arguments that are a JSON object. */
export const toToolCalls = (
  calls: ReadonlyArray<{ readonly id: string | null | undefined; readonly name: string; readonly arguments: RawArguments }>
): Either.Either<ReadonlyArray<ToolCall>, InferenceFailure> =>
  Either.all(calls.map((call, i) => {
    if (call.name === "") {
      return Either.left(InferenceFailure.malformed("a tool call has no function name", { index: i }))
    }
    return Either.map(
      parseArguments(call.name, call.arguments),
      (args) => new ToolCall({ id: call.id ?? `call_${i}`, name: call.name, arguments: args })
    )
  }))

/** Decodes a non-streamed `/v1/chat/completions` body into an InferenceResult. */
export const parseCompletion = (
  text: string,
  measured: Measured
): Either.Either<InferenceResult, InferenceFailure> =>
  Either.gen(function*() {
    const completion = yield* Either.mapLeft(
      decodeCompletion(text),
      (error) => malformed("the engine's reply is not a chat completion", text, { reason: reasonOf(error, "a chat completion") })
    )
    const choice = completion.choices[0]
    const toolCalls = yield* toToolCalls((choice.message.tool_calls ?? []).map((call) => ({
      id: call.id,
      name: call.function?.name ?? "",
      arguments: call.function?.arguments
    })))
    return new InferenceResult({
      content: choice.message.content ?? "",
      toolCalls,
      usage: usageOf(completion.usage, measured),
      finishReason: finishReason(choice.finish_reason, toolCalls.length > 0),
      ...(choice.logprobs === undefined || choice.logprobs === null ? {} : { logprobs: logprobsOf(choice.logprobs) })
    })
  })

/** Decodes one streamed event's data into a chat-completion chunk. */
export const decodeChunk = (payload: string): Either.Either<typeof WireChunk.Type, InferenceFailure> =>
  Either.mapLeft(
    decodeWireChunk(payload),
    (error) =>
      malformed("a streamed event is not a chat-completion chunk", payload, {
        reason: reasonOf(error, "a chat-completion chunk")
      })
  )
