/**
 * ensemble_with_audit: the primaries answer in parallel, their answers are
 * folded, and the fold goes to a trusted auditor, who answers with a verdict
 * (`{ approved, rationale }`). `audit_expression` over the verdict and the fold
 * decides: approved commits the fold with the verdict; rejected commits the fold
 * with `audit.rejected` and the auditor's rationale. An audit that cannot be read
 * (the auditor failed, declined, answered off-shape, or the expression failed) is
 * ambiguous: under `obligation_resolution: "validation_error"` the run halts with
 * VALIDATION_RULE_FAILED naming the records; otherwise it counts as a rejection.
 * N primary CALLs and one audit CALL; the LEARN carries the fold and the verdict.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { Failure } from "../../domain/Failure.js"
import { ValidationFailure } from "../../domain/Failure.js"
import { canonicalJson, isObject } from "../../domain/Json.js"
import * as JsonSchema from "../../domain/JsonSchema.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Cel from "../Cel.js"
import * as Folds from "../Folds.js"
import type * as Check from "../query/Check.js"
import * as Commit from "./Commit.js"
import * as Round from "./Round.js"

type AuditOrchestration = Extract<Check.Orchestration, { readonly pattern: "ensemble_with_audit" }>

/** What an auditor is asked to answer in. */
export const verdictShape: Round.AnswerShapeOverride = (() => {
  const wire = {
    kind: "core.json.v1",
    schema: JsonSchema.object(
      { approved: JsonSchema.boolean("whether the answer is approved"), rationale: JsonSchema.string("why") },
      ["approved"]
    )
  } as const
  return { wire, checker: AnswerShape.checker(wire) }
})()

export const run = (
  thread: Round.Thread,
  o: AuditOrchestration
): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const ensemble = yield* Round.run(thread, {
      key: "ensemble",
      role: "ensemble",
      predicates: o.primary,
      stage: 0,
      attempt: 1,
      topK: Math.max(thread.checked.topK, o.primary.length)
    })
    const fold = yield* Round.fold(thread, ensemble.responses)
    const auditor = yield* Round.run(thread, {
      key: "auditor",
      role: "auditor",
      predicates: [o.auditor],
      stage: 1,
      attempt: 1,
      topK: 1,
      input: auditInput(thread.input, fold),
      shape: verdictShape
    })
    const response = auditor.responses[0]!
    const read = readVerdict(response, fold, o.audit)
    const verdict: Records.AuditVerdict = {
      approved: read.approved,
      rejected: !read.approved,
      ambiguous: read.problem !== undefined,
      rationale: read.rationale,
      record_id: response.recordId
    }
    const state = yield* Round.learn(thread, "audit/learn", [...fold.support.map((r) => r.recordId), response.recordId], {
      kind: Records.kinds.audit,
      fold: Round.summary(fold),
      audit: verdict,
      expression: o.audit.source,
      ...(read.problem === undefined ? {} : { problem: read.problem })
    })
    if (read.problem !== undefined && thread.checked.obligationResolution === "validation_error") {
      const records = [...fold.support.map((r) => r.recordId), response.recordId, state.id]
      return yield* ValidationFailure.ruleFailed(
        `ensemble_with_audit: the audit is ambiguous (${read.problem}); obligation_resolution is validation_error, so the run halts. Records: ${records.join(", ")}`,
        { details: { pattern: "ensemble_with_audit", records, problem: read.problem }, failedRules: [o.audit.field] }
      )
    }
    return yield* Commit.know(thread, {
      pattern: "ensemble_with_audit",
      status: verdict.approved ? "accepted" : "rejected",
      fold,
      parents: [response.recordId, state.id],
      audit: verdict
    })
  }).pipe(Effect.withSpan("Patterns.ensembleWithAudit", { captureStackTrace: false }))

const auditInput = (input: string, fold: Folds.Output): string =>
  [
    input,
    "",
    "Several responders answered this; their folded answer is below. Audit it: approve it or not, and say why.",
    `Answer: ${canonicalJson(fold.answer)}`
  ].join("\n")

/** The verdict, or why it is ambiguous. */
const readVerdict = (
  response: Folds.Response,
  fold: Folds.Output,
  expression: Cel.Compiled<"audit">
): { readonly approved: boolean; readonly rationale: string; readonly problem?: string | undefined } => {
  if (response.outcome._tag === "Failed") {
    return { approved: false, rationale: "", problem: `the auditor gave no verdict: ${Text.excerpt(response.outcome.problem, 200)}` }
  }
  const verdict = AnswerShape.answerOf(response.outcome.body)
  const checked = verdictShape.checker.check(verdict)
  if (Either.isLeft(checked) || !isObject(verdict) || typeof verdict.approved !== "boolean") {
    return {
      approved: false,
      rationale: "",
      problem: `the auditor's verdict is not { approved: boolean, rationale?: string }: ${Text.excerpt(canonicalJson(verdict), 120)}`
    }
  }
  const rationale = typeof verdict.rationale === "string" ? verdict.rationale : AnswerShape.rationaleOf(response.outcome.body) ?? ""
  const decided = expression.run({
    audit: new Cel.AuditView(verdict.approved, rationale, verdict, response.responder),
    fold: Folds.view(fold)
  })
  return Either.match(decided, {
    onLeft: (failure) => ({ approved: false, rationale, problem: `${expression.field} failed: ${Text.excerpt(failure.message, 200)}` }),
    onRight: (approved) => ({ approved, rationale })
  })
}
