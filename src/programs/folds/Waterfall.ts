/**
 * The waterfall_first fold: the first answer, by stage then canonical order,
 * that the waterfall's accept expression accepts (every valid answer when there
 * is none).
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import { confidenceOf, noValid, output, sortAndCheck } from "./Canonical.js"
import type { Options, Output, Rejected, Response } from "./Response.js"

/** The first accepted answer in stage, then canonical, order. */
export const waterfallFirst = (
  responses: ReadonlyArray<Response>,
  options: Options = {}
): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  const refused: Array<Rejected> = []
  const all = () =>
    [...sorted.rejected, ...refused].sort((a, b) => sorted.position.get(a.response)! - sorted.position.get(b.response)!)
  for (const v of sorted.valid) {
    const candidate = output("waterfall_first", sorted, v, confidenceOf(v.body, v.answer, v.response.kind, options), [v.response], [])
    if (options.accept === undefined) return Either.right(candidate)
    const accepted = options.accept(candidate)
    if (Either.isLeft(accepted)) return Either.left(accepted.left)
    if (accepted.right) return Either.right({ ...candidate, rejected: all() })
    refused.push({ response: v.response, problem: "not accepted" })
  }
  return Either.left(noValid("waterfall_first", { ...sorted, rejected: all() }))
}
