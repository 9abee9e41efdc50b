/**
 * A Reranker with no model: BM25 over the candidates themselves (term frequency
 * with saturation and length normalisation, inverse document frequency across
 * the candidate set). No failure, fully deterministic. Orders by score, then by
 * the candidate's original position, and keeps `topK`.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { RerankInput, Service } from "../services/Reranker.js"
import { rank, Reranker } from "../services/Reranker.js"
import * as Tracing from "../services/internal/Tracing.js"

/** Lowercased letter/digit runs. */
export const tokenize = (text: string): ReadonlyArray<string> => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []

export interface Options {
  /** Term-frequency saturation. Default 1.2. */
  readonly k1?: number
  /** Length normalisation. Default 0.75. */
  readonly b?: number
}

/** BM25 scores of `documents` for `query`, the documents being the whole corpus. */
export const bm25 = (
  query: string,
  documents: ReadonlyArray<string>,
  options: Options = {}
): ReadonlyArray<number> => {
  const k1 = options.k1 ?? 1.2
  const b = options.b ?? 0.75
  const docs = documents.map(tokenize)
  const n = docs.length
  if (n === 0) return []
  const avgLength = docs.reduce((sum, d) => sum + d.length, 0) / n || 1
  const terms = [...new Set(tokenize(query))]
  const df = new Map(terms.map((t) => [t, docs.filter((d) => d.includes(t)).length] as const))
  return docs.map((doc) => {
    const tf = new Map<string, number>()
    for (const token of doc) tf.set(token, (tf.get(token) ?? 0) + 1)
    let score = 0
    for (const term of terms) {
      const f = tf.get(term) ?? 0
      if (f === 0) continue
      const docFreq = df.get(term)!
      const idf = Math.log(1 + (n - docFreq + 0.5) / (docFreq + 0.5))
      score += idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * doc.length / avgLength))
    }
    return score
  })
}

/** A lexical reranker: BM25 of each candidate against the query, across the candidate set. */
export const make = (options: Options = {}): Service => ({
  // a span only when a tracer exports it (Effect.fn's span and stack capture cost more than scoring five candidates)
  rerank: (input: RerankInput) =>
    Tracing.exportedSpan("Reranker.lexical")(
      Effect.sync(() => rank(input, bm25(input.query, input.candidates.map((c) => c.content), options)))
    )
})

/** The default reranker layer: lexical. */
export const layer = (options: Options = {}): Layer.Layer<Reranker> =>
  Layer.succeed(Reranker, make(options))
