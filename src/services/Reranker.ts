/**
 * Layer 6: reranking.
 *
 * Retrieval casts a wide net; a reranker scores each candidate against the query
 * and orders them best first, so that only the few that matter reach the model.
 * A candidate's `score` means whatever its producer says (BM25 for retrieval, a
 * relevance estimate after reranking), so a reranker replaces it. The order is
 * deterministic: by score, then by the candidate's original position.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Construct from "../domain/Construct.js"
import type { ConstraintFailure, InferenceFailure } from "../domain/Failure.js"
import { Passage } from "../domain/Passage.js"

/** A scored item with its provenance (the same fields as a retrieved Chunk). */
/** A passage to rank (see `Passage`). */
export const Candidate = Passage
export type Candidate = Passage

/** A query and the candidates to rank for it; `topK` keeps only the best ones. */
export class RerankInput extends Schema.Class<RerankInput>("RerankInput")({
  query: Schema.String,
  candidates: Schema.Array(Candidate),
  topK: Schema.optional(Schema.Int.pipe(Schema.positive()))
}) {}

/** What a reranker can fail with (a lexical reranker never fails). */
export type RerankFailure = InferenceFailure | ConstraintFailure

export interface Service {
  /** Scores every candidate against the query and returns them best first (at most `topK`). */
  readonly rerank: (input: RerankInput) => Effect.Effect<ReadonlyArray<Candidate>, RerankFailure>
}

/** Scores and orders candidates for a query. */
export class Reranker extends Context.Tag("pagantic/Reranker")<Reranker, Service>() {}

/**
 * Candidates ordered by `scores` (highest first; ties keep their original order),
 * each carrying its new score, cut to `topK`: how every reranker answers.
 */
export const rank = (input: RerankInput, scores: ReadonlyArray<number>): ReadonlyArray<Candidate> => {
  const ranked = input.candidates
    .map((candidate, i) => ({ candidate, i, score: scores[i]! }))
    .sort((a, b) => b.score - a.score || a.i - b.i)
    // built from candidates already checked: not validated again (Construct)
    .map(({ candidate, score }) => Construct.unchecked(Candidate, { ...candidate, score }))
  return input.topK === undefined ? ranked : ranked.slice(0, input.topK)
}
