/**
 * The prompt layer as the loops use it: when a PromptProvider is in context, a
 * loop with no system prompt of its own takes the provider's (rendered with the
 * loop's variables and the session state's), and ephemeral context goes where
 * the provider's placement policy says; without one, no system prompt and
 * context just before the user's message (the RAG default).
 *
 * A system prompt that cannot be built (a variable no one gave) is a
 * misconfigured provider: the facade checks it at PREPARE and answers
 * CONFIG_INVALID_REQUEST; a loop used directly dies naming the problem.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Message from "../../domain/Message.js"
import * as PromptProvider from "../../services/PromptProvider.js"
import * as RunMessage from "../run/Message.js"

/** The PromptProvider of the context, if any. */
export const provider: Effect.Effect<Option.Option<PromptProvider.Service>> = Effect.serviceOption(
  PromptProvider.PromptProvider
)

/** The values of `state` a template can use (strings, numbers, booleans), overridden by `variables`. */
export const variablesOf = (
  state: Readonly<Record<string, unknown>>,
  variables: PromptProvider.Variables | undefined
): PromptProvider.Variables => {
  const usable: Record<string, string | number | boolean> = {}
  for (const [key, value] of Object.entries(state)) {
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") usable[key] = value
  }
  return { ...usable, ...variables }
}

/** The provider's system message, or the loop's death naming why it cannot be built. */
export const systemMessage = (
  prompts: PromptProvider.Service,
  variables: PromptProvider.Variables
): Effect.Effect<Message.Message> =>
  Effect.catchAll(prompts.buildSystemPrompt(variables), (failure) =>
    Effect.dieMessage(`The PromptProvider's system prompt cannot be built (${failure.code}): ${failure.message}`))

/** The system message a loop without its own sends: the provider's, when there is one. */
export const defaultSystem = (
  prompts: Option.Option<PromptProvider.Service>,
  variables: PromptProvider.Variables
): Effect.Effect<ReadonlyArray<Message.Message>> =>
  Option.isNone(prompts) ? Effect.succeed([]) : Effect.map(systemMessage(prompts.value, variables), (m) => [m])

/** `context` placed in `messages` by the provider's policy, or just before the last user message. */
export const place = (
  prompts: Option.Option<PromptProvider.Service>,
  messages: ReadonlyArray<Message.Message>,
  context: ReadonlyArray<Message.Message>
): ReadonlyArray<Message.Message> =>
  Option.isSome(prompts)
    ? prompts.value.placeContext(messages, context)
    : PromptProvider.placeContext("beforeLastUser", messages, context)

/** `place` for a run loop's messages (by role; `appendToSystem` merges into the first system message). */
export const placeRun = (
  placement: PromptProvider.ContextPlacement,
  messages: ReadonlyArray<RunMessage.RunMessage>,
  context: ReadonlyArray<RunMessage.RunMessage>
): Effect.Effect<ReadonlyArray<RunMessage.RunMessage>> => {
  if (context.length === 0) return Effect.succeed(messages)
  switch (placement) {
    case "beforeLastUser": {
      const last = messages.map((m) => m.role).lastIndexOf("user")
      const at = last === -1 ? messages.length : last
      return Effect.succeed([...messages.slice(0, at), ...context, ...messages.slice(at)])
    }
    case "afterSystem": {
      let at = 0
      while (at < messages.length && messages[at]!.role === "system") at++
      return Effect.succeed([...messages.slice(0, at), ...context, ...messages.slice(at)])
    }
    case "appendToSystem": {
      const extra = context.map((m) => m.content).join("\n\n")
      const at = messages.findIndex((m) => m.role === "system")
      if (at === -1) return Effect.map(RunMessage.system(extra), (system) => [system, ...messages])
      const merged = new RunMessage.RunMessage({ ...messages[at]!, content: `${messages[at]!.content}\n\n${extra}` })
      return Effect.succeed([...messages.slice(0, at), merged, ...messages.slice(at + 1)])
    }
  }
}

/**
 * The names of the templates the loops take from the PromptProvider in place of
 * their built-in instructions: `correction` (the re-prompt after a rejected
 * structured reply; variables `code`, `message`, `problems`) and `structuredPhase`
 * (SpecializedLoop's request for the structured answer after its tool phase).
 */
export const templates = { correction: "correction", structuredPhase: "structuredPhase" } as const

/**
 * The provider's template `name` rendered with `variables`; the built-in text when
 * there is no provider or it has no such template. A template that needs a
 * variable the loop does not give is a misconfiguration: the loop dies naming it.
 */
export const template = (
  name: string,
  variables: PromptProvider.Variables,
  builtIn: string
): Effect.Effect<string> =>
  Effect.flatMap(provider, (prompts) =>
    Option.isNone(prompts)
      ? Effect.succeed(builtIn)
      : Effect.catchAll(prompts.value.render(name, variables), (failure) =>
        failure.code === "PROMPT_TEMPLATE_NOT_FOUND"
          ? Effect.succeed(builtIn)
          : Effect.dieMessage(`The PromptProvider's template "${name}" cannot be rendered (${failure.code}): ${failure.message}`)))

/** The placement a loop uses: the provider's, or just before the last user message. */
export const placementOf = (prompts: Option.Option<PromptProvider.Service>): PromptProvider.ContextPlacement =>
  Option.isSome(prompts) ? prompts.value.contextPlacement : "beforeLastUser"
