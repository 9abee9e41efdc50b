/**
 * Requests the loops build: an InferenceRequest whose messages and tool
 * definitions are the loop's own values (typed, built by the library) is made
 * without re-validating them on every model call; its settings (maxTokens,
 * temperature, topP, seed, schema, grammar...), which come from options, are
 * still checked against InferenceRequest's own fields.
 */
import * as Schema from "effect/Schema"
import type * as Message from "../../domain/Message.js"
import { InferenceRequest } from "../../services/Engine.js"

/** InferenceRequest's fields but its messages and tools. */
export type Settings = Omit<ConstructorParameters<typeof InferenceRequest>[0], "messages" | "tools">

/** Checks the settings against InferenceRequest's fields; throws a ParseError naming the field otherwise. */
const checkSettings: (settings: Settings) => Settings = Schema.validateSync(
  Schema.Struct(InferenceRequest.fields).pipe(Schema.omit("messages", "tools"))
)

/** A request of the loop's own messages and tools, its settings checked. */
export const make = (
  messages: ReadonlyArray<Message.Message>,
  tools: ReadonlyArray<Message.ToolDefinition>,
  settings: Settings
): InferenceRequest => new InferenceRequest({ messages, tools, ...checkSettings(settings) }, true)
