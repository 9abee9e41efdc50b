/**
 * Folds: combining the answers of several responders into one.
 *
 * A fold is a pure function of the responses. It never sees arrival order: the
 * responses are first put in canonical order (stage, responder index, attempt,
 * record id, then the answer itself), so the same records always fold to the same
 * answer, on a first run and on a replay. Failed responses and answers that do not
 * match the answer shape are kept apart (`rejected`) and never count as valid.
 *
 * - consensus: the largest group of equal answers wins (equal in canonical JSON,
 *   or similar text); ties go to the group seen first; confidence = group / valid.
 * - best_of: the most confident answer: its `_confidence`, else the confidence the
 *   shape carries (a classifier's), else its responder kind's default.
 * - waterfall_first: the first answer, by stage then canonical order, that is
 *   accepted (by the waterfall's accept expression, when there is one).
 * - ensemble_weighted: like consensus with a weight per response (a CEL
 *   `weight_expression`, default 1); confidence = winning weight / total weight.
 * - expression: a CEL `fold.expression` over the valid responses picks one by index.
 *
 * Similarity: structural (canonical JSON) by default; text (token-set Jaccard at a
 * threshold, default 0.8); semantic through a similarity the application provides.
 * Grouping by similarity is greedy in canonical order: an answer joins the first
 * group whose first answer is similar enough.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../domain/AnswerShape.js"
import { OrchestrationFailure } from "../domain/Failure.js"
import { canonicalJson } from "../domain/Json.js"
import type { FoldFunction, ResponderKind, Similarity } from "../domain/Query.js"
import * as Text from "../domain/Text.js"
import * as Cel from "./Cel.js"

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Canonical order and validity
// ---------------------------------------------------------------------------

interface Valid {
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

interface Sorted {
  readonly valid: ReadonlyArray<Valid>
  readonly rejected: ReadonlyArray<Rejected>
  readonly total: number
  /** Each response's place in canonical order. */
  readonly position: ReadonlyMap<Response, number>
}

const sortAndCheck = (responses: ReadonlyArray<Response>, shape: AnswerShape.Checker): Sorted => {
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

const describeResponse = (r: Response) => ({
  responder: r.responder,
  stage: r.stage,
  attempt: r.attempt,
  record_id: Text.excerpt(r.recordId, 80)
})

const noValid = (fn: FoldFunction, sorted: Sorted) =>
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

const output = (
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

// ---------------------------------------------------------------------------
// Similarity and grouping
// ---------------------------------------------------------------------------

/** Lowercased letter/digit runs, as a set. */
export const tokenSet = (text: string): ReadonlySet<string> => new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])

/** Token-set Jaccard similarity: |A ∩ B| / |A ∪ B| (1 for two empty texts). */
export const jaccard = (a: ReadonlySet<string>, b: ReadonlySet<string>): number => {
  if (a.size === 0 && b.size === 0) return 1
  let shared = 0
  for (const token of a) if (b.has(token)) shared += 1
  return shared / (a.size + b.size - shared)
}

interface Group {
  readonly members: Array<Valid>
  weight: number
}

const groupBy = (valid: ReadonlyArray<Valid>, options: Options): ReadonlyArray<Group> => {
  const similarity = options.similarity ?? "structural"
  if (similarity === "structural") {
    const groups = new Map<string, Group>()
    for (const v of valid) {
      const group = groups.get(v.key)
      if (group === undefined) groups.set(v.key, { members: [v], weight: 0 })
      else group.members.push(v)
    }
    return Array.from(groups.values())
  }
  const threshold = options.threshold ?? defaultSimilarityThreshold
  const shape = options.shape ?? AnswerShape.anyAnswer
  const groups: Array<Group & { readonly representative: unknown }> = []
  if (similarity === "text") {
    const tokens = valid.map((v) => tokenSet(shape.text(v.answer)))
    const reps: Array<ReadonlySet<string>> = []
    valid.forEach((v, i) => {
      const at = reps.findIndex((rep) => jaccard(rep, tokens[i]!) >= threshold)
      if (at === -1) {
        reps.push(tokens[i]!)
        groups.push({ members: [v], weight: 0, representative: v.answer })
      } else groups[at]!.members.push(v)
    })
    return groups
  }
  const semantic = options.semantic
  for (const v of valid) {
    const group = groups.find((g) => semantic !== undefined && semantic(g.representative, v.answer) >= threshold)
    if (group === undefined) groups.push({ members: [v], weight: 0, representative: v.answer })
    else group.members.push(v)
  }
  return groups
}

const members = (g: Group): ReadonlyArray<Response> => g.members.map((m) => m.response)

/**
 * How alike two answers are, in [0, 1], by the options' similarity: structural
 * is 1 for equal canonical JSON and 0 otherwise; text is token-set Jaccard of the
 * answers' text; semantic is the application's. What verify's agreement is.
 */
export const similarity = (a: unknown, b: unknown, options: Options = {}): Either.Either<number, OrchestrationFailure> => {
  switch (options.similarity ?? "structural") {
    case "structural":
      return Either.right(canonicalJson(a) === canonicalJson(b) ? 1 : 0)
    case "text": {
      const shape = options.shape ?? AnswerShape.anyAnswer
      return Either.right(jaccard(tokenSet(shape.text(a)), tokenSet(shape.text(b))))
    }
    case "semantic":
      return options.semantic === undefined ? Either.left(noSemantic("consensus")) : Either.right(options.semantic(a, b))
  }
}

// ---------------------------------------------------------------------------
// The five folds
// ---------------------------------------------------------------------------

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

const noSemantic = (fn: FoldFunction) =>
  OrchestrationFailure.stepMismatch(`${fn} fold: semantic similarity was asked for but none is provided`, {
    details: { fold: fn, similarity: "semantic" }
  })

/** The most confident answer; ties to the earliest. */
export const bestOf = (responses: ReadonlyArray<Response>, options: Options = {}): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  if (sorted.valid.length === 0) return Either.left(noValid("best_of", sorted))
  let best = sorted.valid[0]!
  let bestConfidence = confidenceOf(best.body, best.answer, best.response.kind, options)
  for (const v of sorted.valid) {
    const c = confidenceOf(v.body, v.answer, v.response.kind, options)
    if (c > bestConfidence) {
      best = v
      bestConfidence = c
    }
  }
  return Either.right(output("best_of", sorted, best, bestConfidence, [best.response], []))
}

/** The first accepted answer in stage, then canonical, order. */
export const waterfallFirst = (
  responses: ReadonlyArray<Response>,
  options: Options = {}
): Either.Either<Output, OrchestrationFailure> => {
  const sorted = sortAndCheck(responses, options.shape ?? AnswerShape.anyAnswer)
  const refused: Array<Rejected> = []
  const all = () =>
    [...sorted.rejected, ...refused].sort((a, b) => sorted.position.get(a.response)! - sorted.position.get(b.response)!)
  for (const v of sorted.valid) {
    const candidate = output("waterfall_first", sorted, v, confidenceOf(v.body, v.answer, v.response.kind, options), [v.response], [])
    if (options.accept === undefined) return Either.right(candidate)
    const accepted = options.accept(candidate)
    if (Either.isLeft(accepted)) return Either.left(accepted.left)
    if (accepted.right) return Either.right({ ...candidate, rejected: all() })
    refused.push({ response: v.response, problem: "not accepted" })
  }
  return Either.left(noValid("waterfall_first", { ...sorted, rejected: all() }))
}

/** The views of the valid responses, as CEL sees them. */
const views = (valid: ReadonlyArray<Valid>, options: Options): ReadonlyArray<Cel.ResponseView> =>
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

/** A fold chosen by name with its options: what a checked query carries. */
export interface Spec {
  readonly function: FoldFunction
  readonly options: Options
}

/** Runs the fold a spec names. */
export const run = (spec: Spec, responses: ReadonlyArray<Response>): Either.Either<Output, OrchestrationFailure> => {
  switch (spec.function) {
    case "consensus":
      return consensus(responses, spec.options)
    case "best_of":
      return bestOf(responses, spec.options)
    case "waterfall_first":
      return waterfallFirst(responses, spec.options)
    case "ensemble_weighted":
      return ensembleWeighted(responses, spec.options)
    case "expression":
      return expression(responses, spec.options)
  }
}

/** A fold's output as CEL thresholds see it (`fold.answer.confidence`). */
export const view = (out: Output): Cel.FoldView =>
  new Cel.FoldView({
    function: out.function,
    answer: new Cel.AnswerView(out.answer ?? null, out.confidence, out.rationale ?? "", out.chosen.responder, out.chosen.recordId),
    support: BigInt(out.support.length),
    valid: BigInt(out.valid),
    total: BigInt(out.total)
  })

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
