/**
 * OpenAI's chat-completions wire format, translated to and from pagantic's
 * boundary: a request becomes a SystemRequest envelope (plain JSON, checked by the
 * facade like any other), a SystemResponse becomes a `chat.completion` or its
 * `chat.completion.chunk`s. Nothing here builds prompts, runs tools or validates
 * output; it only renames fields, and refuses what it cannot honour. The answer
 * side is OpenAiCompletion.ts, exported from here too.
 *
 * - `messages`: system/developer -> system; assistant `tool_calls` keep their ids
 *   and their JSON `arguments` are parsed; a `tool` message takes its tool name
 *   from the assistant call it answers. A conversation may end with tool
 *   messages: they answer the calls of the assistant message before them, and
 *   the model goes on.
 * - `tools` are the client's own (`clientTools`): offered to the model and never
 *   run here; a call to one comes back as `message.tool_calls` (arguments as JSON
 *   text) with finish_reason "tool_calls", for the client to run and answer with
 *   tool messages. The server's registered tools are an extension: offered on
 *   every request, run server-side in the same turn, and listed under
 *   `pagantic.toolCallsMade`; only a client tool is ever returned as `tool_calls`.
 *   A client tool named like a server tool wins: the client's definition is
 *   offered and the call is returned to the client.
 * - `tool_choice`: auto, none (nothing offered), required (an answer before any
 *   tool call is asked again), a named function (only it offered, and required).
 *   `parallel_tool_calls: false`: only the first call of a reply is acted on.
 * - `response_format`: `json_schema` -> mode structured with its schema,
 *   `json_object` -> structured with `{ type: "object" }`, `text` -> chat.
 *   Structured output runs without tools and log-probabilities: `tools`, a
 *   required `tool_choice` or `logprobs` with it are refused.
 * - Sampling, to the hints: `max_completion_tokens` / `max_tokens`,
 *   `temperature`, `top_p`, `stop` (a string or up to 4), `seed`,
 *   `presence_penalty` / `frequency_penalty`, `logprobs` / `top_logprobs` (the
 *   answer's, in `choices[].logprobs.content`).
 * - `n` (1..8): n runs in parallel, choice i with seed + i when a seed is given,
 *   usage summed over the runs (each run evaluates its prompt).
 * - `stream_options.include_usage`: a last chunk with no choices and the usage.
 * - `user` is accepted and ignored by design; `model` names nothing (the loaded
 *   model answers). Every other OpenAI field (`logit_bias`, `functions`,
 *   `audio`, ...) is refused by an error naming it in `param`.
 */
import * as Either from "effect/Either"
import type { ChatCompletionRequest, ChatMessage } from "./ChatCompletionsWire.js"
import * as Guard from "./Guard.js"

/** What the server adds to every envelope. */
export interface EnvelopeContext {
  readonly requestId: string
  readonly traceId?: string | undefined
  /** The server's time limit, in milliseconds. */
  readonly timeoutMs?: number | undefined
  /** The server's bounds on a body, which the JSON inside `arguments` strings is held to as well. Default `Guard.defaultLimits`. */
  readonly limits?: Guard.Limits | undefined
}

const textOf = (content: ChatMessage["content"]): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
      ? content
      : content.map((part) => part.text).join("")

/** A call's `arguments` string as its object, held to the body's bounds (nesting, values) before anything reads it. */
const parseArguments = (raw: string, where: string, limits: Guard.Limits): Either.Either<Record<string, unknown>, string> => {
  if (raw.trim() === "") return Either.right({})
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    return Either.left(`${where} is not valid JSON`)
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return Either.left(`${where} must be a JSON object`)
  const bounded = Guard.checkShape(value, limits)
  return Either.isLeft(bounded)
    ? Either.left(`${where} ${bounded.left.message.replace(/^the (input|body) /, "")}`)
    : Either.right(value as Record<string, unknown>)
}

const clientFields: ReadonlyArray<readonly [string, string]> = [
  ["hints.maxTokens", "max_tokens"],
  ["hints.temperature", "temperature"],
  ["hints.topP", "top_p"],
  ["hints.stop", "stop"],
  ["hints.seed", "seed"],
  ["hints.presencePenalty", "presence_penalty"],
  ["hints.frequencyPenalty", "frequency_penalty"],
  ["hints.logprobs", "logprobs"],
  ["hints.topLogprobs", "top_logprobs"],
  ["hints", "the request"],
  ["output.schema", "response_format.json_schema.schema"],
  ["output", "response_format"],
  ["clientTools", "tools"],
  ["toolChoice.name", "tool_choice.function.name"],
  ["toolChoice", "tool_choice"],
  ["parallelToolCalls", "parallel_tool_calls"]
]

/**
 * A path of the envelope as the client wrote it: `hints.maxTokens` is the
 * client's `max_tokens`, `output.schema.x` its `response_format.json_schema.schema.x`,
 * `clientTools.0.name` its `tools.0.function.name`. Messages keep their index (one
 * envelope message per client message).
 */
export const clientField = (path: string): string => {
  const tool = /^clientTools\.(\d+)\.(name|description|parameters)(.*)$/.exec(path)
  if (tool !== null) return `tools.${tool[1]}.function.${tool[2]}${tool[3]}`
  for (const [ours, theirs] of clientFields) {
    if (path === ours) return theirs
    if (path.startsWith(`${ours}.`)) return theirs + path.slice(ours.length)
  }
  return path
}

/**
 * OpenAI's `param` for a field path: array indexes in brackets
 * (`tools.0.function.name` -> `tools[0].function.name`).
 */
export const paramOf = (path: string): string => path.replace(/\.(\d+)(?=\.|$)/g, "[$1]")

/** The field an issue line ("path: problem") names, as OpenAI's `param`; none for the whole request. */
export const paramOfIssue = (issue: string | undefined): string | undefined => {
  const at = issue === undefined ? -1 : issue.indexOf(": ")
  if (issue === undefined || at <= 0) return undefined
  const path = issue.slice(0, at)
  return path === "the request" || path.includes(" ") ? undefined : paramOf(path)
}

/** Whether the client asked for structured output. */
export const isStructured = (request: ChatCompletionRequest): boolean =>
  request.response_format?.type === "json_schema" || request.response_format?.type === "json_object"

/** Why a request cannot be an envelope: a message and the client's field. */
export interface Refusal {
  readonly message: string
  readonly param: string
}

const refusal = (param: string, message: string): Either.Either<never, Refusal> =>
  Either.left({ param: paramOf(param), message: `${paramOf(param)}: ${message}` })

/** OpenAI fields pagantic does not implement: refused when set, never dropped silently. */
const unsupported: ReadonlyArray<readonly [string, string]> = [
  ["logit_bias", "token biases are not supported by the local engine"],
  ["functions", "the deprecated functions API is not supported: send tools"],
  ["function_call", "the deprecated functions API is not supported: send tool_choice"],
  ["audio", "audio output is not supported"],
  ["prediction", "predicted outputs are not supported"],
  ["web_search_options", "web search is not supported"]
]

/** The refusal of a set field pagantic does not implement, if the body has one. */
export const checkUnsupported = (body: unknown): Either.Either<void, Refusal> => {
  if (typeof body !== "object" || body === null) return Either.void
  const record = body as Record<string, unknown>
  for (const [field, why] of unsupported) {
    if (record[field] !== undefined && record[field] !== null) return refusal(field, why)
  }
  const modalities = record.modalities
  if (Array.isArray(modalities) && modalities.some((m) => m !== "text")) {
    return refusal("modalities", "only \"text\" is supported")
  }
  return Either.void
}

/** Choices a request asks for: `n`, 1 when absent. */
export const choicesOf = (request: ChatCompletionRequest): number => request.n ?? 1

/** The client's tool_choice as the envelope's toolChoice. */
const toolChoiceOf = (choice: ChatCompletionRequest["tool_choice"]) =>
  choice === undefined || choice === null ? undefined : typeof choice === "string" ? choice : { name: choice.function.name }

/** The SystemRequest envelope (wire form) of a chat-completions request, or why it cannot be one. */
export const toEnvelope = (
  request: ChatCompletionRequest,
  context: EnvelopeContext
): Either.Either<Record<string, unknown>, Refusal> => {
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
          const where = `messages.${i}.tool_calls.${j}.function.arguments`
          const args = parseArguments(call.function.arguments, paramOf(where), context.limits ?? Guard.defaultLimits)
          if (Either.isLeft(args)) return Either.left({ param: paramOf(where), message: args.left })
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
  const tools = request.tools ?? []
  const choice = toolChoiceOf(request.tool_choice)
  if (output !== undefined) {
    // structured output runs without tools (SpecializedLoop), so a tool or a log-probability would be ignored
    if (tools.length > 0) return refusal("tools", "tools cannot be combined with response_format json_object or json_schema")
    if (choice !== undefined && choice !== "none" && choice !== "auto") {
      return refusal("tool_choice", "a tool cannot be required with response_format json_object or json_schema")
    }
    if (request.logprobs === true) {
      return refusal("logprobs", "log-probabilities are returned for chat answers, not with response_format json_object or json_schema")
    }
  }
  if (request.top_logprobs !== undefined && request.top_logprobs !== null && request.logprobs !== true) {
    return refusal("top_logprobs", "needs logprobs: true")
  }
  const stop = typeof request.stop === "string" ? [request.stop] : request.stop ?? []
  const maxTokens = request.max_completion_tokens ?? request.max_tokens
  const present = <K extends string, V>(key: K, value: V | null | undefined) =>
    value === undefined || value === null ? {} : ({ [key]: value } as { [P in K]: V })
  const hints = {
    ...present("maxTokens", maxTokens),
    ...present("temperature", request.temperature),
    ...present("topP", request.top_p),
    ...(stop.length === 0 ? {} : { stop }),
    ...present("seed", request.seed),
    ...present("presencePenalty", request.presence_penalty),
    ...present("frequencyPenalty", request.frequency_penalty),
    ...present("logprobs", request.logprobs),
    ...(request.logprobs === true ? present("topLogprobs", request.top_logprobs) : {}),
    ...(context.timeoutMs === undefined ? {} : { timeout: context.timeoutMs })
  }
  const clientTools = tools.map((t) => ({
    name: t.function.name,
    description: t.function.description ?? "",
    parameters: t.function.parameters ?? { type: "object", properties: {} }
  }))
  return Either.right({
    requestId: context.requestId,
    ...(context.traceId === undefined ? {} : { traceId: context.traceId }),
    mode: output === undefined ? "chat" : "structured",
    messages,
    hints,
    ...(output === undefined ? {} : { output }),
    ...(clientTools.length === 0 ? {} : { clientTools }),
    ...(choice === undefined || output !== undefined ? {} : { toolChoice: choice }),
    ...(request.parallel_tool_calls === undefined || request.parallel_tool_calls === null || output !== undefined
      ? {}
      : { parallelToolCalls: request.parallel_tool_calls })
  })
}

/**
 * The envelope of choice `index` of `n`: choice 0 is the request itself; the
 * others run under their own request id (`<id>.<index>`) and, when the request
 * has a seed, with seed + index, so each choice is reproducible and they differ.
 */
export const choiceEnvelope = (envelope: Record<string, unknown>, index: number): Record<string, unknown> => {
  if (index === 0) return envelope
  const hints = envelope.hints as Record<string, unknown>
  return {
    ...envelope,
    requestId: `${String(envelope.requestId)}.${index}`,
    hints: typeof hints.seed === "number" ? { ...hints, seed: hints.seed + index } : hints
  }
}

// The answer side: a SystemResponse as a chat.completion or its chunks.
export * from "./OpenAiCompletion.js"
