/**
 * Layer 9: memory.
 *
 * Three kinds of memory: conversation memory (user and assistant messages of a
 * session, persisted across turns), session state (key-value decisions that carry
 * forward) and working memory (per-turn: retrieved context, tool results; it lives
 * inside one loop iteration and is never stored here). Reads return copies.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { Message } from "../domain/Message.js"

export interface ConversationStoreService {
  /** The session's history, a copy; empty for an unknown session. */
  readonly load: (sessionId: string) => Effect.Effect<ReadonlyArray<Message>>
  readonly append: (sessionId: string, messages: ReadonlyArray<Message>) => Effect.Effect<void>
  /** Replaces the whole history (used to commit a turn atomically). */
  readonly save: (sessionId: string, messages: ReadonlyArray<Message>) => Effect.Effect<void>
  readonly clear: (sessionId: string) => Effect.Effect<void>
  readonly sessions: Effect.Effect<ReadonlyArray<string>>
}

/** Conversation history per session. */
export class ConversationStore extends Context.Tag("pagantic/ConversationStore")<
  ConversationStore,
  ConversationStoreService
>() {}

export interface SessionStateService {
  readonly get: (sessionId: string, key: string) => Effect.Effect<Option.Option<unknown>>
  readonly set: (sessionId: string, key: string, value: unknown) => Effect.Effect<void>
  readonly delete: (sessionId: string, key: string) => Effect.Effect<void>
  /** A copy of all keys of the session. */
  readonly snapshot: (sessionId: string) => Effect.Effect<Readonly<Record<string, unknown>>>
}

/** Durable key-value state per session. */
export class SessionState extends Context.Tag("pagantic/SessionState")<SessionState, SessionStateService>() {}
