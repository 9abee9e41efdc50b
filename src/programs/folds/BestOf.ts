/**
 * The best_of fold: the most confident answer (its `_confidence`, else the
 * shape's, else its responder kind's default); ties go to the earliest.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import { confidenceOf, noValid, output, sortAndCheck } from "./Canonical.js"
import type { Options, Output, Response } from "./Response.js"

/** The most confident answer; ties to the earliest. */
export const bestOf = (responses: ReadonlyArray<Response>, options: Options = {}): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  if (sorted.valid.length === 0) return Either.left(noValid("best_of", sorted))
  let best = sorted.valid[0]!
  let bestConfidence = confidenceOf(best.body, best.answer, best.response.kind, options)
  for (const v of sorted.valid) {
    const c = confidenceOf(v.body, v.answer, v.response.kind, options)
    if (c > bestConfidence) {
      best = v
      bestConfidence = c
    }
  }
  return Either.right(output("best_of", sorted, best, bestConfidence, [best.response], []))
}
