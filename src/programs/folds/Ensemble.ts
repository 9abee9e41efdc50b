/**
 * The ensemble_weighted fold: like consensus with a weight per response (a CEL
 * `weight_expression`, default 1); confidence = winning weight / total weight.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Text from "../../domain/Text.js"
import type { Valid } from "./Canonical.js"
import { describeResponse, noSemantic, noValid, output, sortAndCheck, views } from "./Canonical.js"
import type { Options, Output, Response } from "./Response.js"
import { groupBy, members } from "./Similarity.js"

/** The group with the largest total weight; confidence = its weight / all weight. */
export const ensembleWeighted = (
  responses: ReadonlyArray<Response>,
  options: Options = {}
): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  if (sorted.valid.length === 0) return Either.left(noValid("ensemble_weighted", sorted))
  if (options.similarity === "semantic" && options.semantic === undefined) return Either.left(noSemantic("ensemble_weighted"))
  const weights = new Map<Valid, number>()
  if (options.weight === undefined) for (const v of sorted.valid) weights.set(v, 1)
  else {
    const weight = options.weight
    const all = views(sorted.valid, options)
    for (let i = 0; i < sorted.valid.length; i++) {
      const w = weight.run({ response: all[i]! })
      if (Either.isLeft(w)) return Either.left(w.left)
      if (w.right < 0) {
        return Either.left(
          OrchestrationFailure.expressionFailed(`${weight.field}: the weight of ${sorted.valid[i]!.response.responder} is ${w.right}; weights are never negative`, {
            details: { field: weight.field, expression: Text.excerpt(weight.source, 200), weight: w.right, response: describeResponse(sorted.valid[i]!.response) }
          })
        )
      }
      weights.set(sorted.valid[i]!, w.right)
    }
  }
  const groups = groupBy(sorted.valid, options)
  let total = 0
  for (const g of groups) {
    g.weight = g.members.reduce((sum, m) => sum + weights.get(m)!, 0)
    total += g.weight
  }
  if (total <= 0) {
    return Either.left(
      OrchestrationFailure.noConsensus(`ensemble_weighted fold: every weight is 0 (${sorted.valid.length} valid responses)`, {
        details: { fold: "ensemble_weighted", valid: sorted.valid.length }
      })
    )
  }
  let best = groups[0]!
  for (const g of groups) if (g.weight > best.weight) best = g
  return Either.right(output("ensemble_weighted", sorted, best.members[0]!, best.weight / total, members(best), groups.map(members)))
}
