/**
 * What a fold takes and gives: the responses (an answer or a failure, with the
 * coordinates that order them), the options, and the output.
 */
import type * as Either from "effect/Either"
import type * as AnswerShape from "../../domain/AnswerShape.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import type { FoldFunction, ResponderKind, Similarity } from "../../domain/Query.js"
import type * as Cel from "../Cel.js"

/** What a responder sent back: a body, or a failure (a failed slot). */
export type Outcome =
  | { readonly _tag: "Answered"; readonly body: unknown }
  | { readonly _tag: "Failed"; readonly problem: string }

/** One response to fold, with the coordinates that order it. */
export interface Response {
  /** The responder's id. */
  readonly responder: string
  /** The responder's position in the query's candidate list. */
  readonly responderIndex: number
  readonly kind: ResponderKind
  /** The attempt (retry_on_low_confidence), from 1. */
  readonly attempt: number
  /** The stage or tier (waterfall, escalate), from 0. */
  readonly stage: number
  /** The id of the record (DO) that carries the response. */
  readonly recordId: string
  readonly outcome: Outcome
}

/** A semantic similarity in [0, 1] between two answers, supplied by the application. */
export type SemanticSimilarity = (a: unknown, b: unknown) => number

/** Confidence of an answer that states none, by responder kind. */
export const defaultKindConfidence: Readonly<Record<ResponderKind, number>> = {
  pattern: 0.5,
  system: 0.8,
  llm: 0.6,
  actor: 0.9
}

export const defaultSimilarityThreshold = 0.8

/** What a fold needs beyond the responses. */
export interface Options {
  /** The answer shape's checker; default: any answer is valid. */
  readonly shape?: AnswerShape.Checker | undefined
  /** Default structural. */
  readonly similarity?: Similarity | undefined
  /** For text and semantic similarity. Default 0.8. */
  readonly threshold?: number | undefined
  /** Required when `similarity` is semantic. */
  readonly semantic?: SemanticSimilarity | undefined
  /** ensemble_weighted's weight; default 1 for every response. */
  readonly weight?: Cel.Compiled<"weight"> | undefined
  /** The expression fold's choice (required for it). */
  readonly choice?: Cel.Compiled<"choice"> | undefined
  /** waterfall_first's acceptance of one candidate answer; default: every valid answer is accepted. */
  readonly accept?: ((candidate: Output) => Either.Either<boolean, OrchestrationFailure>) | undefined
  /** Overrides of `defaultKindConfidence`. */
  readonly kindConfidence?: Partial<Record<ResponderKind, number>> | undefined
}

/** A response that does not count, and why. */
export interface Rejected {
  readonly response: Response
  readonly problem: string
}

/** A fold's answer. */
export interface Output {
  readonly function: FoldFunction
  /** The chosen answer (the body without its `_` keys). */
  readonly answer: unknown
  /** The chosen body as the responder sent it. */
  readonly body: unknown
  /** The fold's confidence in the answer, in [0, 1]. */
  readonly confidence: number
  readonly rationale?: string | undefined
  /** The response the answer is taken from (the earliest of its group). */
  readonly chosen: Response
  /** The responses that agree with (or are) the answer, in canonical order. */
  readonly support: ReadonlyArray<Response>
  /** For consensus and ensemble_weighted: every group, in order of first appearance. */
  readonly groups: ReadonlyArray<ReadonlyArray<Response>>
  readonly valid: number
  readonly total: number
  readonly rejected: ReadonlyArray<Rejected>
}

/** What `answered` and `failed` take besides the outcome. */
type SlotFields = Omit<Response, "outcome" | "attempt" | "stage" | "kind"> & {
  readonly kind?: ResponderKind | undefined
  readonly attempt?: number | undefined
  readonly stage?: number | undefined
}

/** A response for a slot with `outcome`, `kind` defaulting to llm, `attempt` to 1, `stage` to 0. */
const slot = (fields: SlotFields, outcome: Outcome): Response => ({
  responder: fields.responder,
  responderIndex: fields.responderIndex,
  kind: fields.kind ?? "llm",
  attempt: fields.attempt ?? 1,
  stage: fields.stage ?? 0,
  recordId: fields.recordId,
  outcome
})

/** A response with an answer. */
export const answered = (fields: SlotFields & { readonly body: unknown }): Response =>
  slot(fields, { _tag: "Answered", body: fields.body })

/** A failed slot. */
export const failed = (fields: SlotFields & { readonly problem: string }): Response =>
  slot(fields, { _tag: "Failed", problem: fields.problem })
