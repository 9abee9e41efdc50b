/**
 * Layer 3: knowledge retrieval.
 *
 * A Retriever finds chunks relevant to a query. The loops do not consume it
 * directly: a ContextProvider (the small interface they need) turns a query into
 * ephemeral context messages, so a retriever can change without touching them.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { Failure } from "../domain/Failure.js"
import { Passage } from "../domain/Passage.js"

/** A retrieved piece of knowledge with its provenance. */
/** A retrieved passage (see `Passage`). */
export const Chunk = Passage
export type Chunk = Passage

export interface Service {
  readonly retrieve: (query: string, limit: number) => Effect.Effect<ReadonlyArray<Chunk>, Failure>
}

/** Retrieves chunks for a query. */
export class Retriever extends Context.Tag("pagantic/Retriever")<Retriever, Service>() {}
