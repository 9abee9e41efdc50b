/**
 * Layer 3: knowledge retrieval.
 *
 * A Retriever finds chunks relevant to a query; a ContextProvider turns a query into
 * ephemeral context messages that a loop injects just before the user message and
 * never stores. The loops consume ContextProvider only (the small interface they
 * need), so a retriever can change without touching them.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Failure } from "../domain/Failure.js"
import type { Message } from "../domain/Message.js"

/** A retrieved piece of knowledge with its provenance. */
export class Chunk extends Schema.Class<Chunk>("Chunk")({
  content: Schema.String,
  source: Schema.String,
  score: Schema.Number,
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}) {}

export interface RetrieverService {
  readonly retrieve: (query: string, limit: number) => Effect.Effect<ReadonlyArray<Chunk>, Failure>
}

/** Retrieves chunks for a query. */
export class Retriever extends Context.Tag("pagantic/Retriever")<Retriever, RetrieverService>() {}

export interface ContextProviderService {
  /** Builds the ephemeral context messages for a query. */
  readonly build: (query: string) => Effect.Effect<ReadonlyArray<Message>, Failure>
}

/** Builds per-turn ephemeral context. */
export class ContextProvider extends Context.Tag("pagantic/ContextProvider")<
  ContextProvider,
  ContextProviderService
>() {}
