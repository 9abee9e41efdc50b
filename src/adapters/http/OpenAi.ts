/**
 * OpenAI's chat-completions wire format, translated to and from pagantic's
 * boundary: a request becomes a SystemRequest envelope (plain JSON, checked by the
 * facade like any other), a SystemResponse becomes a `chat.completion` or its
 * `chat.completion.chunk`s. Nothing here builds prompts, runs tools or validates
 * output; it only renames fields.
 *
 * - `messages`: system/developer -> system; assistant `tool_calls` keep their ids
 *   and their JSON `arguments` are parsed; a `tool` message takes its tool name
 *   from the assistant call it answers.
 * - `tools`: their names are the request's whitelist over the tools the server
 *   registered (a name it does not register is TOOL_NOT_FOUND, 422); the server runs them itself in the facade's tool loop, so the
 *   answer is the final text (tools run are listed under `pagantic.toolCallsMade`)
 *   and never asks the client to run a tool. No `tools` means every registered tool
 *   (a SystemRequest cannot say "none"), and `tool_choice` is ignored. A
 *   conversation must end with a user message: tool results the client ran
 *   itself may appear in the history, not as the last message.
 * - `response_format`: `json_schema` -> mode structured with its schema,
 *   `json_object` -> structured with `{ type: "object" }`, `text` -> chat.
 * - `max_completion_tokens` / `max_tokens`, `temperature`, `top_p` -> hints.
 */
import * as Either from "effect/Either"
import type { SystemResponse } from "../../domain/System.js"
import type { ChatCompletion, ChatCompletionRequest, ChatMessage, FinishReason } from "./Api.js"

/** What the server adds to every envelope. */
export interface EnvelopeContext {
  readonly requestId: string
  readonly traceId?: string | undefined
  /** The server's time limit, in milliseconds. */
  readonly timeoutMs?: number | undefined
}

const textOf = (content: ChatMessage["content"]): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
      ? content
      : content.map((part) => part.text).join("")

const parseArguments = (raw: string, where: string): Either.Either<Record<string, unknown>, string> => {
  if (raw.trim() === "") return Either.right({})
  try {
    const value: unknown = JSON.parse(raw)
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? Either.right(value as Record<string, unknown>)
      : Either.left(`${where} must be a JSON object`)
  } catch {
    return Either.left(`${where} is not valid JSON`)
  }
}

const clientFields: ReadonlyArray<readonly [string, string]> = [
  ["hints.maxTokens", "max_tokens"],
  ["hints.temperature", "temperature"],
  ["hints.topP", "top_p"],
  ["hints", "the request"],
  ["output.schema", "response_format.json_schema.schema"],
  ["output", "response_format"]
]

/**
 * A path of the envelope as the client wrote it: `hints.maxTokens` is the
 * client's `max_tokens`, `output.schema.x` its `response_format.json_schema.schema.x`.
 * Messages keep their index (one envelope message per client message).
 */
export const clientField = (path: string): string => {
  for (const [ours, theirs] of clientFields) {
    if (path === ours) return theirs
    if (path.startsWith(`${ours}.`)) return theirs + path.slice(ours.length)
  }
  return path
}

/** Whether the client asked for structured output. */
export const isStructured = (request: ChatCompletionRequest): boolean =>
  request.response_format?.type === "json_schema" || request.response_format?.type === "json_object"

/** The SystemRequest envelope (wire form) of a chat-completions request, or why it cannot be one. */
export const toEnvelope = (
  request: ChatCompletionRequest,
  context: EnvelopeContext
): Either.Either<Record<string, unknown>, string> => {
  if (request.n !== undefined && request.n !== null && request.n !== 1) {
    return Either.left(`n: only 1 choice is supported, got ${request.n}`)
  }
  const toolNames = new Map<string, string>()
  const messages: Array<Record<string, unknown>> = []
  for (const [i, m] of request.messages.entries()) {
    const content = textOf(m.content)
    switch (m.role) {
      case "system":
      case "developer":
        messages.push({ role: "system", content })
        break
      case "user":
        messages.push({ role: "user", content })
        break
      case "assistant": {
        const toolCalls: Array<Record<string, unknown>> = []
        for (const [j, call] of (m.tool_calls ?? []).entries()) {
          const args = parseArguments(call.function.arguments, `messages[${i}].tool_calls[${j}].function.arguments`)
          if (Either.isLeft(args)) return Either.left(args.left)
          toolNames.set(call.id, call.function.name)
          toolCalls.push({ id: call.id, name: call.function.name, arguments: args.right })
        }
        messages.push(toolCalls.length > 0 ? { role: "assistant", content, toolCalls } : { role: "assistant", content })
        break
      }
      case "tool": {
        const name = m.name ?? (m.tool_call_id === undefined ? undefined : toolNames.get(m.tool_call_id))
        messages.push({
          role: "tool",
          content,
          ...(m.tool_call_id === undefined ? {} : { toolCallId: m.tool_call_id }),
          ...(name === undefined ? {} : { name })
        })
        break
      }
    }
  }
  const format = request.response_format
  const output =
    format?.type === "json_schema"
      ? format.json_schema.schema === undefined
        ? {}
        : { schema: format.json_schema.schema }
      : format?.type === "json_object"
        ? { schema: { type: "object" } }
        : undefined
  const maxTokens = request.max_completion_tokens ?? request.max_tokens
  const hints = {
    ...(maxTokens === undefined || maxTokens === null ? {} : { maxTokens }),
    ...(request.temperature === undefined || request.temperature === null ? {} : { temperature: request.temperature }),
    ...(request.top_p === undefined || request.top_p === null ? {} : { topP: request.top_p }),
    ...(context.timeoutMs === undefined ? {} : { timeout: context.timeoutMs })
  }
  const tools = (request.tools ?? []).map((t) => t.function.name)
  return Either.right({
    requestId: context.requestId,
    ...(context.traceId === undefined ? {} : { traceId: context.traceId }),
    mode: output === undefined ? "chat" : "structured",
    messages,
    hints,
    ...(output === undefined ? {} : { output }),
    ...(tools.length === 0 ? {} : { tools })
  })
}

/** OpenAI's finish reason for a stop reason. */
export const finishReasonOf = (stopReason: string | undefined): FinishReason =>
  stopReason === "length" || stopReason === "max_tokens" ? "length" : "stop"

/** The message content: the validated JSON in structured mode, the text otherwise. */
export const contentOf = (response: SystemResponse, structured: boolean): string =>
  structured && response.structuredOutput !== undefined ? JSON.stringify(response.structuredOutput) : response.content

export const usageOf = (response: SystemResponse) => {
  const completion = response.tokenUsage.outputTokens + response.tokenUsage.reasoningTokens
  return {
    prompt_tokens: response.tokenUsage.promptTokens,
    completion_tokens: completion,
    total_tokens: response.tokenUsage.promptTokens + completion
  }
}

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

export const completionId = (requestId: string): string => `chatcmpl-${requestId}`

/** A successful response as a `chat.completion`. */
export const toCompletion = (
  response: SystemResponse,
  meta: { readonly model: string; readonly created: number; readonly structured: boolean }
): ChatCompletion => ({
  id: completionId(response.requestId),
  object: "chat.completion",
  created: meta.created,
  model: meta.model,
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: contentOf(response, meta.structured), refusal: null },
      logprobs: null,
      finish_reason: finishReasonOf(response.stopReason)
    }
  ],
  usage: usageOf(response),
  pagantic: extensionOf(response)
})

/** One `chat.completion.chunk`. */
export const chunk = (
  meta: { readonly id: string; readonly model: string; readonly created: number },
  delta: { readonly role?: "assistant"; readonly content?: string },
  finish: FinishReason | null = null,
  extra: Record<string, unknown> = {}
): Record<string, unknown> => ({
  id: meta.id,
  object: "chat.completion.chunk",
  created: meta.created,
  model: meta.model,
  choices: [{ index: 0, delta, finish_reason: finish }],
  ...extra
})
