/**
 * The messages of a run loop's transcript.
 *
 * A run keeps a richer record than what an engine reads: every message has an
 * id and metadata, a tool message keeps the handler's raw value beside the text
 * the model sees, and a fifth role, `internal`, carries notes for the caller
 * (plans, traces, reminders) that stay in the transcript and are never sent to an
 * engine. `toEngine` is the one boundary where a run message becomes the domain
 * Message an engine speaks: metadata and raw results are dropped there, and
 * internal messages are left out.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as Message from "../../domain/Message.js"
import { IdGenerator } from "../../services/IdGenerator.js"
import * as Construct from "../../domain/Construct.js"

/** The roles of a run's messages: the conversation's four, and `internal` (never sent to an engine). */
export const Role = Schema.Literal("system", "user", "assistant", "tool", "internal")
export type Role = typeof Role.Type

/** The result of one tool call as the run keeps it: the text fed back and the handler's own value. */
export class RunToolResult extends Schema.Class<RunToolResult>("RunToolResult")({
  callId: Schema.String,
  name: Schema.String,
  content: Schema.String,
  isError: Schema.Boolean,
  /** The handler's value before it was encoded as text (absent for failures and calls not run). */
  raw: Schema.optional(Schema.Unknown)
}) {}

/** One message of a run's transcript. */
export class RunMessage extends Schema.Class<RunMessage>("RunMessage")({
  id: Schema.String,
  role: Role,
  content: Schema.String,
  toolCalls: Schema.optionalWith(Schema.Array(Message.ToolCall), { default: () => [] }),
  /** Present exactly on `tool` messages. */
  toolResult: Schema.optional(RunToolResult),
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}) {}

/** What a loop accepts as input: its own messages, or the domain's. */
export type Input = RunMessage | Message.Message

// ---------------------------------------------------------------------------
// Constructors (ids from the context's IdGenerator)
// ---------------------------------------------------------------------------

export interface Fields {
  readonly id?: string | undefined
  readonly metadata?: Record<string, unknown> | undefined
}

/** A run message with the id it is given, built at once (a loop draws the id: see run/Loop). */
export const build = (
  id: string,
  role: Role,
  content: string,
  fields: Omit<Fields, "id"> = {},
  extra: { readonly toolCalls?: ReadonlyArray<Message.ToolCall>; readonly toolResult?: RunToolResult } = {}
): RunMessage =>
  Construct.unchecked(RunMessage, {
    id,
    role,
    content,
    toolCalls: extra.toolCalls ?? [],
    ...(extra.toolResult === undefined ? {} : { toolResult: extra.toolResult }),
    metadata: fields.metadata ?? {}
  }) // typed as the schema's fields: built without re-validation

const make = (
  role: Role,
  content: string,
  fields: Fields,
  extra: { readonly toolCalls?: ReadonlyArray<Message.ToolCall>; readonly toolResult?: RunToolResult } = {}
): Effect.Effect<RunMessage> =>
  Effect.map(
    fields.id === undefined ? Effect.flatMap(IdGenerator, (ids) => ids.next("msg")) : Effect.succeed(fields.id),
    (id) => build(id, role, content, fields, extra)
  )

export const system = (content: string, fields: Fields = {}) => make("system", content, fields)
export const user = (content: string, fields: Fields = {}) => make("user", content, fields)
/** A note kept in the transcript and never sent to an engine. */
export const internal = (content: string, fields: Fields = {}) => make("internal", content, fields)
export const assistant = (content: string, toolCalls: ReadonlyArray<Message.ToolCall> = [], fields: Fields = {}) =>
  make("assistant", content, fields, { toolCalls })
export const tool = (result: RunToolResult, fields: Fields = {}) =>
  make("tool", result.content, fields, { toolResult: result })

/**
 * A domain message as a run message with `id`, built at once. The domain message
 * is what the run message turns back into for an engine (see `toDomain`): the
 * same content, calls and result, so it is not built again.
 */
export const buildFromDomain = (id: string, message: Message.Message, fields: Omit<Fields, "id"> = {}): RunMessage => {
  const made = fromDomainWith(id, message, fields)
  keepDomain(made, message)
  return made
}

const fromDomainWith = (id: string, message: Message.Message, fields: Omit<Fields, "id">): RunMessage => {
  switch (message._tag) {
    case "SystemMessage":
      return build(id, "system", message.content, fields)
    case "UserMessage":
      return build(id, "user", message.content, fields)
    case "AssistantMessage":
      return build(id, "assistant", message.content, fields, { toolCalls: message.toolCalls })
    case "ToolMessage":
      return build(id, "tool", message.content, fields, {
        toolResult: Construct.unchecked(RunToolResult, {
          callId: message.toolCallId,
          name: message.name,
          content: message.content,
          isError: message.isError
        })
      })
  }
}

/** A domain message as a run message, with a new id. */
export const fromDomain = (message: Message.Message, fields: Fields = {}): Effect.Effect<RunMessage> =>
  Effect.map(
    fields.id === undefined ? Effect.flatMap(IdGenerator, (ids) => ids.next("msg")) : Effect.succeed(fields.id),
    (id) => buildFromDomain(id, message, fields)
  )

/** Whether a value is a run message (rather than a domain message). */
export const isRunMessage = (input: Input): input is RunMessage => input instanceof RunMessage

/**
 * An input message as a run message: a domain message gets an id; a run message
 * is checked (a tool message needs its result, only assistants carry tool calls).
 */
export const fromInput = (input: Input, index: number): Effect.Effect<Either.Either<RunMessage, string>> =>
  isRunMessage(input) ? Effect.succeed(checkInput(input, index)) : Effect.map(fromDomain(input), Either.right)

/** A run message given as input, checked: a tool message needs its result, only assistants carry tool calls. */
export const checkInput = (input: RunMessage, index: number): Either.Either<RunMessage, string> => {
  if (input.role === "tool" && input.toolResult === undefined) {
    return Either.left(`messages[${index}] (id ${input.id}) has role "tool" but no toolResult`)
  }
  if (input.role !== "tool" && input.toolResult !== undefined) {
    return Either.left(`messages[${index}] (id ${input.id}) carries a toolResult but its role is "${input.role}"`)
  }
  if (input.role !== "assistant" && input.toolCalls.length > 0) {
    return Either.left(`messages[${index}] (id ${input.id}) carries toolCalls but its role is "${input.role}"`)
  }
  return Either.right(input)
}

// ---------------------------------------------------------------------------
// The engine boundary
// ---------------------------------------------------------------------------

/** Whether a message may be sent to an engine (`internal` ones never are). */
export const shouldSend = (message: RunMessage): boolean => message.role !== "internal"

/**
 * The domain message a run message was turned into, kept on the run message (a
 * non-enumerable property: not a field, not copied by a spread, not compared): a
 * run message is immutable, and a run sends its growing transcript once per
 * model call, so without it each call would rebuild every message before it. Not
 * a WeakMap keyed by the message: V8's young-generation collector keeps a
 * WeakMap's keys alive through a scavenge, and a run makes messages by the turn.
 */
const domainKey = Symbol("pagantic/RunMessage/domain")

const domainOf = (message: RunMessage): Message.Message | undefined =>
  (message as { readonly [domainKey]?: Message.Message })[domainKey]

const keepDomain = (message: RunMessage, domain: Message.Message): void => {
  // a message somebody froze is converted again when it is sent again
  if (Object.isExtensible(message)) Object.defineProperty(message, domainKey, { value: domain })
}

/** The domain message an engine reads, or undefined for an internal message. */
export const toDomain = (message: RunMessage): Message.Message | undefined => {
  const known = domainOf(message)
  if (known !== undefined) return known
  const converted = convert(message)
  if (converted !== undefined) keepDomain(message, converted)
  return converted
}

const convert = (message: RunMessage): Message.Message | undefined => {
  switch (message.role) {
    case "system":
      return Message.system(message.content)
    case "user":
      return Message.user(message.content)
    case "assistant":
      return Message.assistant(message.content, message.toolCalls)
    case "tool": {
      const r = message.toolResult
      return r === undefined
        ? undefined
        : Message.toolResult(Construct.unchecked(Message.ToolResult, { callId: r.callId, name: r.name, content: r.content, isError: r.isError }))
    }
    case "internal":
      return undefined
  }
}

/** The messages an engine may read, in order: internal messages left out, metadata and raw results dropped. */
export const toEngine = (messages: ReadonlyArray<RunMessage>): ReadonlyArray<Message.Message> => {
  const out: Array<Message.Message> = []
  for (const m of messages) {
    const converted = toDomain(m)
    if (converted !== undefined) out.push(converted)
  }
  return out
}

/** The text of a message (the seed's TextContent). */
export const textContent = (message: RunMessage): string => message.content
