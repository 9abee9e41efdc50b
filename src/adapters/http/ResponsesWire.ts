/**
 * OpenAI's Responses API (`POST /v1/responses`) translated to and from the chat
 * completions the server already speaks: a request body becomes a chat
 * completions body (then checked and run exactly as one), a chat answer becomes a
 * `response` object, a streamed one the Responses stream's events.
 *
 * - `input`: a string is one user message; items are messages (`role` system,
 *   developer, user or assistant, content a string or `input_text`/`output_text`
 *   parts), `function_call` (the client ran it: an assistant tool call) and
 *   `function_call_output` (its result: a tool message); `reasoning` items are
 *   skipped (nothing here reasons apart). `instructions` is a system message first.
 * - `tools`: function tools (`{type: "function", name, description, parameters}`)
 *   are the client's own, returned as `function_call` output items for the client
 *   to run, as chat completions return `tool_calls`; built-in tools (web search,
 *   file search, computer use...) are refused, naming `tools[i].type`.
 * - `tool_choice` (auto, none, required, `{type: "function", name}`),
 *   `parallel_tool_calls`, `temperature`, `top_p`, `max_output_tokens`, `text.format`
 *   (text, json_object, json_schema), `stream`, `user` map to their chat fields.
 * - Refused when set, never dropped silently: `previous_response_id`, `conversation`,
 *   `background: true`, `prompt`, `reasoning` effort; `store`, `metadata`,
 *   `include`, `truncation`, `service_tier`, `text.verbosity` are accepted and
 *   ignored (nothing is stored: the API is used statelessly).
 */
import * as Either from "effect/Either"
import type { SystemResponse } from "../../domain/System.js"
import * as Json from "../../domain/Json.js"
import * as OpenAi from "./OpenAi.js"

/** Why a Responses body cannot be a chat completions body: a message and the client's field. */
export interface Refusal {
  readonly message: string
  readonly param: string
}

const refuse = (param: string, message: string): Either.Either<never, Refusal> =>
  Either.left({ param, message: `${param}: ${message}` })

const describe = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "an array" : typeof value

/** A message's content as chat content: a string, or its text parts joined. */
const contentOf = (content: unknown, at: string): Either.Either<string, Refusal> => {
  if (typeof content === "string") return Either.right(content)
  if (!Array.isArray(content)) return refuse(at, `expected a string or an array of content parts, got ${describe(content)}`)
  let text = ""
  for (const [i, part] of content.entries()) {
    if (!Json.isObject(part)) return refuse(`${at}[${i}]`, `expected a content part object, got ${describe(part)}`)
    if ((part.type === "input_text" || part.type === "output_text" || part.type === "text") && typeof part.text === "string") {
      text += part.text
    } else if (part.type === "refusal") {
      continue
    } else {
      return refuse(`${at}[${i}].type`, `only text parts are supported (input_text, output_text), got ${JSON.stringify(part.type)}`)
    }
  }
  return Either.right(text)
}

const ROLES = new Set(["system", "developer", "user", "assistant"])

/** `input` and `instructions` as chat messages. */
const messagesOf = (body: Record<string, unknown>): Either.Either<ReadonlyArray<Record<string, unknown>>, Refusal> => {
  const messages: Array<Record<string, unknown>> = []
  if (body.instructions !== undefined && body.instructions !== null) {
    if (typeof body.instructions !== "string") return refuse("instructions", `expected a string, got ${describe(body.instructions)}`)
    messages.push({ role: "system", content: body.instructions })
  }
  const input = body.input
  if (typeof input === "string") {
    messages.push({ role: "user", content: input })
    return Either.right(messages)
  }
  if (!Array.isArray(input)) return refuse("input", `expected a string or an array of input items, got ${describe(input)}`)
  for (const [i, item] of input.entries()) {
    const at = `input[${i}]`
    if (!Json.isObject(item)) return refuse(at, `expected an input item object, got ${describe(item)}`)
    const type = item.type ?? "message"
    if (type === "message") {
      if (typeof item.role !== "string" || !ROLES.has(item.role)) {
        return refuse(`${at}.role`, `expected one of system, developer, user, assistant, got ${JSON.stringify(item.role)}`)
      }
      const content = contentOf(item.content, `${at}.content`)
      if (Either.isLeft(content)) return Either.left(content.left)
      messages.push({ role: item.role, content: content.right })
    } else if (type === "function_call") {
      if (typeof item.call_id !== "string" || typeof item.name !== "string" || typeof item.arguments !== "string") {
        return refuse(at, "a function_call needs call_id, name and arguments (strings)")
      }
      const call = { id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } }
      // consecutive calls of one turn are one assistant message
      const last = messages[messages.length - 1]
      if (last !== undefined && last.role === "assistant" && Array.isArray(last.tool_calls)) {
        ;(last.tool_calls as Array<unknown>).push(call)
      } else {
        messages.push({ role: "assistant", content: null, tool_calls: [call] })
      }
    } else if (type === "function_call_output") {
      if (typeof item.call_id !== "string") return refuse(`${at}.call_id`, "expected a string")
      const output = typeof item.output === "string" ? Either.right(item.output) : contentOf(item.output, `${at}.output`)
      if (Either.isLeft(output)) return Either.left(output.left)
      messages.push({ role: "tool", tool_call_id: item.call_id, content: output.right })
    } else if (type === "reasoning") {
      continue
    } else {
      return refuse(`${at}.type`, `input items of type ${JSON.stringify(type)} are not supported (message, function_call, function_call_output)`)
    }
  }
  return Either.right(messages)
}

const toolsOf = (tools: unknown): Either.Either<ReadonlyArray<unknown> | undefined, Refusal> => {
  if (tools === undefined || tools === null) return Either.right(undefined)
  if (!Array.isArray(tools)) return refuse("tools", `expected an array, got ${describe(tools)}`)
  const out: Array<unknown> = []
  for (const [i, tool] of tools.entries()) {
    if (!Json.isObject(tool)) return refuse(`tools[${i}]`, `expected a tool object, got ${describe(tool)}`)
    if (tool.type !== "function") {
      return refuse(`tools[${i}].type`, `only function tools are supported, got ${JSON.stringify(tool.type)}`)
    }
    out.push({
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description === undefined || tool.description === null ? {} : { description: tool.description }),
        ...(tool.parameters === undefined || tool.parameters === null ? {} : { parameters: tool.parameters }),
        ...(tool.strict === undefined ? {} : { strict: tool.strict })
      }
    })
  }
  return Either.right(out)
}

const toolChoiceOf = (choice: unknown): Either.Either<unknown, Refusal> => {
  if (choice === undefined || choice === null || typeof choice === "string") return Either.right(choice)
  if (Json.isObject(choice) && choice.type === "function" && typeof choice.name === "string") {
    return Either.right({ type: "function", function: { name: choice.name } })
  }
  return refuse("tool_choice", "expected auto, none, required or {type: \"function\", name}")
}

const formatOf = (text: unknown): Either.Either<unknown, Refusal> => {
  if (text === undefined || text === null) return Either.right(undefined)
  if (!Json.isObject(text)) return refuse("text", `expected an object, got ${describe(text)}`)
  const format = text.format
  if (format === undefined || format === null) return Either.right(undefined)
  if (!Json.isObject(format)) return refuse("text.format", `expected an object, got ${describe(format)}`)
  switch (format.type) {
    case "text":
    case "json_object":
      return Either.right({ type: format.type })
    case "json_schema":
      return Either.right({
        type: "json_schema",
        json_schema: {
          ...(typeof format.name === "string" ? { name: format.name } : {}),
          ...(format.schema === undefined ? {} : { schema: format.schema }),
          ...(format.strict === undefined ? {} : { strict: format.strict })
        }
      })
    default:
      return refuse("text.format.type", `expected text, json_object or json_schema, got ${JSON.stringify(format.type)}`)
  }
}

/** Fields of the Responses API that need server-side state or features this server does not have. */
const unsupported: ReadonlyArray<readonly [string, (value: unknown) => boolean, string]> = [
  ["previous_response_id", (v) => v !== undefined && v !== null, "responses are not stored: send the whole conversation as input"],
  ["conversation", (v) => v !== undefined && v !== null, "conversations are not stored: send the whole conversation as input"],
  ["background", (v) => v === true, "background responses are not supported"],
  ["prompt", (v) => v !== undefined && v !== null, "stored prompts are not supported"],
  ["reasoning", (v) => Json.isObject(v) && v.effort !== undefined && v.effort !== null, "reasoning effort is not supported by the local engine"]
]

/** Maps a chat completions field the checks name back to the Responses field the client sent. */
export const responsesParam = (param: string | null): string | null => {
  if (param === null) return null
  if (param.startsWith("max_tokens") || param.startsWith("max_completion_tokens")) return "max_output_tokens"
  if (param.startsWith("response_format.json_schema.")) return `text.format.${param.slice("response_format.json_schema.".length)}`
  if (param.startsWith("response_format")) return `text.format${param.slice("response_format".length)}`
  if (param.startsWith("messages")) return "input"
  const tool = /^tools\[(\d+)\]\.function\.(.*)$/.exec(param)
  if (tool !== null) return `tools[${tool[1]}].${tool[2]}`
  return param
}

/** A Responses request body as a chat completions body (the server checks it as one). */
export const toChat = (body: unknown): Either.Either<Record<string, unknown>, Refusal> => {
  if (!Json.isObject(body)) return refuse("the request", `expected a JSON object, got ${describe(body)}`)
  for (const [field, isSet, why] of unsupported) {
    if (isSet(body[field])) return refuse(field, why)
  }
  return Either.gen(function*() {
    const messages = yield* messagesOf(body)
    const tools = yield* toolsOf(body.tools)
    const toolChoice = yield* toolChoiceOf(body.tool_choice)
    const format = yield* formatOf(body.text)
    const copy = (from: string, to: string = from) =>
      body[from] === undefined || body[from] === null ? {} : { [to]: body[from] }
    return {
      messages,
      ...(tools === undefined ? {} : { tools }),
      ...(toolChoice === undefined || toolChoice === null ? {} : { tool_choice: toolChoice }),
      ...(format === undefined ? {} : { response_format: format }),
      ...copy("model"),
      ...copy("parallel_tool_calls"),
      ...copy("temperature"),
      ...copy("top_p"),
      ...copy("max_output_tokens", "max_tokens"),
      ...copy("stream"),
      ...copy("user"),
      ...(body.stream === true ? { stream_options: { include_usage: true } } : {})
    }
  })
}

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

/** What every response object of one request shares. */
export interface Meta {
  readonly id: string
  readonly model: string
  readonly created: number
}

export const responseId = (requestId: string): string => `resp_${requestId}`

const usageOf = (responses: ReadonlyArray<SystemResponse>) => {
  const usage = OpenAi.totalUsage(responses)
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details.cached_tokens },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.total_tokens
  }
}

/** The output message item of an answer's text. */
export const messageItem = (meta: Meta, text: string, status: "in_progress" | "completed") => ({
  type: "message",
  id: `msg_${meta.id}`,
  role: "assistant",
  status,
  content: status === "completed" ? [{ type: "output_text", text, annotations: [], logprobs: [] }] : []
})

/** The function_call output items of an answer's client tool calls. */
export const callItems = (meta: Meta, response: SystemResponse) =>
  OpenAi.toolCallsOf(response).map((call, i) => ({
    type: "function_call",
    id: `fc_${meta.id}_${i}`,
    call_id: call.id,
    name: call.function.name,
    arguments: call.function.arguments,
    status: "completed"
  }))

/** The output items of an answer: its text (when there is any or nothing else), then its calls. */
export const outputOf = (meta: Meta, response: SystemResponse, structured: boolean) => {
  const text = OpenAi.contentOf(response, structured)
  const calls = callItems(meta, response)
  return [...(text === "" && calls.length > 0 ? [] : [messageItem(meta, text, "completed")]), ...calls]
}

/** A `response` object: in progress (no output yet) or finished with its output and usage. */
export const responseObject = (
  meta: Meta,
  request: Record<string, unknown>,
  finished: { readonly response: SystemResponse; readonly structured: boolean } | undefined
) => {
  const cut = finished !== undefined && OpenAi.finishReasonOf(finished.response.stopReason) === "length"
  return {
    id: meta.id,
    object: "response",
    created_at: meta.created,
    status: finished === undefined ? "in_progress" : cut ? "incomplete" : "completed",
    error: null,
    incomplete_details: cut ? { reason: "max_output_tokens" } : null,
    instructions: typeof request.instructions === "string" ? request.instructions : null,
    model: meta.model,
    output: finished === undefined ? [] : outputOf(meta, finished.response, finished.structured),
    output_text: finished === undefined ? "" : OpenAi.contentOf(finished.response, finished.structured),
    parallel_tool_calls: request.parallel_tool_calls !== false,
    temperature: typeof request.temperature === "number" ? request.temperature : null,
    top_p: typeof request.top_p === "number" ? request.top_p : null,
    max_output_tokens: typeof request.max_output_tokens === "number" ? request.max_output_tokens : null,
    tool_choice: request.tool_choice ?? "auto",
    tools: Array.isArray(request.tools) ? request.tools : [],
    text: { format: Json.isObject(request.text) && Json.isObject(request.text.format) ? request.text.format : { type: "text" } },
    store: false,
    metadata: {},
    usage: finished === undefined ? null : usageOf([finished.response]),
    ...(finished === undefined ? {} : { pagantic: OpenAi.extensionOf(finished.response) })
  }
}
