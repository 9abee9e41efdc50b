/**
 * Layer 9: memory.
 *
 * Three kinds of memory: conversation memory (user and assistant messages of a
 * session, persisted across turns), session state (key-value decisions that carry
 * forward) and working memory (per-turn: retrieved context, tool results; it lives
 * inside one loop iteration and is never stored here). Reads return copies.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
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

/**
 * An in-memory ConversationStore: histories are immutable arrays swapped
 * atomically in a Ref, so concurrent sessions never see a half-written turn and
 * every read is a copy. The loops fall back to one when none is provided.
 */
export const makeInMemoryConversationStore: Effect.Effect<ConversationStoreService> = Effect.map(
  Ref.make<ReadonlyMap<string, ReadonlyArray<Message>>>(new Map()),
  (ref) => {
    const put = (sessionId: string, f: (old: ReadonlyArray<Message>) => ReadonlyArray<Message>) =>
      Ref.update(ref, (m) => new Map(m).set(sessionId, f(m.get(sessionId) ?? [])))
    return {
      load: (sessionId) => Effect.map(Ref.get(ref), (m) => (m.get(sessionId) ?? []).slice()),
      append: (sessionId, messages) => put(sessionId, (old) => [...old, ...messages]),
      save: (sessionId, messages) => put(sessionId, () => messages.slice()),
      clear: (sessionId) =>
        Ref.update(ref, (m) => {
          const copy = new Map(m)
          copy.delete(sessionId)
          return copy
        }),
      sessions: Effect.map(Ref.get(ref), (m) => [...m.keys()])
    }
  }
)

/** An in-memory SessionState; every read is a copy. */
export const makeInMemorySessionState: Effect.Effect<SessionStateService> = Effect.map(
  Ref.make<ReadonlyMap<string, Readonly<Record<string, unknown>>>>(new Map()),
  (ref) => {
    const update = (sessionId: string, f: (old: Readonly<Record<string, unknown>>) => Record<string, unknown>) =>
      Ref.update(ref, (m) => new Map(m).set(sessionId, f(m.get(sessionId) ?? {})))
    return {
      get: (sessionId, key) =>
        Effect.map(Ref.get(ref), (m) => {
          const state = m.get(sessionId)
          return state !== undefined && Object.hasOwn(state, key) ? Option.some(state[key]) : Option.none()
        }),
      set: (sessionId, key, value) => update(sessionId, (old) => ({ ...old, [key]: value })),
      delete: (sessionId, key) =>
        update(sessionId, (old) => {
          const { [key]: _removed, ...rest } = old
          return rest
        }),
      snapshot: (sessionId) => Effect.map(Ref.get(ref), (m) => ({ ...(m.get(sessionId) ?? {}) }))
    }
  }
)
