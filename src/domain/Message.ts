/**
 * Layer 0: the conversation unit.
 *
 * A Message is what every layer speaks. Which fields a message carries depends on
 * its role: system and user messages carry content only, assistant messages carry
 * content and/or tool calls, tool messages carry the result of exactly one call.
 * The constructors below are the only way to build a valid combination; decoding
 * from JSON checks the same rules.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as AST from "effect/SchemaAST"
import { JsonSchema } from "./JsonSchema.js"
import * as Construct from "./Construct.js"

/** The four roles of the conversation. */
export const Role = Schema.Literal("system", "user", "assistant", "tool")
export type Role = typeof Role.Type

/** A tool invocation requested by the model. */
export class ToolCall extends Schema.Class<ToolCall>("ToolCall")({
  id: Schema.String,
  name: Schema.String,
  arguments: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}) {}

/** A tool the model may call: a name, a description and its parameters' JSON schema. */
export class ToolDefinition extends Schema.Class<ToolDefinition>("ToolDefinition")({
  name: Schema.String.pipe(Schema.pattern(/^[A-Za-z_][A-Za-z0-9_-]{0,63}$/)),
  description: Schema.String,
  parameters: JsonSchema
}) {}

/** The outcome of one tool call, as fed back to the model. */
export class ToolResult extends Schema.Class<ToolResult>("ToolResult")({
  callId: Schema.String,
  name: Schema.String,
  content: Schema.String,
  isError: Schema.Boolean
}) {}

export class SystemMessage extends Schema.TaggedClass<SystemMessage>()("SystemMessage", {
  role: Schema.Literal("system"),
  content: Schema.String
}) {}

export class UserMessage extends Schema.TaggedClass<UserMessage>()("UserMessage", {
  role: Schema.Literal("user"),
  content: Schema.String
}) {}

export class AssistantMessage extends Schema.TaggedClass<AssistantMessage>()("AssistantMessage", {
  role: Schema.Literal("assistant"),
  content: Schema.String,
  toolCalls: Schema.Array(ToolCall)
}) {}

export class ToolMessage extends Schema.TaggedClass<ToolMessage>()("ToolMessage", {
  role: Schema.Literal("tool"),
  content: Schema.String,
  toolCallId: Schema.String,
  name: Schema.String,
  isError: Schema.Boolean
}) {}

/** A message of any role, tagged so that invalid field combinations cannot be built. */
export const Message = Schema.Union(SystemMessage, UserMessage, AssistantMessage, ToolMessage)
export type Message = typeof Message.Type

/**
 * The wire form of a message (OpenAI-like, untagged), as it arrives in a
 * SystemRequest over HTTP. Decoding checks the role/field combination.
 */
const WireMessageFields = Schema.Struct({
  role: Role,
  content: Schema.optionalWith(Schema.String, { default: () => "" }),
  toolCalls: Schema.optional(Schema.Array(ToolCall)),
  toolCallId: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  isError: Schema.optional(Schema.Boolean)
})

export const WireMessage = Schema.transformOrFail(WireMessageFields, Message, {
  strict: true,
  decode: (wire, _, ast) => {
    switch (wire.role) {
      case "system":
      case "user":
        if (wire.toolCalls !== undefined || wire.toolCallId !== undefined) {
          return ParseResultFail(ast, wire, `a ${wire.role} message carries content only`)
        }
        return ParseResultOk(
          wire.role === "system"
            ? { _tag: "SystemMessage" as const, role: "system" as const, content: wire.content }
            : { _tag: "UserMessage" as const, role: "user" as const, content: wire.content }
        )
      case "assistant":
        if (wire.toolCallId !== undefined) {
          return ParseResultFail(ast, wire, "an assistant message cannot carry toolCallId")
        }
        return ParseResultOk({
          _tag: "AssistantMessage" as const,
          role: "assistant" as const,
          content: wire.content,
          toolCalls: (wire.toolCalls ?? []).map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }))
        })
      case "tool":
        if (wire.toolCallId === undefined || wire.name === undefined) {
          return ParseResultFail(ast, wire, "a tool message needs toolCallId and name")
        }
        return ParseResultOk({
          _tag: "ToolMessage" as const,
          role: "tool" as const,
          content: wire.content,
          toolCallId: wire.toolCallId,
          name: wire.name,
          isError: wire.isError ?? false
        })
    }
  },
  encode: (message) => {
    switch (message.role) {
      case "system":
      case "user":
        return ParseResultOk({ role: message.role, content: message.content })
      case "assistant":
        return ParseResultOk(
          message.toolCalls.length > 0
            ? { role: message.role, content: message.content, toolCalls: message.toolCalls }
            : { role: message.role, content: message.content }
        )
      case "tool":
        return ParseResultOk({
          role: message.role,
          content: message.content,
          toolCallId: message.toolCallId,
          name: message.name,
          isError: message.isError
        })
    }
  }
})

const ParseResultOk = ParseResult.succeed
const ParseResultFail = (ast: AST.AST, actual: unknown, message: string) =>
  ParseResult.fail(new ParseResult.Type(ast, actual, message))

// ---------------------------------------------------------------------------
// Constructors: the only valid field combinations
// ---------------------------------------------------------------------------
// Their parameter types are the schemas' (strings, booleans, ToolCall values), so
// the messages are built without re-validation: validation belongs where data
// comes in from outside (WireMessage, Message decoding), not on every message the
// loops build.

export const system = (content: string): Message => Construct.unchecked(SystemMessage, { role: "system", content })

export const user = (content: string): Message => Construct.unchecked(UserMessage, { role: "user", content })

export const assistant = (content: string, toolCalls: ReadonlyArray<ToolCall> = []): Message =>
  Construct.unchecked(AssistantMessage, { role: "assistant", content, toolCalls })

export const toolResult = (result: ToolResult): Message =>
  Construct.unchecked(ToolMessage, {
    role: "tool",
    content: result.content,
    toolCallId: result.callId,
    name: result.name,
    isError: result.isError
  })

export const isAssistant = (m: Message): m is AssistantMessage => m._tag === "AssistantMessage"
export const isTool = (m: Message): m is ToolMessage => m._tag === "ToolMessage"
export const isSystem = (m: Message): m is SystemMessage => m._tag === "SystemMessage"
export const isUser = (m: Message): m is UserMessage => m._tag === "UserMessage"
