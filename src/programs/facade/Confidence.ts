/**
 * A response's confidence, from the three sources the boundary contract names:
 * the vote's support ("voting", mode redundant), the share of replies or rules
 * that passed validation ("validation"), and the relevance of what was retrieved
 * ("retrieval"). A mode reports one only where it produced one of them; a
 * response without a source has no confidence, never a made-up one.
 */
import type { ConfidenceSource } from "../../domain/System.js"

export interface Confidence {
  readonly confidence: number
  readonly confidenceSource: ConfidenceSource
}

/**
 * The confidence of retrieved passages: the best score, when the scores are on
 * the [0, 1] scale of a relevance (a model reranker's); a score outside it (BM25)
 * says how the passages rank, not how sure anyone is, so there is none.
 */
export const retrieval = (scores: ReadonlyArray<number>): Confidence | undefined => {
  if (scores.length === 0) return undefined
  const best = Math.max(...scores)
  return scores.every((s) => s >= 0 && s <= 1) ? { confidence: best, confidenceSource: "retrieval" } : undefined
}
