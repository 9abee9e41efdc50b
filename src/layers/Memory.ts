/**
 * Memory layers: in-memory ConversationStore and SessionState. Histories are
 * immutable arrays swapped atomically in a Ref, so concurrent sessions never see
 * a half-written turn and every read is a copy.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type { Message } from "../domain/Message.js"
import type { ConversationStoreService, SessionStateService } from "../services/Memory.js"
import { ConversationStore, SessionState } from "../services/Memory.js"

export const makeConversationStore: Effect.Effect<ConversationStoreService> = Effect.map(
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

export const conversationStoreMemory: Layer.Layer<ConversationStore> = Layer.effect(
  ConversationStore,
  makeConversationStore
)

export const makeSessionState: Effect.Effect<SessionStateService> = Effect.map(
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

export const sessionStateMemory: Layer.Layer<SessionState> = Layer.effect(SessionState, makeSessionState)

/** Both in memory. */
export const layerMemory: Layer.Layer<ConversationStore | SessionState> = Layer.merge(
  conversationStoreMemory,
  sessionStateMemory
)
