/**
 * Folds: combining the answers of several responders into one.
 *
 * A fold is a pure function of the responses. It never sees arrival order: the
 * responses are first put in canonical order (stage, responder index, attempt,
 * record id, then the answer itself), so the same records always fold to the same
 * answer, on a first run and on a replay. Failed responses and answers that do not
 * match the answer shape are kept apart (`rejected`) and never count as valid.
 *
 * - consensus: the largest group of equal answers wins (equal in canonical JSON,
 *   or similar text); ties go to the group seen first; confidence = group / valid.
 * - best_of: the most confident answer: its `_confidence`, else the confidence the
 *   shape carries (a classifier's), else its responder kind's default.
 * - waterfall_first: the first answer, by stage then canonical order, that is
 *   accepted (by the waterfall's accept expression, when there is one).
 * - ensemble_weighted: like consensus with a weight per response (a CEL
 *   `weight_expression`, default 1); confidence = winning weight / total weight.
 * - expression: a CEL `fold.expression` over the valid responses picks one by index.
 *
 * Similarity: structural (canonical JSON) by default; text (token-set Jaccard at a
 * threshold, default 0.8); semantic through a similarity the application provides.
 * Grouping by similarity is greedy in canonical order: an answer joins the first
 * group whose first answer is similar enough.
 *
 * This module is the public face; the folds live in folds/: the responses and
 * options (Response), canonical order and validity (Canonical), similarity and
 * grouping (Similarity), and one file per fold.
 */
import type * as Either from "effect/Either"
import type { OrchestrationFailure } from "../domain/Failure.js"
import type { FoldFunction } from "../domain/Query.js"
import * as Cel from "./Cel.js"
import { bestOf } from "./folds/BestOf.js"
import { canonicalOrder, confidenceOf } from "./folds/Canonical.js"
import { consensus } from "./folds/Consensus.js"
import { ensembleWeighted } from "./folds/Ensemble.js"
import { expression } from "./folds/Expression.js"
import type { Options, Output, Response } from "./folds/Response.js"
import { answered, defaultKindConfidence, defaultSimilarityThreshold, failed } from "./folds/Response.js"
import { jaccard, similarity, tokenSet } from "./folds/Similarity.js"
import { waterfallFirst } from "./folds/Waterfall.js"

export type { Options, Outcome, Output, Rejected, Response, SemanticSimilarity } from "./folds/Response.js"
export {
  answered,
  bestOf,
  canonicalOrder,
  confidenceOf,
  consensus,
  defaultKindConfidence,
  defaultSimilarityThreshold,
  ensembleWeighted,
  expression,
  failed,
  jaccard,
  similarity,
  tokenSet,
  waterfallFirst
}

/** A fold chosen by name with its options: what a checked query carries. */
export interface Spec {
  readonly function: FoldFunction
  readonly options: Options
}

/** Runs the fold a spec names. */
export const run = (spec: Spec, responses: ReadonlyArray<Response>): Either.Either<Output, OrchestrationFailure> => {
  switch (spec.function) {
    case "consensus":
      return consensus(responses, spec.options)
    case "best_of":
      return bestOf(responses, spec.options)
    case "waterfall_first":
      return waterfallFirst(responses, spec.options)
    case "ensemble_weighted":
      return ensembleWeighted(responses, spec.options)
    case "expression":
      return expression(responses, spec.options)
  }
}

/** A fold's output as CEL thresholds see it (`fold.answer.confidence`). */
export const view = (out: Output): Cel.FoldView =>
  new Cel.FoldView({
    function: out.function,
    answer: new Cel.AnswerView(out.answer ?? null, out.confidence, out.rationale ?? "", out.chosen.responder, out.chosen.recordId),
    support: BigInt(out.support.length),
    valid: BigInt(out.valid),
    total: BigInt(out.total)
  })
