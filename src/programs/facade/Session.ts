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
): StagedSession => new Staged(store, sessionId, seed)

/**
 * The staged session and its store, one instance. Its functions are fields: callers may hand them around.
 */
class Staged implements StagedSession, ConversationStore.Service {
  readonly store: ConversationStore.Service
  readonly sessions: Effect.Effect<ReadonlyArray<string>>
  constructor(
    private readonly inner: ConversationStore.Service,
    private readonly sessionId: string,
    private copy: ReadonlyArray<Message.Message> | undefined
  ) {
    this.store = this
    this.sessions = inner.sessions
  }

  // once staged, the copy stays (a save or clear replaces it, nothing unsets it): read in one step
  readonly load = (id: string): Effect.Effect<ReadonlyArray<Message.Message>> =>
    id !== this.sessionId
      ? this.inner.load(id)
      : this.copy !== undefined
      ? Effect.sync(() => this.copy!.slice())
      : Effect.suspend(() => {
        const current = this.copy
        return current === undefined ? this.inner.load(id) : Effect.succeed(current.slice())
      })

  readonly save = (id: string, messages: ReadonlyArray<Message.Message>): Effect.Effect<void> =>
    id === this.sessionId ? Effect.sync(() => void (this.copy = messages.slice())) : this.inner.save(id, messages)

  readonly append = (id: string, messages: ReadonlyArray<Message.Message>): Effect.Effect<void> =>
    id === this.sessionId
      ? Effect.flatMap(this.load(id), (base) => this.save(id, [...base, ...messages]))
      : this.inner.append(id, messages)

  readonly clear = (id: string): Effect.Effect<void> =>
    id === this.sessionId ? Effect.sync(() => void (this.copy = [])) : this.inner.clear(id)

  readonly commit: Effect.Effect<void> = Effect.suspend(() =>
    this.copy === undefined ? Effect.void : this.inner.save(this.sessionId, this.copy)
  )
}
