/**
 * Layer 3: knowledge retrieval.
 *
 * A Retriever finds chunks relevant to a query. The loops do not consume it
 * directly: a ContextProvider (the small interface they need) turns a query into
 * ephemeral context messages, so a retriever can change without touching them.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Failure } from "../domain/Failure.js"

/** A retrieved piece of knowledge with its provenance. */
export class Chunk extends Schema.Class<Chunk>("Chunk")({
  content: Schema.String,
  source: Schema.String,
  score: Schema.Number,
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}) {}

export interface Service {
  readonly retrieve: (query: string, limit: number) => Effect.Effect<ReadonlyArray<Chunk>, Failure>
}

/** Retrieves chunks for a query. */
export class Retriever extends Context.Tag("pagantic/Retriever")<Retriever, Service>() {}
