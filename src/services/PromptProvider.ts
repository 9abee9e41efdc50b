/**
 * Layer 8: prompt construction.
 *
 * Prompts are built, not concatenated: a system prompt (itself a template),
 * named instruction sets appended to it, named templates with `{{variables}}`,
 * and a policy for where retrieved context goes. Rendering is strict: a variable
 * the template names but the caller did not give is a PromptFailure listing every
 * missing name, never the text "undefined" in front of a model. At the system
 * boundary a PromptFailure becomes CONFIG_INVALID_REQUEST (`toFailure`).
 *
 * The context placement policy decides where ephemeral context messages go:
 * `beforeLastUser` (the RAG default: just before the user's
 * question), `afterSystem` (right after the leading system messages) or
 * `appendToSystem` (merged into the system prompt's text).
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { ConfigurationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"

/** A template or instruction set is unknown, or a variable is missing. */
export class PromptFailure extends Schema.TaggedError<PromptFailure>()("PromptFailure", {
  code: Schema.Literal("PROMPT_VARIABLE_MISSING", "PROMPT_TEMPLATE_NOT_FOUND", "PROMPT_INSTRUCTION_SET_NOT_FOUND"),
  message: Schema.String,
  /** The template (or instruction set) concerned. */
  template: Schema.String,
  /** Every variable the template needs but was not given. */
  missing: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] })
}) {
  /** The taxonomy's view at the system boundary: a configuration the request cannot be served with. */
  toFailure(): ConfigurationFailure {
    return ConfigurationFailure.invalidRequest(this.message, {
      details: { promptCode: this.code, template: this.template, missing: this.missing }
    })
  }
}

/** Values for `{{variables}}`. */
export type Variables = Readonly<Record<string, string | number | boolean>>

export const ContextPlacement = Schema.Literal("beforeLastUser", "afterSystem", "appendToSystem")
export type ContextPlacement = typeof ContextPlacement.Type

export interface Service {
  /** The system message: the system prompt rendered with `variables`, then the active instruction sets. */
  readonly buildSystemPrompt: (variables?: Variables) => Effect.Effect<Message.Message, PromptFailure>
  /** Renders the named template. */
  readonly render: (template: string, variables?: Variables) => Effect.Effect<string, PromptFailure>
  /** The instructions of a named set. */
  readonly instructions: (set: string) => Effect.Effect<ReadonlyArray<string>, PromptFailure>
  /** The placement policy of this provider. */
  readonly contextPlacement: ContextPlacement
  /** Inserts context messages into a conversation according to the policy. */
  readonly placeContext: (
    messages: ReadonlyArray<Message.Message>,
    context: ReadonlyArray<Message.Message>
  ) => ReadonlyArray<Message.Message>
}

/** Builds prompts. */
export class PromptProvider extends Context.Tag("pagantic/PromptProvider")<PromptProvider, Service>() {}

// ---------------------------------------------------------------------------
// Pure helpers shared by the layers and the loops
// ---------------------------------------------------------------------------

/**
 * Inserts `context` into `messages` according to `placement`:
 * - beforeLastUser: just before the last user message (at the end when there is none);
 * - afterSystem: after the leading system messages;
 * - appendToSystem: the context texts appended (blank-line separated) to the first
 *   system message, which is created when there is none.
 */
export const placeContext = (
  placement: ContextPlacement,
  messages: ReadonlyArray<Message.Message>,
  context: ReadonlyArray<Message.Message>
): ReadonlyArray<Message.Message> => {
  if (context.length === 0) return messages
  switch (placement) {
    case "beforeLastUser": {
      let at = messages.length
      for (let i = messages.length - 1; i >= 0; i--) {
        if (Message.isUser(messages[i]!)) {
          at = i
          break
        }
      }
      return [...messages.slice(0, at), ...context, ...messages.slice(at)]
    }
    case "afterSystem": {
      let at = 0
      while (at < messages.length && Message.isSystem(messages[at]!)) at++
      return [...messages.slice(0, at), ...context, ...messages.slice(at)]
    }
    case "appendToSystem": {
      const extra = context.map((m) => m.content).join("\n\n")
      const at = messages.findIndex(Message.isSystem)
      if (at === -1) return [Message.system(extra), ...messages]
      const merged = Message.system(`${messages[at]!.content}\n\n${extra}`)
      return [...messages.slice(0, at), merged, ...messages.slice(at + 1)]
    }
  }
}

/**
 * The text of retrieved context, as the context builder writes it:
 * "Relevant context:\n\n[1] (source): content\n[2] (source): content".
 */
export const renderContext = (
  chunks: ReadonlyArray<{ readonly source: string; readonly content: string }>
): string => `Relevant context:\n\n${chunks.map((c, i) => `[${i + 1}] (${c.source}): ${c.content}`).join("\n")}`
