/**
 * verify: a primary answers, a verifier answers the same question without seeing
 * the primary's answer, and their agreement (the fold's similarity: structural by
 * default) is held against `agreement_threshold` (a number, or a CEL number over
 * the two responses). Agreement at or above it commits the primary's fold: two
 * CALLs. Below it, or when the verifier failed, declined or answered off-shape, a
 * tiebreaker sees both answers and its answer is committed: three CALLs. The
 * LEARN between the two branches carries the agreement, so a restart resumes on
 * the branch it took.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { Failure } from "../../domain/Failure.js"
import { canonicalJson } from "../../domain/Json.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Cel from "../Cel.js"
import * as Folds from "../Folds.js"
import type * as Check from "../query/Check.js"
import * as Commit from "./Commit.js"
import * as Round from "./Round.js"

type VerifyOrchestration = Extract<Check.Orchestration, { readonly pattern: "verify" }>

export const run = (
  thread: Round.Thread,
  o: VerifyOrchestration
): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const checked = thread.checked
    const primary = yield* Round.run(thread, {
      key: "primary",
      role: "primary",
      predicates: o.primary,
      stage: 0,
      attempt: 1,
      topK: checked.topK
    })
    const primaryFold = Round.fold(thread, primary.responses)
    const verifier = yield* Round.runOrNoOne(thread, {
      key: "verifier",
      role: "verifier",
      predicates: [o.verifier],
      stage: 1,
      attempt: 1,
      topK: 1
    })
    const verifierResponse = Either.isRight(verifier) ? verifier.right.responses[0] : undefined
    const compared = compare(checked, primaryFold, verifierResponse, Either.isLeft(verifier) ? verifier.left.message : undefined)
    const threshold = o.agreement._tag === "Fixed"
      ? o.agreement.threshold
      : yield* thresholdOf(o.agreement.threshold, checked, primaryFold, verifierResponse)
    const agreed = compared.problem === undefined && compared.agreement >= threshold
    const primaryIds = Round.doIds(primary)
    const verifierIds = Either.isRight(verifier) ? Round.doIds(verifier.right) : []
    const state = yield* Round.learn(thread, "verify/learn", [...primaryIds, ...verifierIds], {
      kind: Records.kinds.verify,
      primary: Either.isRight(primaryFold) ? Round.summary(primaryFold.right) : null,
      verifier: verifierResponse?.recordId ?? null,
      agreement: compared.agreement,
      threshold,
      branch: agreed ? "agreed" : "tiebreaker",
      ...(compared.problem === undefined ? {} : { problem: compared.problem })
    })
    if (agreed && Either.isRight(primaryFold)) {
      return yield* Commit.know(thread, {
        pattern: "verify",
        status: "accepted",
        fold: primaryFold.right,
        parents: [...verifierIds, state.id]
      })
    }
    const tiebreaker = yield* Round.run(thread, {
      key: "tiebreaker",
      role: "tiebreaker",
      predicates: [o.tiebreaker],
      stage: 2,
      attempt: 1,
      topK: 1,
      input: tiebreakerInput(thread.input, primaryFold, verifierResponse)
    })
    const fold = yield* Folds.run(checked.fold, tiebreaker.responses)
    return yield* Commit.know(thread, { pattern: "verify", status: "accepted", fold, parents: [state.id], stage: 2 })
  }).pipe(Effect.withSpan("Patterns.verify", { captureStackTrace: false }))

/** The verifier's valid answer, if it gave one. */
const validAnswer = (checked: Check.Checked, response: Folds.Response | undefined): Either.Either<unknown, string> => {
  if (response === undefined) return Either.left("no verifier was dispatched")
  if (response.outcome._tag === "Failed") return Either.left(`the verifier gave no answer: ${response.outcome.problem}`)
  return Either.mapLeft(checked.shape.check(AnswerShape.answerOf(response.outcome.body)), (p) => `the verifier's answer is off-shape: ${p}`)
}

const compare = (
  checked: Check.Checked,
  primaryFold: Either.Either<Folds.Output, Failure>,
  verifierResponse: Folds.Response | undefined,
  selectionProblem: string | undefined
): { readonly agreement: number; readonly problem?: string | undefined } => {
  if (Either.isLeft(primaryFold)) return { agreement: 0, problem: `the primary gave no fold: ${Text.excerpt(primaryFold.left.message, 200)}` }
  if (selectionProblem !== undefined) return { agreement: 0, problem: Text.excerpt(selectionProblem, 300) }
  const answer = validAnswer(checked, verifierResponse)
  if (Either.isLeft(answer)) return { agreement: 0, problem: Text.excerpt(answer.left, 300) }
  const similarity = Folds.similarity(primaryFold.right.answer, answer.right, checked.fold.options)
  return Either.isLeft(similarity)
    ? { agreement: 0, problem: similarity.left.message }
    : { agreement: similarity.right }
}

/** A CEL agreement threshold over the primary's chosen response and the verifier's (those that are valid). */
const thresholdOf = (
  expression: Cel.Compiled<"agreement">,
  checked: Check.Checked,
  primaryFold: Either.Either<Folds.Output, Failure>,
  verifierResponse: Folds.Response | undefined
) => {
  const views: Array<Cel.ResponseView> = []
  const add = (response: Folds.Response, answer: unknown, body: unknown) =>
    views.push(
      new Cel.ResponseView(
        BigInt(views.length),
        response.responder,
        response.kind,
        BigInt(response.attempt),
        BigInt(response.stage),
        response.recordId,
        answer ?? null,
        Folds.confidenceOf(body, answer, response.kind, checked.fold.options),
        AnswerShape.rationaleOf(body) ?? ""
      )
    )
  if (Either.isRight(primaryFold)) add(primaryFold.right.chosen, primaryFold.right.answer, primaryFold.right.body)
  const answer = validAnswer(checked, verifierResponse)
  if (verifierResponse !== undefined && verifierResponse.outcome._tag === "Answered" && Either.isRight(answer)) {
    add(verifierResponse, answer.right, verifierResponse.outcome.body)
  }
  return expression.run({ responses: views })
}

const tiebreakerInput = (
  input: string,
  primaryFold: Either.Either<Folds.Output, Failure>,
  verifierResponse: Folds.Response | undefined
): string => {
  const describe = (label: string, answer: string) => `${label}: ${answer}`
  const a = Either.isRight(primaryFold) ? canonicalJson(primaryFold.right.answer) : "(no answer)"
  const b = verifierResponse?.outcome._tag === "Answered"
    ? canonicalJson(AnswerShape.answerOf(verifierResponse.outcome.body))
    : `(no answer: ${verifierResponse?.outcome._tag === "Failed" ? Text.excerpt(verifierResponse.outcome.problem, 200) : "not asked"})`
  return [
    input,
    "",
    "Two answers to this were given and they do not agree. Give your own answer.",
    describe("Answer A", a),
    describe("Answer B", b)
  ].join("\n")
}
