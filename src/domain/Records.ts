/**
 * Layer 0: the records of a query's thread.
 *
 * A query lives as a thread of records, each citing the records it follows from:
 *
 * - INTEND: the query as asked (`infer.query.v1`).
 * - CALL: a question dispatched to one responder, with a correlation id every
 *   answer to it carries; it cites the INTEND.
 * - DO: a response, citing its CALL: `infer.accept.v1` (a human will answer in
 *   about `eta_seconds`; does not count toward the quorum), `infer.decline.v1`
 *   (closes the call, with a reason), a submit (a body of the answer shape's kind,
 *   optionally with `_confidence` and `_rationale`), or `infer.failure.v1` (the
 *   responder failed, timed out or never answered: a failed slot, recorded).
 * - LEARN: the orchestration's state after a step of a multi-step pattern, one
 *   of the five `infer.orchestration.*.state.v1` kinds; it cites the DOs it read.
 * - KNOW: the committed answer, citing the records it was folded from.
 *
 * Wire names are snake_case. Record ids are derived from the run id and the
 * record's structural key, so a replay after a crash rebuilds the same ids.
 */
import * as Schema from "effect/Schema"
import { isObject } from "./Json.js"
import { Query } from "./Query.js"

// ---------------------------------------------------------------------------
// Body kinds
// ---------------------------------------------------------------------------

export const kinds = {
  call: "infer.call.v1",
  accept: "infer.accept.v1",
  decline: "infer.decline.v1",
  failure: "infer.failure.v1",
  verify: "infer.orchestration.verify.state.v1",
  waterfall: "infer.orchestration.waterfall.state.v1",
  retry: "infer.orchestration.retry.state.v1",
  escalate: "infer.orchestration.escalate.state.v1",
  audit: "infer.orchestration.audit.state.v1"
} as const

/** The answer shapes' kinds: a submit's and a KNOW's body kind. */
export const AnswerKind = Schema.Literal("core.classification.v1", "core.summary.v1", "core.text.v1", "core.json.v1")
export type AnswerKind = typeof AnswerKind.Type

const RecordId = Schema.String
const Parents = Schema.Array(RecordId)

/** The id of the record with structural key `key` in run `runId`. */
export const recordId = (runId: string, key: string): string => `${runId}/${key}`

// ---------------------------------------------------------------------------
// INTEND and CALL
// ---------------------------------------------------------------------------

/** The query as asked: the thread's root. */
export class Intend extends Schema.Class<Intend>("pagantic/Intend")({
  id: RecordId,
  kind: Schema.Literal("INTEND"),
  parents: Parents,
  body: Query
}) {}

/** Who a CALL went to. */
export const CalledResponder = Schema.Struct({
  id: Schema.String,
  kind: Schema.Literal("pattern", "system", "llm", "actor"),
  /** The responder's position among the round's candidates (the fold's order). */
  index: Schema.Number
})
export type CalledResponder = typeof CalledResponder.Type

export const CallBody = Schema.Struct({
  kind: Schema.Literal(kinds.call),
  correlation_id: Schema.String,
  responder: CalledResponder,
  /** The stage, tier or role's round (from 0). */
  stage: Schema.Number,
  /** The attempt (retry_on_low_confidence), from 1. */
  attempt: Schema.Number,
  /** What the round is for: `primary`, `verifier`, `tiebreaker`, `stage`, `tier`, `attempt`, `ensemble`, `auditor`, `single_shot`. */
  role: Schema.String,
  /** The dial the responder was asked with (llm: sampling temperature scale). */
  dial: Schema.optional(Schema.Number)
})
export type CallBody = typeof CallBody.Type

/** A question dispatched to one responder. */
export class Call extends Schema.Class<Call>("pagantic/Call")({
  id: RecordId,
  kind: Schema.Literal("CALL"),
  parents: Parents,
  body: CallBody
}) {}

// ---------------------------------------------------------------------------
// DO
// ---------------------------------------------------------------------------

export const DeclineReason = Schema.Literal("out_of_domain", "overbooked", "conflict_of_interest", "other")
export type DeclineReason = typeof DeclineReason.Type

/** A human will answer: extends the wait by `eta_seconds`; does not count toward the quorum. */
export const AcceptBody = Schema.Struct({
  kind: Schema.Literal(kinds.accept),
  correlation_id: Schema.String,
  eta_seconds: Schema.Number.pipe(Schema.nonNegative(), Schema.lessThanOrEqualTo(604_800))
})
export type AcceptBody = typeof AcceptBody.Type

/** The responder will not answer: the call is closed and does not count. */
export const DeclineBody = Schema.Struct({
  kind: Schema.Literal(kinds.decline),
  correlation_id: Schema.String,
  reason: DeclineReason,
  note: Schema.optional(Schema.String.pipe(Schema.maxLength(2_000)))
})
export type DeclineBody = typeof DeclineBody.Type

/** The responder failed, timed out, answered unreadably or was never awaited: a failed slot. */
export const FailureBody = Schema.Struct({
  kind: Schema.Literal(kinds.failure),
  correlation_id: Schema.String,
  problem: Schema.String
})
export type FailureBody = typeof FailureBody.Type

/**
 * An answer: the answer shape's kind, the correlation id, and the responder's
 * body (its answer with `_confidence` and `_rationale`). For `core.json.v1` the
 * body is under `value` (a JSON answer need not be an object); for the other
 * kinds its keys are the body's own (`category`, `summary`, `text`...).
 */
export const SubmitBody = Schema.Struct(
  { kind: AnswerKind, correlation_id: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)
export type SubmitBody = typeof SubmitBody.Type

export const DoBody = Schema.Union(AcceptBody, DeclineBody, FailureBody, SubmitBody)
export type DoBody = typeof DoBody.Type

/** A response to a CALL. */
export class Do extends Schema.Class<Do>("pagantic/Do")({
  id: RecordId,
  kind: Schema.Literal("DO"),
  parents: Parents,
  body: DoBody
}) {}

const reservedSubmitKeys = new Set(["kind", "correlation_id"])

/** The submit body carrying a responder's `body` for an answer of `kind`. */
export const submitBody = (kind: AnswerKind, correlationId: string, body: unknown): SubmitBody => {
  if (kind === "core.json.v1" || !isObject(body)) return { kind, correlation_id: correlationId, value: body }
  const out: Record<string, unknown> = { kind, correlation_id: correlationId }
  for (const key of Object.keys(body)) {
    if (reservedSubmitKeys.has(key)) continue
    Object.defineProperty(out, key, { value: body[key], enumerable: true, writable: true, configurable: true })
  }
  return out as SubmitBody
}

/** The responder's body back from a submit (the inverse of `submitBody`). */
export const bodyOfSubmit = (submit: SubmitBody): unknown => {
  if (submit.kind === "core.json.v1") return submit.value
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(submit)) {
    if (reservedSubmitKeys.has(key)) continue
    Object.defineProperty(out, key, { value: submit[key], enumerable: true, writable: true, configurable: true })
  }
  return out
}

export const isSubmit = (body: DoBody): body is SubmitBody =>
  body.kind !== kinds.accept && body.kind !== kinds.decline && body.kind !== kinds.failure

// ---------------------------------------------------------------------------
// What a human sends (the answer of a human slot)
// ---------------------------------------------------------------------------

/** A human's answer to a CALL: accept, decline or submit (the correlation id is the slot's). */
export const HumanAnswer = Schema.Union(
  Schema.Struct({ kind: Schema.Literal(kinds.accept), eta_seconds: AcceptBody.fields.eta_seconds }),
  Schema.Struct({ kind: Schema.Literal(kinds.decline), reason: DeclineReason, note: DeclineBody.fields.note }),
  Schema.Struct({ kind: AnswerKind }, Schema.Record({ key: Schema.String, value: Schema.Unknown }))
)
export type HumanAnswer = typeof HumanAnswer.Type

// ---------------------------------------------------------------------------
// Folds as recorded
// ---------------------------------------------------------------------------

/** A fold's output as LEARN and KNOW bodies carry it. */
export const FoldSummary = Schema.Struct({
  function: Schema.String,
  answer: Schema.Unknown,
  confidence: Schema.Number,
  rationale: Schema.optional(Schema.String),
  /** The DO the answer is taken from. */
  chosen: RecordId,
  /** The DOs that agree with the answer. */
  support: Schema.Array(RecordId),
  valid: Schema.Number,
  total: Schema.Number,
  rejected: Schema.Array(Schema.Struct({ record_id: RecordId, problem: Schema.String }))
})
export type FoldSummary = typeof FoldSummary.Type

// ---------------------------------------------------------------------------
// LEARN: orchestration state
// ---------------------------------------------------------------------------

/** verify, after the primary and the verifier: the agreement and the branch taken. */
export const VerifyState = Schema.Struct({
  kind: Schema.Literal(kinds.verify),
  primary: Schema.NullOr(FoldSummary),
  verifier: Schema.NullOr(RecordId),
  agreement: Schema.Number,
  threshold: Schema.Number,
  branch: Schema.Literal("agreed", "tiebreaker"),
  /** Why the verifier's answer could not be compared, when it could not. */
  problem: Schema.optional(Schema.String)
})

/** waterfall, after a stage that was not accepted. */
export const WaterfallState = Schema.Struct({
  kind: Schema.Literal(kinds.waterfall),
  stage: Schema.Number,
  fold: Schema.NullOr(FoldSummary),
  expression: Schema.String,
  /** The accept expression's value on the fold (false), or null when there was no fold. */
  accepted: Schema.NullOr(Schema.Boolean),
  problem: Schema.optional(Schema.String)
})

/** retry_on_low_confidence, after each attempt. */
export const RetryState = Schema.Struct({
  kind: Schema.Literal(kinds.retry),
  attempt: Schema.Number,
  fold: Schema.NullOr(FoldSummary),
  expression: Schema.String,
  /** The threshold expression fired (or there was no fold). */
  retry: Schema.Boolean,
  dial: Schema.NullOr(Schema.Number),
  /** The dial of the next attempt, when there is one. */
  next_dial: Schema.NullOr(Schema.Number),
  problem: Schema.optional(Schema.String)
})

/** escalate, after each tier. */
export const EscalateState = Schema.Struct({
  kind: Schema.Literal(kinds.escalate),
  tier: Schema.Number,
  fold: Schema.NullOr(FoldSummary),
  expression: Schema.String,
  /** The escalation expression fired (or there was no fold). */
  escalate: Schema.Boolean,
  /** The tier's human deadline passed with no valid answer. */
  expired: Schema.Boolean,
  problem: Schema.optional(Schema.String)
})

export const AuditVerdict = Schema.Struct({
  approved: Schema.Boolean,
  rejected: Schema.Boolean,
  /** The audit could not be read as a verdict (or its expression failed). */
  ambiguous: Schema.Boolean,
  rationale: Schema.String,
  /** The auditor's DO. */
  record_id: RecordId
})
export type AuditVerdict = typeof AuditVerdict.Type

/** ensemble_with_audit, after the audit. */
export const AuditState = Schema.Struct({
  kind: Schema.Literal(kinds.audit),
  fold: FoldSummary,
  audit: AuditVerdict,
  expression: Schema.String,
  problem: Schema.optional(Schema.String)
})

export const LearnBody = Schema.Union(VerifyState, WaterfallState, RetryState, EscalateState, AuditState)
export type LearnBody = typeof LearnBody.Type

/** A multi-step pattern's state, citing the records it read. */
export class Learn extends Schema.Class<Learn>("pagantic/Learn")({
  id: RecordId,
  kind: Schema.Literal("LEARN"),
  parents: Parents,
  body: LearnBody
}) {}

// ---------------------------------------------------------------------------
// KNOW
// ---------------------------------------------------------------------------

/**
 * How the committed answer stands: accepted, or committed in spite of the
 * pattern: not accepted (a waterfall exhausted, an escalation with no higher
 * tier), low confidence (retries exhausted), expired (a tier's deadline passed:
 * the previous tier's answer), rejected (the auditor said no).
 */
export const KnowStatus = Schema.Literal("accepted", "not_accepted", "low_confidence", "expired", "rejected")
export type KnowStatus = typeof KnowStatus.Type

/** What the orchestration did, in the KNOW. */
export const KnowOrchestration = Schema.Struct({
  pattern: Schema.Literal("single_shot", "verify", "waterfall", "retry_on_low_confidence", "escalate", "ensemble_with_audit"),
  status: KnowStatus,
  /** CALLs dispatched over the run. */
  calls: Schema.Number,
  tokens: Schema.Number,
  /** The stage, tier or attempt the answer came from. */
  stage: Schema.optional(Schema.Number),
  attempt: Schema.optional(Schema.Number),
  /** The budget ran out before the pattern was done. */
  budget_exhausted: Schema.optional(Schema.Boolean)
})
export type KnowOrchestration = typeof KnowOrchestration.Type

/**
 * The committed answer. Its body is of the answer shape's kind with the answer's
 * own keys (for core.json.v1, under `value`), as a submit's is, so a trigger can
 * test `body.kind == "core.classification.v1" && body.category == "research"`;
 * `_confidence`, `_rationale`, `_fold` and `_orchestration` describe it, and
 * `audit` carries an auditor's verdict.
 */
export const KnowBody = Schema.Struct(
  {
    kind: AnswerKind,
    _confidence: Schema.Number,
    _rationale: Schema.optional(Schema.String),
    _fold: FoldSummary,
    _orchestration: KnowOrchestration,
    audit: Schema.optional(AuditVerdict)
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)
export type KnowBody = typeof KnowBody.Type

export class Know extends Schema.Class<Know>("pagantic/Know")({
  id: RecordId,
  kind: Schema.Literal("KNOW"),
  parents: Parents,
  body: KnowBody
}) {}

const reservedKnowKeys = new Set(["kind", "_confidence", "_rationale", "_fold", "_orchestration", "audit"])

/** The KNOW body of `answer` (of `kind`): the answer's keys (or `value`) and the description. */
export const knowBody = (
  kind: AnswerKind,
  answer: unknown,
  described: {
    readonly fold: FoldSummary
    readonly orchestration: KnowOrchestration
    readonly audit?: AuditVerdict | undefined
  }
): KnowBody => {
  const out: Record<string, unknown> = {}
  if (kind === "core.json.v1" || !isObject(answer)) out.value = answer
  else {
    for (const key of Object.keys(answer)) {
      if (reservedKnowKeys.has(key)) continue
      Object.defineProperty(out, key, { value: answer[key], enumerable: true, writable: true, configurable: true })
    }
  }
  out.kind = kind
  out._confidence = described.fold.confidence
  if (described.fold.rationale !== undefined) out._rationale = described.fold.rationale
  out._fold = described.fold
  out._orchestration = described.orchestration
  if (described.audit !== undefined) out.audit = described.audit
  return out as KnowBody
}

/** Any record of a query's thread. */
export const QueryRecord = Schema.Union(Intend, Call, Do, Learn, Know)
export type QueryRecord = typeof QueryRecord.Type
