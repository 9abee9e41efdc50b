/**
 * What a CEL expression sees: the candidate responder, one response, a fold's
 * output and chosen answer, an auditor's verdict. Plain classes, registered as
 * CEL object types by the places that declare them.
 */
/** A candidate responder, as a predicate sees it. */
export class ResponderView {
  constructor(
    readonly id: string,
    readonly kind: string,
    readonly name: string,
    readonly capabilities: ReadonlyArray<string>,
    readonly model: string,
    readonly did: string,
    readonly description: string,
    readonly tags: ReadonlyArray<string>,
    /** `status`, `hours`, `typical_response_delay_s`, `last_seen_at` when known. */
    readonly availability: Readonly<Record<string, unknown>>,
    readonly metadata: Readonly<Record<string, unknown>>
  ) {}
}

/** One response, as a weight or a fold expression sees it. */
export class ResponseView {
  constructor(
    /** Position among the valid responses, in canonical order. */
    readonly index: bigint,
    readonly responder: string,
    readonly kind: string,
    readonly attempt: bigint,
    readonly stage: bigint,
    readonly record_id: string,
    /** The answer (the body without its `_` keys). */
    readonly answer: unknown,
    readonly confidence: number,
    readonly rationale: string
  ) {}
}

/** The answer a fold chose. */
export class AnswerView {
  constructor(
    readonly value: unknown,
    /** The fold's confidence in it. */
    readonly confidence: number,
    readonly rationale: string,
    readonly responder: string,
    readonly record_id: string
  ) {}
}

/** A fold's output, as a threshold sees it (`fold.answer.confidence >= 0.85`). */
export class FoldView {
  readonly function: string
  readonly answer: AnswerView
  /** Responses that agreed with (or chose) the answer. */
  readonly support: bigint
  readonly valid: bigint
  readonly total: bigint
  constructor(fields: {
    readonly function: string
    readonly answer: AnswerView
    readonly support: bigint
    readonly valid: bigint
    readonly total: bigint
  }) {
    this.function = fields.function
    this.answer = fields.answer
    this.support = fields.support
    this.valid = fields.valid
    this.total = fields.total
  }
}

/** An auditor's verdict (`audit.approved == true`). */
export class AuditView {
  constructor(
    readonly approved: boolean,
    readonly rationale: string,
    readonly verdict: unknown,
    readonly responder: string
  ) {}
}
