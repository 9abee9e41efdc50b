/**
 * Layer 9: conversation memory.
 *
 * The user and assistant messages of a session, persisted across turns (working
 * memory, per turn, is never stored here; key-value decisions are SessionState).
 * Reads return copies. The in-memory store is bounded by session count and by
 * approximate bytes, because a server opens sessions for clients for its whole
 * life: past either bound the least recently written session is dropped. The SQL
 * layer (SqlMemory) keeps histories across restarts.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type { Message } from "../domain/Message.js"
import { approximateBytes } from "../domain/Size.js"
import type { InMemoryOptions } from "./internal/Sessions.js"
import { makeSessions } from "./internal/Sessions.js"

export { type InMemoryOptions, inMemoryDefaults } from "./internal/Sessions.js"

export interface Service {
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
  Service
>() {}


const MESSAGE_BYTES = 64

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

/**
 * An in-memory ConversationStore. Each session's history is an immutable array
 * replaced as a whole (a reader never sees half a turn, and every read is a copy);
 * the sessions live in a Map ordered by last write, bounded by `maxSessions` and
 * `maxBytes` (message contents, tool names and ids, tool-call arguments). A
 * history larger than `maxBytes` on its own is not stored: the session is
 * forgotten, as if cleared. Writes are synchronous steps, so they are atomic
 * between fibers; an append sizes only the messages it adds.
 */
export const makeInMemory = (options: InMemoryOptions = {}): Effect.Effect<Service> =>
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
    } satisfies Service
  })
