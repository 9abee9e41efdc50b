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

export interface InMemoryOptions {
  /**
   * Sessions kept at most; past it the least recently written is dropped, so a
   * long-running server that opens a session per request stays bounded.
   * Default 10,000.
   */
  readonly maxSessions?: number
}

/**
 * An in-memory ConversationStore. Each session's history is an immutable array
 * replaced as a whole (a reader never sees half a turn, and every read is a copy);
 * the sessions live in a Map ordered by last write, bounded by `maxSessions`.
 * Writes are synchronous steps, so they are atomic between fibers.
 */
export const makeInMemoryConversationStore = (options: InMemoryOptions = {}): Effect.Effect<ConversationStoreService> =>
  Effect.sync(() => {
    const maxSessions = Math.max(1, options.maxSessions ?? 10_000)
    const sessions = new Map<string, ReadonlyArray<Message>>()
    const put = (sessionId: string, messages: ReadonlyArray<Message>) => {
      sessions.delete(sessionId)
      sessions.set(sessionId, messages)
      if (sessions.size > maxSessions) sessions.delete(sessions.keys().next().value!)
    }
    return {
      load: (sessionId) => Effect.sync(() => (sessions.get(sessionId) ?? []).slice()),
      append: (sessionId, messages) =>
        Effect.sync(() => put(sessionId, [...(sessions.get(sessionId) ?? []), ...messages])),
      save: (sessionId, messages) => Effect.sync(() => put(sessionId, messages.slice())),
      clear: (sessionId) => Effect.sync(() => void sessions.delete(sessionId)),
      sessions: Effect.sync(() => [...sessions.keys()])
    } satisfies ConversationStoreService
  })

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
