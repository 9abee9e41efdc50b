/**
 * Ephemeral context for a loop: asks the ContextProvider (when there is one) for
 * the messages of a query. Context never fails a loop: a failing provider
 * degrades to no context, and the failure is recorded as a ContextRetrieved event.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Event from "../../domain/Event.js"
import type * as Message from "../../domain/Message.js"
import type * as ContextProvider from "../../services/ContextProvider.js"
import { recordEvent } from "../../services/EventLog.js"

export const retrieve = (
  provider: Option.Option<ContextProvider.Service>,
  query: string
): Effect.Effect<ReadonlyArray<Message.Message>> => Effect.map(retrieveScored(provider, query), (r) => r.messages)

const nothing: ContextProvider.Scored = { messages: [], scores: [] }

/** `retrieve`, with the scores of the passages the context holds (none when the provider gives none). */
export const retrieveScored = (
  provider: Option.Option<ContextProvider.Service>,
  query: string
): Effect.Effect<ContextProvider.Scored> => {
  if (Option.isNone(provider)) return Effect.succeed(nothing)
  const p = provider.value
  const build = p.buildScored ?? ((q: string) => Effect.map(p.build(q), (messages) => ({ messages, scores: [] })))
  return Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis
    const outcome = yield* Effect.either(build(query))
    const durationMs = (yield* Clock.currentTimeMillis) - started
    yield* recordEvent(
      (base) =>
        new Event.ContextRetrieved({
          ...base,
          layer: "context",
          durationMs,
          messageCount: Either.isRight(outcome) ? outcome.right.messages.length : 0,
          ...(Either.isLeft(outcome) ? { error: `${outcome.left.code}: ${outcome.left.message}` } : {})
        })
    )
    return Either.isRight(outcome) ? outcome.right : nothing
  })
}
