/**
 * The canonical order of responses and their validity: what every fold starts
 * from, so the same records always fold to the same answer whatever order they
 * arrived in; and the pieces every fold shares (confidence, the output, the
 * failures when nothing is valid, the responses as CEL sees them).
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import { canonicalJson } from "../../domain/Json.js"
import type { FoldFunction, ResponderKind } from "../../domain/Query.js"
import * as Text from "../../domain/Text.js"
import * as Cel from "../Cel.js"
import type { Options, Output, Rejected, Response } from "./Response.js"
import { defaultKindConfidence } from "./Response.js"

export interface Valid {
  readonly response: Response
  readonly body: unknown
  readonly answer: unknown
  readonly key: string
}

const compareStrings = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

const bodyKey = (r: Response) => (r.outcome._tag === "Answered" ? `a:${canonicalJson(r.outcome.body)}` : `f:${r.outcome.problem}`)

/** Responses in canonical order: stage, responder index, attempt, record id, then content. */
export const canonicalOrder = (responses: ReadonlyArray<Response>): ReadonlyArray<Response> => {
  const keyed = responses.map((response) => ({ response, key: undefined as string | undefined }))
  const keyOf = (k: { response: Response; key: string | undefined }) => (k.key ??= bodyKey(k.response))
  return keyed
    .sort((x, y) => {
      const a = x.response
      const b = y.response
      return a.stage - b.stage || a.responderIndex - b.responderIndex || a.attempt - b.attempt ||
        compareStrings(a.recordId, b.recordId) || compareStrings(keyOf(x), keyOf(y))
    })
    .map((k) => k.response)
}

export interface Sorted {
  readonly valid: ReadonlyArray<Valid>
  readonly rejected: ReadonlyArray<Rejected>
  readonly total: number
  /** Each response's place in canonical order. */
  readonly position: ReadonlyMap<Response, number>
}

export const sortAndCheck = (responses: ReadonlyArray<Response>, shape: AnswerShape.Checker): Sorted => {
  const valid: Array<Valid> = []
  const rejected: Array<Rejected> = []
  const ordered = canonicalOrder(responses)
  for (const response of ordered) {
    if (response.outcome._tag === "Failed") {
      rejected.push({ response, problem: response.outcome.problem })
      continue
    }
    const body = response.outcome.body
    const checked = shape.check(AnswerShape.answerOf(body))
    if (Either.isLeft(checked)) rejected.push({ response, problem: checked.left })
    else valid.push({ response, body, answer: checked.right, key: canonicalJson(checked.right) })
  }
  return { valid, rejected, total: responses.length, position: new Map(ordered.map((r, i) => [r, i])) }
}

export const describeResponse = (r: Response) => ({
  responder: r.responder,
  stage: r.stage,
  attempt: r.attempt,
  record_id: Text.excerpt(r.recordId, 80)
})

export const noValid = (fn: FoldFunction, sorted: Sorted) =>
  OrchestrationFailure.noConsensus(
    `${fn} fold: no valid answer among ${sorted.total} response${sorted.total === 1 ? "" : "s"}`,
    {
      details: {
        fold: fn,
        total: sorted.total,
        rejected: sorted.rejected.slice(0, 16).map((r) => ({ ...describeResponse(r.response), problem: Text.excerpt(r.problem, 160) }))
      }
    }
  )

/** The confidence of one answer: `_confidence`, else the shape's, else the responder kind's default. */
export const confidenceOf = (
  body: unknown,
  answer: unknown,
  kind: ResponderKind,
  options: Options = {}
): number =>
  AnswerShape.statedConfidence(body) ??
    (options.shape ?? AnswerShape.anyAnswer).confidence(answer) ??
    options.kindConfidence?.[kind] ?? defaultKindConfidence[kind]

export const output = (
  fn: FoldFunction,
  sorted: Sorted,
  chosen: Valid,
  confidence: number,
  support: ReadonlyArray<Response>,
  groups: ReadonlyArray<ReadonlyArray<Response>>
): Output => ({
  function: fn,
  answer: chosen.answer,
  body: chosen.body,
  confidence,
  rationale: AnswerShape.rationaleOf(chosen.body),
  chosen: chosen.response,
  support,
  groups,
  valid: sorted.valid.length,
  total: sorted.total,
  rejected: sorted.rejected
})

export const noSemantic = (fn: FoldFunction) =>
  OrchestrationFailure.stepMismatch(`${fn} fold: semantic similarity was asked for but none is provided`, {
    details: { fold: fn, similarity: "semantic" }
  })

/** The views of the valid responses, as CEL sees them. */
export const views = (valid: ReadonlyArray<Valid>, options: Options): ReadonlyArray<Cel.ResponseView> =>
  valid.map((v, i) =>
    new Cel.ResponseView(
      BigInt(i),
      v.response.responder,
      v.response.kind,
      BigInt(v.response.attempt),
      BigInt(v.response.stage),
      v.response.recordId,
      v.answer ?? null,
      confidenceOf(v.body, v.answer, v.response.kind, options),
      AnswerShape.rationaleOf(v.body) ?? ""
    )
  )
