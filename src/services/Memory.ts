/**
 * Layer 9: memory.
 *
 * Three kinds of memory: conversation memory (user and assistant messages of a
 * session, persisted across turns), session state (key-value decisions that carry
 * forward) and working memory (per-turn: retrieved context, tool results; it lives
 * inside one loop iteration and is never stored here). Reads return copies.
 *
 * The in-memory implementations are bounded by session count and by approximate
 * bytes, because a server opens sessions for clients for its whole life: past
 * either bound the least recently written session is dropped.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
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
  readonly maxSessions?: number | undefined
  /**
   * Approximate bytes kept at most over all sessions (see `approximateBytes`);
   * past it the least recently written sessions are dropped. A session larger
   * than this on its own is not kept at all. Default 64 MiB.
   */
  readonly maxBytes?: number | undefined
}

/** The bounds of the in-memory ConversationStore and SessionState when no option says otherwise. */
export const inMemoryDefaults = { maxSessions: 10_000, maxBytes: 64 * 1024 * 1024 } as const

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/** Values visited at most when sizing one value; the rest is counted from their containers' lengths. */
const SIZE_NODES = 4_096
/** What a number, a boolean, a slot of an array or object, or a message's fixed fields count for. */
const SLOT_BYTES = 8
const MESSAGE_BYTES = 64

/**
 * The approximate size of a value: one byte per character of its strings (and
 * object keys), 8 bytes per other value and per slot. Bounded work: at most
 * 4,096 values are visited; the slots of containers not visited count 8 bytes
 * each (what lies inside them is not seen), Maps and Sets count their sizes,
 * binary buffers their byte lengths. No serialization, so cycles are harmless.
 */
export const approximateBytes = (value: unknown): number => {
  let bytes = 0
  let visits = SIZE_NODES
  const pending: Array<unknown> = [value]
  while (pending.length > 0) {
    const v = pending.pop()
    if (typeof v === "string") {
      bytes += v.length
      continue
    }
    bytes += SLOT_BYTES
    if (typeof v !== "object" || v === null) continue
    if (v instanceof Map || v instanceof Set) {
      bytes += v.size * SLOT_BYTES
      continue
    }
    if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
      bytes += v.byteLength
      continue
    }
    const entries = Array.isArray(v) ? v : Object.keys(v)
    const walked = Math.min(entries.length, Math.max(0, visits))
    visits -= walked
    bytes += (entries.length - walked) * SLOT_BYTES
    for (let i = 0; i < walked; i++) {
      if (Array.isArray(v)) pending.push(v[i])
      else {
        const key = entries[i] as string
        bytes += key.length
        pending.push((v as Record<string, unknown>)[key])
      }
    }
  }
  return bytes
}

const messageBytes = (message: Message): number => {
  let bytes = MESSAGE_BYTES + message.content.length
  if (message.role === "assistant") {
    for (const call of message.toolCalls) bytes += call.id.length + call.name.length + approximateBytes(call.arguments)
  } else if (message.role === "tool") bytes += message.toolCallId.length + message.name.length
  return bytes
}

const historyBytes = (messages: ReadonlyArray<Message>): number => {
  let bytes = 0
  for (const message of messages) bytes += messageBytes(message)
  return bytes
}

const positive = (n: number | undefined, fallback: number): number =>
  n === undefined || !(n >= 1) ? fallback : Math.floor(n)

/**
 * Sessions in a Map ordered by last write, each with its approximate size; a
 * write moves the session to the end and drops the oldest while either bound is
 * passed. A session over `maxBytes` on its own is removed instead of stored.
 */
const makeSessions = <A>(options: InMemoryOptions) => {
  const maxSessions = positive(options.maxSessions, inMemoryDefaults.maxSessions)
  const maxBytes = positive(options.maxBytes, inMemoryDefaults.maxBytes)
  const sessions = new Map<string, { readonly value: A; readonly bytes: number }>()
  let total = 0
  const remove = (sessionId: string) => {
    const old = sessions.get(sessionId)
    if (old === undefined) return
    total -= old.bytes
    sessions.delete(sessionId)
  }
  return {
    get: (sessionId: string): A | undefined => sessions.get(sessionId)?.value,
    bytes: (sessionId: string): number => sessions.get(sessionId)?.bytes ?? 0,
    put: (sessionId: string, value: A, bytes: number) => {
      remove(sessionId)
      if (bytes > maxBytes) return
      sessions.set(sessionId, { value, bytes })
      total += bytes
      while (sessions.size > maxSessions || total > maxBytes) remove(sessions.keys().next().value!)
    },
    remove,
    ids: (): Array<string> => [...sessions.keys()]
  }
}

// ---------------------------------------------------------------------------
// In-memory implementations
// ---------------------------------------------------------------------------

/**
 * An in-memory ConversationStore. Each session's history is an immutable array
 * replaced as a whole (a reader never sees half a turn, and every read is a copy);
 * the sessions live in a Map ordered by last write, bounded by `maxSessions` and
 * `maxBytes` (message contents, tool names and ids, tool-call arguments). A
 * history larger than `maxBytes` on its own is not stored: the session is
 * forgotten, as if cleared. Writes are synchronous steps, so they are atomic
 * between fibers; an append sizes only the messages it adds.
 */
export const makeInMemoryConversationStore = (options: InMemoryOptions = {}): Effect.Effect<ConversationStoreService> =>
  Effect.sync(() => {
    const sessions = makeSessions<ReadonlyArray<Message>>(options)
    return {
      load: (sessionId) => Effect.sync(() => (sessions.get(sessionId) ?? []).slice()),
      append: (sessionId, messages) =>
        Effect.sync(() =>
          sessions.put(
            sessionId,
            [...(sessions.get(sessionId) ?? []), ...messages],
            sessions.bytes(sessionId) + historyBytes(messages)
          )
        ),
      save: (sessionId, messages) => Effect.sync(() => sessions.put(sessionId, messages.slice(), historyBytes(messages))),
      clear: (sessionId) => Effect.sync(() => sessions.remove(sessionId)),
      sessions: Effect.sync(() => sessions.ids())
    } satisfies ConversationStoreService
  })

interface StateEntry {
  readonly value: unknown
  readonly bytes: number
}

/**
 * An in-memory SessionState, bounded like the ConversationStore (keys and
 * `approximateBytes` of values, sized once when set); `set` and `delete` are
 * writes. A session whose state grows past `maxBytes` on its own is dropped
 * whole; a session left with no keys is removed. Every read is a copy.
 */
export const makeInMemorySessionState = (options: InMemoryOptions = {}): Effect.Effect<SessionStateService> =>
  Effect.sync(() => {
    const sessions = makeSessions<Map<string, StateEntry>>(options)
    const write = (sessionId: string, state: Map<string, StateEntry>, bytes: number) =>
      state.size === 0 ? sessions.remove(sessionId) : sessions.put(sessionId, state, bytes)
    return {
      get: (sessionId, key) =>
        Effect.sync(() => {
          const entry = sessions.get(sessionId)?.get(key)
          return entry === undefined ? Option.none() : Option.some(entry.value)
        }),
      set: (sessionId, key, value) =>
        Effect.sync(() => {
          const state = sessions.get(sessionId) ?? new Map<string, StateEntry>()
          const entry: StateEntry = { value, bytes: SLOT_BYTES + key.length + approximateBytes(value) }
          const bytes = sessions.bytes(sessionId) - (state.get(key)?.bytes ?? 0) + entry.bytes
          state.set(key, entry)
          write(sessionId, state, bytes)
        }),
      delete: (sessionId, key) =>
        Effect.sync(() => {
          const state = sessions.get(sessionId)
          const entry = state?.get(key)
          if (state === undefined || entry === undefined) return
          state.delete(key)
          write(sessionId, state, sessions.bytes(sessionId) - entry.bytes)
        }),
      snapshot: (sessionId) =>
        Effect.sync(() => Object.fromEntries([...(sessions.get(sessionId) ?? [])].map(([key, e]) => [key, e.value])))
    } satisfies SessionStateService
  })
