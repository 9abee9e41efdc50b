/**
 * A Retriever over an in-memory document collection, ranked by BM25.
 *
 * Indexing and ranking are minisearch's (BM25+ over the document text, with its
 * tokenizer and lowercasing); this module only maps documents to Chunks and keeps
 * the order deterministic (score, then the collection's order).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import MiniSearch from "minisearch"
import { Chunk, Retriever } from "../services/Retriever.js"
import type { Service as RetrieverService } from "../services/Retriever.js"

/** A document of the collection. */
export class Document extends Schema.Class<Document>("Document")({
  id: Schema.String,
  content: Schema.String,
  source: Schema.String,
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  })
}) {}

export interface Options {
  /** Prefix matching of query terms ("interf" finds "interfaces"). Default false. */
  readonly prefix?: boolean
  /** Fuzzy matching as a fraction of term length (minisearch's `fuzzy`). Default 0 (exact). */
  readonly fuzzy?: number
  /** Chunks scoring below this are dropped. Default 0. */
  readonly minScore?: number
}

type Indexed = { readonly id: string; readonly content: string }

/** Indexes the documents and returns a Retriever over them. */
export const make = (
  documents: ReadonlyArray<Document | ConstructorParameters<typeof Document>[0]>,
  options: Options = {}
): Effect.Effect<RetrieverService> =>
  Effect.sync(() => {
    const docs = documents.map((d) => (d instanceof Document ? d : new Document(d)))
    const position = new Map(docs.map((d, i) => [d.id, i] as const))
    const index = new MiniSearch<Indexed>({ fields: ["content"], idField: "id" })
    index.addAll(docs.map((d) => ({ id: d.id, content: d.content })))
    const retrieve = Effect.fn("Retriever.retrieve")(function* (query: string, limit: number) {
      if (limit <= 0 || query.trim() === "") return []
      const hits = index
        .search(query, { prefix: options.prefix ?? false, fuzzy: options.fuzzy ?? 0, combineWith: "OR" })
        .filter((hit) => hit.score > (options.minScore ?? 0))
        .sort((a, b) => b.score - a.score || position.get(a.id)! - position.get(b.id)!)
        .slice(0, limit)
      yield* Effect.annotateCurrentSpan("hits", hits.length)
      return hits.map((hit) => {
        const doc = docs[position.get(hit.id)!]!
        return new Chunk({
          content: doc.content,
          source: doc.source,
          score: hit.score,
          metadata: { ...doc.metadata, id: doc.id, terms: hit.terms }
        })
      })
    })
    return Retriever.of({ retrieve })
  })

/** A Retriever layer over a fixed collection. */
export const layer = (
  documents: ReadonlyArray<Document | ConstructorParameters<typeof Document>[0]>,
  options: Options = {}
): Layer.Layer<Retriever> => Layer.effect(Retriever, make(documents, options))
