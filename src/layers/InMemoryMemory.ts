/**
 * Memory layers: the in-memory ConversationStore and SessionState as layers,
 * bounded by session count and approximate bytes (`InMemoryOptions`; defaults
 * 10,000 sessions and 64 MiB each). Writes are synchronous steps, so concurrent
 * sessions never see a half-written turn, and every read is a copy.
 */
import * as Layer from "effect/Layer"
import type { InMemoryOptions } from "../services/ConversationStore.js"
import { ConversationStore, makeInMemory as makeInMemoryConversationStore } from "../services/ConversationStore.js"
import { SessionState, makeInMemory as makeInMemorySessionState } from "../services/SessionState.js"

export const conversationStoreMemory: Layer.Layer<ConversationStore> = Layer.effect(
  ConversationStore,
  makeInMemoryConversationStore()
)

/** A store within `options`' bounds (the least recently written sessions dropped first). */
export const conversationStoreBounded = (options: InMemoryOptions): Layer.Layer<ConversationStore> =>
  Layer.effect(ConversationStore, makeInMemoryConversationStore(options))

export const sessionStateMemory: Layer.Layer<SessionState> = Layer.effect(SessionState, makeInMemorySessionState())

/** Session state within `options`' bounds (the least recently written sessions dropped first). */
export const sessionStateBounded = (options: InMemoryOptions): Layer.Layer<SessionState> =>
  Layer.effect(SessionState, makeInMemorySessionState(options))

/** Both in memory, with the default bounds. */
export const layerMemory: Layer.Layer<ConversationStore | SessionState> = Layer.merge(
  conversationStoreMemory,
  sessionStateMemory
)

/** Both in memory, each within `options`' bounds. */
export const layerBounded = (options: InMemoryOptions): Layer.Layer<ConversationStore | SessionState> =>
  Layer.merge(conversationStoreBounded(options), sessionStateBounded(options))
