/**
 * The expression fold: a CEL `fold.expression` over the valid responses picks
 * one by index.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Text from "../../domain/Text.js"
import { noValid, output, sortAndCheck, views } from "./Canonical.js"
import type { Options, Output, Response } from "./Response.js"

/** The response a CEL expression over the valid responses picks (by index). */
export const expression = (responses: ReadonlyArray<Response>, options: Options = {}): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  const choice = options.choice
  if (choice === undefined) {
    return Either.left(OrchestrationFailure.stepMismatch("expression fold: no fold.expression given", { details: { fold: "expression" } }))
  }
  if (sorted.valid.length === 0) return Either.left(noValid("expression", sorted))
  const all = views(sorted.valid, options)
  return Either.flatMap(choice.run({ responses: all }), (index) => {
    const chosen = sorted.valid[index]
    if (chosen === undefined) {
      return Either.left(
        OrchestrationFailure.expressionFailed(
          `${choice.field}: the CEL expression ${JSON.stringify(Text.excerpt(choice.source, 120))} chose response ${index}; there are ${all.length} (0 to ${all.length - 1})`,
          { details: { field: choice.field, expression: Text.excerpt(choice.source, 200), index, valid: all.length } }
        )
      )
    }
    return Either.right(output("expression", sorted, chosen, all[index]!.confidence, [chosen.response], []))
  })
}
