/**
 * Layer 3: context for a turn.
 *
 * A ContextProvider turns a query into ephemeral context messages that a loop
 * injects just before the user message and never stores. It is the small
 * interface the loops consume; retrieval, reranking and prompt placement sit
 * behind it.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { Failure } from "../domain/Failure.js"
import type { Message } from "../domain/Message.js"

/** Context for a query with the scores of the passages it holds. */
export interface Scored {
  readonly messages: ReadonlyArray<Message>
  /** The retrieval score of each passage in `messages`, on the retriever's own scale. */
  readonly scores: ReadonlyArray<number>
}

export interface Service {
  /** Builds the ephemeral context messages for a query. */
  readonly build: (query: string) => Effect.Effect<ReadonlyArray<Message>, Failure>
  /**
   * `build`, with the scores of the passages it used, for providers that
   * retrieve: a loop reports how relevant its context was (a retrieval
   * confidence) from them.
   */
  readonly buildScored?: ((query: string) => Effect.Effect<Scored, Failure>) | undefined
}

/** Builds per-turn ephemeral context. */
export class ContextProvider extends Context.Tag("pagantic/ContextProvider")<
  ContextProvider,
  Service
>() {}
