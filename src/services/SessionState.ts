/**
 * Layer 9: session state.
 *
 * Key-value decisions that carry forward across the turns of a session: store
 * (`set`), retrieve (`get`), delete, list the keys, clear the session. Reads
 * return copies. The in-memory state is bounded like the ConversationStore; the
 * SQL layer (SqlMemory) keeps it across restarts.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { approximateBytes, SLOT_BYTES } from "../domain/Size.js"
import type { InMemoryOptions } from "./internal/Sessions.js"
import { makeSessions } from "./internal/Sessions.js"

export { type InMemoryOptions, inMemoryDefaults } from "./internal/Sessions.js"

interface StateEntry {
  readonly value: unknown
  readonly bytes: number
}

export interface Service {
  readonly get: (sessionId: string, key: string) => Effect.Effect<Option.Option<unknown>>
  readonly set: (sessionId: string, key: string, value: unknown) => Effect.Effect<void>
  readonly delete: (sessionId: string, key: string) => Effect.Effect<void>
  /** A copy of all keys of the session. */
  readonly snapshot: (sessionId: string) => Effect.Effect<Readonly<Record<string, unknown>>>
  /** The session's keys, in the order they were first set; empty for an unknown session. */
  readonly list: (sessionId: string) => Effect.Effect<ReadonlyArray<string>>
  /** Removes every key of the session. */
  readonly clear: (sessionId: string) => Effect.Effect<void>
}

/** Durable key-value state per session. */
export class SessionState extends Context.Tag("pagantic/SessionState")<SessionState, Service>() {}

/**
 * An in-memory SessionState, bounded like the ConversationStore (keys and
 * `approximateBytes` of values, sized once when set); `set` and `delete` are
 * writes. A session whose state grows past `maxBytes` on its own is dropped
 * whole; a session left with no keys is removed. Every read is a copy.
 */
export const makeInMemory = (options: InMemoryOptions = {}): Effect.Effect<Service> =>
  Effect.sync(() => unsafeMakeInMemory(options))

/** `makeInMemory`, made now (an AgentLoop's private state, made when the loop first uses it). */
export const unsafeMakeInMemory = (options: InMemoryOptions = {}): Service => {
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
      Effect.sync(() => Object.fromEntries([...(sessions.get(sessionId) ?? [])].map(([key, e]) => [key, e.value]))),
    list: (sessionId) => Effect.sync(() => [...(sessions.get(sessionId)?.keys() ?? [])]),
    clear: (sessionId) => Effect.sync(() => sessions.remove(sessionId))
  } satisfies Service
}

