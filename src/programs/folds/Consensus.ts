/**
 * The consensus fold: the largest group of equal (or similar) answers wins;
 * ties go to the group seen first; confidence = group / valid.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import { noSemantic, noValid, output, sortAndCheck } from "./Canonical.js"
import type { Options, Output, Response } from "./Response.js"
import { groupBy, members } from "./Similarity.js"

/** The largest group of equal (or similar) answers; ties to the earliest. */
export const consensus = (responses: ReadonlyArray<Response>, options: Options = {}): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  if (sorted.valid.length === 0) return Either.left(noValid("consensus", sorted))
  if (options.similarity === "semantic" && options.semantic === undefined) return Either.left(noSemantic("consensus"))
  const groups = groupBy(sorted.valid, options)
  let best = groups[0]!
  for (const g of groups) if (g.members.length > best.members.length) best = g
  return Either.right(
    output("consensus", sorted, best.members[0]!, best.members.length / sorted.valid.length, members(best), groups.map(members))
  )
}
