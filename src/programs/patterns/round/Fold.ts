/**
 * A round's answers folded: each terminal DO as a fold response, the quorum
 * checked before the query's fold runs, and the fold's output as records carry it.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../../domain/AnswerShape.js"
import { OrchestrationFailure } from "../../../domain/Failure.js"
import * as Records from "../../../domain/Records.js"
import * as Text from "../../../domain/Text.js"
import * as Folds from "../../Folds.js"
import type * as Select from "../../query/Select.js"
import type { Spec, Thread } from "./Types.js"

/** A terminal DO as the folds take it. */
export const responseOf = (spec: Pick<Spec, "stage" | "attempt">, candidate: Select.Candidate, record: Records.Do): Folds.Response => {
  const fields = {
    responder: candidate.responder.id,
    responderIndex: candidate.index,
    kind: candidate.responder.kind,
    attempt: spec.attempt,
    stage: spec.stage,
    recordId: record.id
  }
  const body = record.body
  if (Records.isSubmit(body)) return Folds.answered({ ...fields, body: Records.bodyOfSubmit(body) })
  if (body.kind === Records.kinds.decline) return Folds.failed({ ...fields, problem: `declined: ${body.reason}${body.note === undefined ? "" : ` (${Text.excerpt(body.note, 120)})`}` })
  if (body.kind === Records.kinds.failure) return Folds.failed({ ...fields, problem: body.problem })
  return Folds.failed({ ...fields, problem: "accepted but never answered" })
}

/** Folds responses with the query's fold, after checking the quorum (below it: NO_CONSENSUS naming what was missing). */
export const fold = (
  thread: Thread,
  responses: ReadonlyArray<Folds.Response>,
  spec: Folds.Spec = thread.checked.fold
): Either.Either<Folds.Output, OrchestrationFailure> => {
  const checker = spec.options.shape ?? thread.checked.shape
  const valid = responses.filter((r) =>
    r.outcome._tag === "Answered" && Either.isRight(checker.check(AnswerShape.answerOf(r.outcome.body)))).length
  if (valid < thread.checked.minQuorum) {
    return Either.left(
      OrchestrationFailure.noConsensus(
        `only ${valid} of ${responses.length} responders gave a valid answer; min_quorum is ${thread.checked.minQuorum}`,
        {
          details: {
            valid,
            minQuorum: thread.checked.minQuorum,
            missing: responses.flatMap((r) =>
              r.outcome._tag === "Failed"
                ? [{ responder: r.responder, record_id: r.recordId, problem: Text.excerpt(r.outcome.problem, 160) }]
                : []
            )
          }
        }
      )
    )
  }
  return Folds.run(spec, responses)
}

/** A fold's output as records carry it. */
export const summary = (out: Folds.Output): Records.FoldSummary => ({
  function: out.function,
  answer: out.answer ?? null,
  confidence: out.confidence,
  ...(out.rationale === undefined ? {} : { rationale: out.rationale }),
  chosen: out.chosen.recordId,
  support: out.support.map((r) => r.recordId),
  valid: out.valid,
  total: out.total,
  rejected: out.rejected.map((r) => ({ record_id: r.response.recordId, problem: Text.excerpt(r.problem, 300) }))
})
