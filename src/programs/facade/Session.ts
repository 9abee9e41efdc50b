/**
 * A chat turn's view of its session: one session of a ConversationStore seen
 * through a staging copy. Reads and writes of that session stay in the copy
 * (seeded with the history the request brought, when the store has none) until
 * `commit` writes it to the store; other sessions pass through. A turn that fails
 * therefore stores nothing (a 900 KB history that does not fit the context is not
 * kept).
 */
import * as Effect from "effect/Effect"
import type * as Message from "../../domain/Message.js"
import type * as ConversationStore from "../../services/ConversationStore.js"
import { kept } from "../../services/internal/Kept.js"

export interface StagedSession {
  /** The store the turn runs with. */
  readonly store: ConversationStore.Service
  /** Writes the staged copy to the store (nothing when the turn never touched its session). */
  readonly commit: Effect.Effect<void>
}

export const staged = (
  store: ConversationStore.Service,
  sessionId: string,
  seed: ReadonlyArray<Message.Message> | undefined
): StagedSession => {
  let copy: ReadonlyArray<Message.Message> | undefined = seed
  // once staged, the copy stays (a save or clear replaces it, nothing unsets it): read in one step
  const load = (id: string): Effect.Effect<ReadonlyArray<Message.Message>> =>
    id !== sessionId
      ? store.load(id)
      : copy !== undefined
      ? Effect.sync(() => copy!.slice())
      : Effect.suspend(() => {
        const current = copy
        return current === undefined ? store.load(id) : Effect.succeed(current.slice())
      })
  const save = (id: string, messages: ReadonlyArray<Message.Message>): Effect.Effect<void> =>
    id === sessionId ? Effect.sync(() => void (copy = messages.slice())) : store.save(id, messages)
  return kept({
    store: kept({
      load,
      save,
      append: (id, messages) =>
        id === sessionId ? Effect.flatMap(load(id), (base) => save(id, [...base, ...messages])) : store.append(id, messages),
      clear: (id) => (id === sessionId ? Effect.sync(() => void (copy = [])) : store.clear(id)),
      sessions: store.sessions
    }),
    commit: Effect.suspend(() => (copy === undefined ? Effect.void : store.save(sessionId, copy)))
  })
}
