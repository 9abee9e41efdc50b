/**
 * The prompt layer at PREPARE: when a PromptProvider is present, a request that
 * brings no system message runs with the provider's system prompt (in place of
 * the facade's `defaultSystemPrompt`), rendered with the chat session's state.
 * It is built here first, so a provider that cannot build it (a variable no one
 * gave) answers CONFIG_INVALID_REQUEST naming the variables, before any inference.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { ConfigurationFailure } from "../../domain/Failure.js"
import type * as PromptProvider from "../../services/PromptProvider.js"
import * as SessionState from "../../services/SessionState.js"
import * as Prompt from "../internal/Prompt.js"

/** The provider's system prompt for `sessionId`'s state (none without a provider), or why it cannot be built. */
export const systemPrompt = (sessionId: string | undefined): Effect.Effect<Option.Option<string>, ConfigurationFailure> =>
  Effect.flatMap(Prompt.provider, (prompts) => systemPromptOf(prompts, sessionId))

/** `systemPrompt` of the provider the caller has looked up already. */
export const systemPromptOf = (
  prompts: Option.Option<PromptProvider.Service>,
  sessionId: string | undefined
): Effect.Effect<Option.Option<string>, ConfigurationFailure> =>
  Option.isNone(prompts) ? none : built(prompts.value, sessionId)

const none = Effect.succeed(Option.none<string>())

const built = (prompts: PromptProvider.Service, sessionId: string | undefined) =>
  Effect.gen(function* () {
    const state = yield* Effect.serviceOption(SessionState.SessionState)
    const values = Option.isSome(state) && sessionId !== undefined ? yield* state.value.snapshot(sessionId) : {}
    const message = yield* Effect.mapError(prompts.buildSystemPrompt(Prompt.variablesOf(values, undefined)), (f) =>
      f.toFailure())
    return Option.some(message.content)
  })
