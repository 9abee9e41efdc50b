// Transitional: the concepts moved to Retriever.ts and ContextProvider.ts (removed once no importer is left).
export { Chunk, Retriever } from "./Retriever.js"
export type { Service as RetrieverService } from "./Retriever.js"
export { ContextProvider } from "./ContextProvider.js"
export type { Service as ContextProviderService } from "./ContextProvider.js"
