/**
 * Translation between pagantic's conversation and node-llama-cpp's.
 *
 * node-llama-cpp keeps a whole model turn in one `model` item: text, the function
 * calls it made and their results, and the text it wrote after reading them. Our
 * conversation spreads the same turn over assistant and tool messages. So an
 * assistant message opens a model item, and the tool messages and assistant
 * messages that follow it (until the next user or system message) continue it;
 * each tool result is attached to the call with the same id. The history always
 * ends with a model item: generation continues it.
 *
 * JSON schemas of our subset become node-llama-cpp's GBNF JSON schemas, which it
 * compiles to grammars for structured output and function parameters.
 */
import type { ChatHistoryItem, ChatModelFunctionCall, ChatModelFunctions, ChatModelResponse, GbnfJsonSchema } from "node-llama-cpp"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import type { Message, ToolDefinition } from "../../domain/Message.js"

/** A tool message that answers no preceding tool call. */
export interface OrphanToolResult {
  readonly _tag: "OrphanToolResult"
  readonly toolCallId: string
  readonly name: string
}

/** Converts our messages to node-llama-cpp's chat history, ending in an open model item. */
export const toChatHistory = (
  messages: ReadonlyArray<Message>
): { readonly history: Array<ChatHistoryItem> } | OrphanToolResult => {
  const results = new Map<string, string>()
  for (const message of messages) {
    if (message._tag === "ToolMessage") results.set(message.toolCallId, message.content)
  }
  const calls = new Set<string>()
  const history: Array<ChatHistoryItem> = []
  let open: ChatModelResponse | undefined
  for (const message of messages) {
    switch (message._tag) {
      case "SystemMessage":
        history.push({ type: "system", text: message.content })
        open = undefined
        break
      case "UserMessage":
        history.push({ type: "user", text: message.content })
        open = undefined
        break
      case "AssistantMessage": {
        if (open === undefined) {
          open = { type: "model", response: [] }
          history.push(open)
        }
        if (message.content !== "") open.response.push(message.content)
        message.toolCalls.forEach((call, index) => {
          calls.add(call.id)
          const item: ChatModelFunctionCall = {
            type: "functionCall",
            name: call.name,
            params: call.arguments,
            result: results.get(call.id) ?? "",
            startsNewChunk: index === 0
          }
          open!.response.push(item)
        })
        break
      }
      case "ToolMessage":
        if (!calls.has(message.toolCallId)) {
          return { _tag: "OrphanToolResult", toolCallId: message.toolCallId, name: message.name }
        }
        break
    }
  }
  if (history.at(-1)?.type !== "model") history.push({ type: "model", response: [] })
  return { history }
}

const ANY_SCALAR: GbnfJsonSchema = { type: ["string", "number", "boolean", "null"] }

/** Converts a schema of our JSON-schema subset to node-llama-cpp's GBNF JSON schema. */
export const toGbnfSchema = (schema: JsonSchema): GbnfJsonSchema => {
  const description = schema.description === undefined ? {} : { description: schema.description }
  if (schema.enum !== undefined) return { enum: [...schema.enum], ...description }
  if (schema.anyOf !== undefined && schema.anyOf.length > 0) {
    return { oneOf: schema.anyOf.map(toGbnfSchema), ...description }
  }
  switch (schema.type) {
    case "object": {
      const properties: Record<string, GbnfJsonSchema> = {}
      for (const [key, value] of Object.entries(schema.properties ?? {})) properties[key] = toGbnfSchema(value)
      return {
        type: "object",
        properties,
        ...(schema.required === undefined ? {} : { required: [...schema.required] }),
        ...(schema.properties === undefined ? { additionalProperties: true } : {}),
        ...description
      }
    }
    case "array":
      return schema.items === undefined
        ? { type: "array", ...description }
        : { type: "array", items: toGbnfSchema(schema.items), ...description }
    case "string":
    case "number":
    case "integer":
    case "boolean":
    case "null":
      return { type: schema.type, ...description }
    case undefined:
      return {
        oneOf: [ANY_SCALAR, { type: "object", additionalProperties: true }, { type: "array" }],
        ...description
      }
  }
}

/** Our tool definitions as node-llama-cpp functions without handlers: calls are returned, not run. */
export const toChatFunctions = (tools: ReadonlyArray<ToolDefinition>): ChatModelFunctions => {
  const functions: Record<string, ChatModelFunctions[string]> = {}
  for (const tool of tools) {
    functions[tool.name] = { description: tool.description, params: toGbnfSchema(tool.parameters) }
  }
  return functions
}
