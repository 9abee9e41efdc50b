/**
 * Layer 0: a passage of knowledge with its provenance and a score. What a
 * Retriever returns (a chunk), what a Reranker orders (a candidate) and what a
 * plan's retrieve and rerank steps pass on: one schema for all of them.
 */
import * as Schema from "effect/Schema"

export class Passage extends Schema.Class<Passage>("Passage")({
  content: Schema.String,
  source: Schema.String,
  /** Relevance to the query; higher is better (its scale is the scorer's). */
  score: Schema.Number,
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}) {}
