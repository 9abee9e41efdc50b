/**
 * Memory layers: the in-memory ConversationStore and SessionState as layers.
 * Histories are immutable arrays swapped atomically in a Ref, so concurrent
 * sessions never see a half-written turn and every read is a copy.
 */
import * as Layer from "effect/Layer"
import {
  ConversationStore,
  makeInMemoryConversationStore,
  makeInMemorySessionState,
  SessionState
} from "../services/Memory.js"

export const conversationStoreMemory: Layer.Layer<ConversationStore> = Layer.effect(
  ConversationStore,
  makeInMemoryConversationStore()
)

/** A store keeping at most `maxSessions` sessions (the least recently written dropped first). */
export const conversationStoreBounded = (maxSessions: number): Layer.Layer<ConversationStore> =>
  Layer.effect(ConversationStore, makeInMemoryConversationStore({ maxSessions }))

export const sessionStateMemory: Layer.Layer<SessionState> = Layer.effect(SessionState, makeInMemorySessionState)

/** Both in memory. */
export const layerMemory: Layer.Layer<ConversationStore | SessionState> = Layer.merge(
  conversationStoreMemory,
  sessionStateMemory
)
