/**
 * The answer side of the chat completions: SystemResponses (one per choice) as a
 * `chat.completion`, or as its `chat.completion.chunk`s when streamed, with the
 * finish reason, content, tool calls, log-probabilities, usage and pagantic's
 * extension. The request side, a chat completion's SystemRequest envelope, is
 * OpenAi.ts.
 */
import type { SystemResponse } from "../../domain/System.js"
import type { ChatCompletion, ChatToolCall, FinishReason } from "./ChatCompletionsWire.js"

/** OpenAI's finish reason for a stop reason. */
export const finishReasonOf = (stopReason: string | undefined): FinishReason =>
  stopReason === "length" || stopReason === "max_tokens"
    ? "length"
    : stopReason === "tool_calls"
    ? "tool_calls"
    : "stop"

/** The message content: the validated JSON in structured mode, the text otherwise. */
export const contentOf = (response: SystemResponse, structured: boolean): string =>
  structured && response.structuredOutput !== undefined ? JSON.stringify(response.structuredOutput) : response.content

/** The client's tool calls the model made, as OpenAI's `tool_calls` (arguments as JSON text). */
export const toolCallsOf = (
  response: SystemResponse
): ReadonlyArray<ChatToolCall & { readonly type: "function" }> =>
  (response.pendingToolCalls ?? []).map((call) => ({
    id: call.id,
    type: "function" as const,
    function: { name: call.name, arguments: JSON.stringify(call.arguments) }
  }))

const bytesOf = (token: string): ReadonlyArray<number> => Array.from(new TextEncoder().encode(token))

/** The answer's log-probabilities in OpenAI's shape, when the request asked for them. */
export const logprobsOf = (response: SystemResponse, asked: boolean): ChatCompletion["choices"][number]["logprobs"] =>
  !asked
    ? null
    : {
      content: (response.logprobs ?? []).map((t) => ({
        token: t.token,
        logprob: t.logprob,
        bytes: bytesOf(t.token),
        top_logprobs: t.topLogprobs.map((a) => ({ token: a.token, logprob: a.logprob, bytes: bytesOf(a.token) }))
      })),
      refusal: null
    }

export interface Usage {
  /** The prompts' tokens, those the engine held already included (OpenAI's meaning). */
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  /** Of the prompt tokens, those the engine held from before and did not evaluate. */
  readonly prompt_tokens_details: { readonly cached_tokens: number }
}

export const usageOf = (response: SystemResponse): Usage => {
  const completion = response.tokenUsage.outputTokens + response.tokenUsage.reasoningTokens
  const cached = response.tokenUsage.cachedPromptTokens ?? 0
  const prompt = response.tokenUsage.promptTokens + cached
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached }
  }
}

/** The usage of all the choices: every run's tokens, summed. */
export const totalUsage = (responses: ReadonlyArray<SystemResponse>): Usage =>
  responses.map(usageOf).reduce(
    (a, b) => ({
      prompt_tokens: a.prompt_tokens + b.prompt_tokens,
      completion_tokens: a.completion_tokens + b.completion_tokens,
      total_tokens: a.total_tokens + b.total_tokens,
      prompt_tokens_details: {
        cached_tokens: a.prompt_tokens_details.cached_tokens + b.prompt_tokens_details.cached_tokens
      }
    }),
    { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, prompt_tokens_details: { cached_tokens: 0 } }
  )

export const extensionOf = (response: SystemResponse): ChatCompletion["pagantic"] => ({
  requestId: response.requestId,
  ...(response.sessionId === undefined ? {} : { sessionId: response.sessionId }),
  ...(response.stopReason === undefined ? {} : { stopReason: response.stopReason }),
  ...(response.structuredOutput === undefined ? {} : { structuredOutput: response.structuredOutput }),
  toolCallsMade: response.toolCallsMade.map((t) => ({
    id: t.id,
    name: t.name,
    arguments: t.arguments,
    result: t.result,
    isError: t.isError
  }))
})

/** The extension of a completion: the first choice's, and every choice's when there are several. */
const extensionOfAll = (responses: ReadonlyArray<SystemResponse>): ChatCompletion["pagantic"] => ({
  ...extensionOf(responses[0]!),
  ...(responses.length > 1 ? { choices: responses.map(extensionOf) } : {})
})

export const completionId = (requestId: string): string => `chatcmpl-${requestId}`

export interface CompletionMeta {
  readonly model: string
  readonly created: number
  readonly structured: boolean
  /** Whether the request asked for log-probabilities. */
  readonly logprobs: boolean
}

/** A message's content: null when the model only called tools. */
const messageContent = (response: SystemResponse, structured: boolean): string | null => {
  const content = contentOf(response, structured)
  return content === "" && (response.pendingToolCalls ?? []).length > 0 ? null : content
}

/** Successful responses, one per choice in order, as a `chat.completion`. */
export const toCompletion = (responses: ReadonlyArray<SystemResponse>, meta: CompletionMeta): ChatCompletion => ({
  id: completionId(responses[0]!.requestId),
  object: "chat.completion",
  created: meta.created,
  model: meta.model,
  choices: responses.map((response, index) => {
    const toolCalls = toolCallsOf(response)
    return {
      index,
      message: {
        role: "assistant" as const,
        content: messageContent(response, meta.structured),
        refusal: null,
        ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls })
      },
      logprobs: logprobsOf(response, meta.logprobs),
      finish_reason: finishReasonOf(response.stopReason)
    }
  }),
  usage: totalUsage(responses),
  pagantic: extensionOfAll(responses)
})

/** What a chunk's choice carries: a role, text, tool calls (each whole, with its index among the calls). */
export interface Delta {
  readonly role?: "assistant"
  readonly content?: string
  readonly tool_calls?: ReadonlyArray<{
    readonly index: number
    readonly id: string
    readonly type: "function"
    readonly function: { readonly name: string; readonly arguments: string }
  }>
}

/** One `chat.completion.chunk` for choice `index`. */
export const chunk = (
  meta: { readonly id: string; readonly model: string; readonly created: number },
  delta: Delta,
  finish: FinishReason | null = null,
  extra: Record<string, unknown> = {},
  index = 0,
  choiceExtra: Record<string, unknown> = {}
): Record<string, unknown> => ({
  id: meta.id,
  object: "chat.completion.chunk",
  created: meta.created,
  model: meta.model,
  choices: [{ index, delta, ...choiceExtra, finish_reason: finish }],
  ...extra
})

/** The last chunk of a stream that asked for usage (`stream_options.include_usage`): no choices, the usage. */
export const usageChunk = (
  meta: { readonly id: string; readonly model: string; readonly created: number },
  usage: Usage
): Record<string, unknown> => ({
  id: meta.id,
  object: "chat.completion.chunk",
  created: meta.created,
  model: meta.model,
  choices: [],
  usage
})
