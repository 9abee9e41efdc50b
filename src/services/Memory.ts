// Transitional: the concepts moved to ConversationStore.ts and SessionState.ts (removed once no importer is left).
export { ConversationStore, makeInMemory as makeInMemoryConversationStore } from "./ConversationStore.js"
export type { Service as ConversationStoreService } from "./ConversationStore.js"
export { makeInMemory as makeInMemorySessionState, SessionState } from "./SessionState.js"
export type { Service as SessionStateService } from "./SessionState.js"
export { inMemoryDefaults } from "./internal/Sessions.js"
export type { InMemoryOptions } from "./internal/Sessions.js"
export { approximateBytes } from "../domain/Size.js"
