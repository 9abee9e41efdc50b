/**
 * Layer 0: the query wire (`infer.query.v1`).
 *
 * A query asks several responders (pattern functions, systems, LLMs, humans) the
 * same question and folds their answers into one. It names its input (inline text
 * or the record id of another query's answer), which responders may answer
 * (predicates by kind, each with an optional CEL expression over the candidate),
 * how the answers are folded, the shape an answer must have, and the orchestration
 * pattern around the fold (one of six, each with its few options).
 *
 * Clients send queries, so everything is bounded: string lengths, list sizes,
 * nesting (stages hold responders, nothing deeper) and the inline JSON Schema of
 * `core.json.v1`. Unknown fields are refused rather than ignored, so a misspelt
 * option is an error naming it, not a silent default. The CEL expressions travel
 * as text here; they are compiled and type-checked once, when the query is
 * checked (see the query program), never at run time.
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { ConfigurationFailure } from "./Failure.js"
import * as Gbnf from "./Gbnf.js"
import * as Issues from "./Issues.js"
import { JsonSchema } from "./JsonSchema.js"

// ---------------------------------------------------------------------------
// Bounds
// ---------------------------------------------------------------------------

/** The bounds every query is held to. */
export const limits = {
  /** Characters of `input.inline`. */
  maxInlineChars: 262_144,
  /** Characters of a CEL expression. */
  maxExpressionChars: 1_024,
  /** Characters of a name (capability, model, system, did, record id). */
  maxNameChars: 256,
  /** Responder predicates in one list (top level, a stage, a tier, the primaries). */
  maxResponders: 32,
  /** Stages of a waterfall, tiers of an escalation. */
  maxStages: 8,
  /** Candidates dispatched per round, and the quorum. */
  maxTopK: 64,
  /** Attempts of retry_on_low_confidence, the first included. */
  maxAttempts: 10,
  /** Classification labels. */
  maxLabels: 256,
  /** Seven days: the longest wait a query may ask for (a human's default SLA). */
  maxLatencySecs: 604_800,
  /** Nesting of the whole query (the inline JSON Schema included). */
  maxDepth: 64
} as const

// ---------------------------------------------------------------------------
// Small pieces
// ---------------------------------------------------------------------------

/**
 * The message of a length bound: "`prefix`, got N". Effect computes a refinement's
 * message even when the value failed the type below it (null, a number: its own
 * "expected string" is then shown), so the message reads the value only as text.
 */
const lengthMessage = (prefix: string) => (issue: { readonly actual: unknown }): string =>
  typeof issue.actual === "string" ? `${prefix}, got ${issue.actual.length.toLocaleString("en-US")}` : prefix

const Name = Schema.String.pipe(
  Schema.minLength(1, { message: () => "must not be empty" }),
  Schema.maxLength(limits.maxNameChars, { message: () => `must be at most ${limits.maxNameChars} characters` })
)

/** A CEL expression as text (compiled when the query is checked). */
export const Expression = Schema.String.pipe(
  Schema.minLength(1, { message: () => "an empty CEL expression" }),
  Schema.maxLength(limits.maxExpressionChars, {
    message: lengthMessage(`a CEL expression of at most ${limits.maxExpressionChars} characters`)
  })
).annotations({ identifier: "CelExpression" })

const Unit = Schema.Number.pipe(Schema.between(0, 1))

const bounded = <A, I>(item: Schema.Schema<A, I, never>, max: number, what: string) =>
  Schema.Array(item).pipe(
    Schema.minItems(1, { message: () => `at least one ${what}` }),
    Schema.maxItems(max, { message: () => `at most ${max} ${what}s` })
  )

// ---------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------

/**
 * The question: `inline` text, or `record_id`, the answer (KNOW) of another query
 * (how queries nest). Exactly one of the two.
 */
export const Input = Schema.Struct({
  inline: Schema.optional(
    Schema.String.pipe(
      Schema.maxLength(limits.maxInlineChars, {
        message: lengthMessage(`at most ${limits.maxInlineChars.toLocaleString("en-US")} characters`)
      })
    )
  ),
  record_id: Schema.optional(Name)
}).pipe(
  Schema.filter((input) =>
    (input.inline === undefined) === (input.record_id === undefined)
      ? "exactly one of inline and record_id"
      : undefined
  )
)
export type Input = typeof Input.Type

// ---------------------------------------------------------------------------
// Responder predicates
// ---------------------------------------------------------------------------

export const ResponderKind = Schema.Literal("pattern", "system", "llm", "actor")
export type ResponderKind = typeof ResponderKind.Type

const predicate = { expression: Schema.optional(Expression) }

/** A registered pure function serving `capability`. */
export const PatternPredicate = Schema.Struct({ kind: Schema.Literal("pattern"), capability: Name, ...predicate })
/** A system (an Effect handler), by name and/or capability; neither means any system. */
export const SystemPredicate = Schema.Struct({
  kind: Schema.Literal("system"),
  name: Schema.optional(Name),
  capability: Schema.optional(Name),
  ...predicate
})
/** An LLM by model name, or by `~alias` resolved through the alias map. */
export const LlmPredicate = Schema.Struct({ kind: Schema.Literal("llm"), model: Name, ...predicate })
/** A human, by decentralised identifier. */
export const ActorPredicate = Schema.Struct({ kind: Schema.Literal("actor"), did: Name, ...predicate })

export const ResponderPredicate = Schema.Union(PatternPredicate, SystemPredicate, LlmPredicate, ActorPredicate)
export type ResponderPredicate = typeof ResponderPredicate.Type

const Responders = bounded(ResponderPredicate, limits.maxResponders, "responder")

/** A stage of a waterfall or a tier of an escalation. */
export const Stage = Schema.Struct({ responders: Responders })
export type Stage = typeof Stage.Type

// ---------------------------------------------------------------------------
// Fold
// ---------------------------------------------------------------------------

/**
 * How two answers are compared: structural (canonical JSON, the default), text
 * (token-set Jaccard at `similarity_threshold`), semantic (a similarity supplied
 * by the application; asking for it without one is refused when the query is checked).
 */
export const Similarity = Schema.Literal("structural", "text", "semantic")
export type Similarity = typeof Similarity.Type

const grouping = {
  similarity: Schema.optional(Similarity),
  /** Two answers are similar at or above it (text and semantic). Default 0.8. */
  similarity_threshold: Schema.optional(Unit)
}

export const ConsensusFold = Schema.Struct({ function: Schema.Literal("consensus"), ...grouping })
export const BestOfFold = Schema.Struct({ function: Schema.Literal("best_of") })
export const WaterfallFirstFold = Schema.Struct({ function: Schema.Literal("waterfall_first") })
export const EnsembleWeightedFold = Schema.Struct({
  function: Schema.Literal("ensemble_weighted"),
  /** A CEL number over `response`; default 1 for every response. */
  weight_expression: Schema.optional(Expression),
  ...grouping
})
export const ExpressionFold = Schema.Struct({
  function: Schema.Literal("expression"),
  /** A CEL int over `responses`: the index of the chosen response. */
  expression: Expression
})

export const Fold = Schema.Union(ConsensusFold, BestOfFold, WaterfallFirstFold, EnsembleWeightedFold, ExpressionFold)
export type Fold = typeof Fold.Type
export type FoldFunction = Fold["function"]

// ---------------------------------------------------------------------------
// Answer shape
// ---------------------------------------------------------------------------

/** `{ category, confidence? }`; `labels`, when given, are the allowed categories. */
export const ClassificationShape = Schema.Struct({
  kind: Schema.Literal("core.classification.v1"),
  labels: Schema.optional(
    Schema.Array(Name).pipe(Schema.maxItems(limits.maxLabels, { message: () => `at most ${limits.maxLabels} labels` }))
  )
})
/** `{ summary }`. */
export const SummaryShape = Schema.Struct({ kind: Schema.Literal("core.summary.v1") })
/** `{ text }`. */
export const TextShape = Schema.Struct({ kind: Schema.Literal("core.text.v1") })
/** Any JSON value matching the inline `schema` (bounded in size and nesting). */
export const JsonShape = Schema.Struct({
  kind: Schema.Literal("core.json.v1"),
  schema: JsonSchema.pipe(
    Schema.filter((schema) => Either.match(Gbnf.checkSchema(schema), { onLeft: (problem) => problem, onRight: () => undefined }))
  )
})

export const AnswerShape = Schema.Union(ClassificationShape, SummaryShape, TextShape, JsonShape)
export type AnswerShape = typeof AnswerShape.Type
export type AnswerKind = AnswerShape["kind"]

// ---------------------------------------------------------------------------
// Orchestration
// ---------------------------------------------------------------------------

export const SingleShot = Schema.Struct({ pattern: Schema.Literal("single_shot") })

export const Verify = Schema.Struct({
  pattern: Schema.Literal("verify"),
  primary: Responders,
  verifier: ResponderPredicate,
  tiebreaker: ResponderPredicate,
  /** A number in [0, 1], or a CEL number over `responses` (the primary's and the verifier's). Default 0.85. */
  agreement_threshold: Schema.optional(Schema.Union(Unit, Expression))
})

export const Waterfall = Schema.Struct({
  pattern: Schema.Literal("waterfall"),
  stages: bounded(Stage, limits.maxStages, "stage"),
  /** A CEL bool over `fold`: the stage's fold is accepted. */
  accept_expression: Expression,
  /** All stages refused: commit the last fold marked not accepted (default) or fail. */
  on_exhausted: Schema.optional(Schema.Literal("commit_last", "fail"))
})

export const RetryOnLowConfidence = Schema.Struct({
  pattern: Schema.Literal("retry_on_low_confidence"),
  /** A CEL bool over `fold`: retry. */
  threshold_expression: Expression,
  /** Attempts, the first included. Default 3. */
  max_attempts: Schema.optional(
    Schema.Int.pipe(Schema.between(1, limits.maxAttempts, { message: () => `an integer in [1, ${limits.maxAttempts}]` }))
  ),
  /** The dial for the retries, in [0, 1]. */
  retry_dial: Schema.optional(Unit)
})

export const Escalate = Schema.Struct({
  pattern: Schema.Literal("escalate"),
  tiers: bounded(Stage, limits.maxStages, "tier"),
  /** A CEL bool over `fold`: go to the next tier. */
  escalation_expression: Expression,
  /** A tier's deadline passed: commit the previous tier's answer marked expired (default) or fail. */
  on_expired: Schema.optional(Schema.Literal("commit_previous", "fail"))
})

export const EnsembleWithAudit = Schema.Struct({
  pattern: Schema.Literal("ensemble_with_audit"),
  primary_responders: Responders,
  auditor: ResponderPredicate,
  /** A CEL bool over `audit` and `fold`: the auditor approved. */
  audit_expression: Expression
})

export const Orchestration = Schema.Union(SingleShot, Verify, Waterfall, RetryOnLowConfidence, Escalate, EnsembleWithAudit)
export type Orchestration = typeof Orchestration.Type
export type Pattern = Orchestration["pattern"]

// ---------------------------------------------------------------------------
// The query
// ---------------------------------------------------------------------------

/** What happens when answers conflict where one is required: the last one wins, or the run halts. */
export const ObligationResolution = Schema.Literal("last_writer_wins", "validation_error")
export type ObligationResolution = typeof ObligationResolution.Type

export const Budget = Schema.Struct({
  /** Tokens over every call of the run. */
  tokens: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  /** Calls (CALL records) over the run. */
  calls: Schema.optional(Schema.Int.pipe(Schema.positive()))
})
export type Budget = typeof Budget.Type

const Count = Schema.Int.pipe(
  Schema.between(1, limits.maxTopK, { message: () => `an integer in [1, ${limits.maxTopK}]` })
)

export const QueryKind = "infer.query.v1"

/** An `infer.query.v1` query as it travels. */
export const Query = Schema.Struct({
  kind: Schema.Literal(QueryKind),
  input: Input,
  /** The candidates (single_shot, retry_on_low_confidence); the other patterns name their own. */
  responders: Schema.optional(Responders),
  /** Default consensus. */
  fold: Schema.optional(Fold),
  answer_shape: AnswerShape,
  /** Default single_shot. */
  orchestration: Schema.optional(Orchestration),
  /** Candidates dispatched per round, best first. Default 3. */
  top_k: Schema.optional(Count),
  /** Valid answers needed to fold. Default 1. */
  min_quorum: Schema.optional(Count),
  /** The longest the query waits for its answers; default by responder kind. */
  max_latency_secs: Schema.optional(
    Schema.Number.pipe(
      Schema.greaterThan(0, { message: () => "a positive number of seconds" }),
      Schema.lessThanOrEqualTo(limits.maxLatencySecs, { message: () => `at most ${limits.maxLatencySecs} seconds (7 days)` })
    )
  ),
  /** Exploration in [0, 1] (for LLMs, sampling temperature). */
  dial: Schema.optional(Unit),
  budget: Schema.optional(Budget),
  obligation_resolution: Schema.optional(ObligationResolution)
})
export type Query = typeof Query.Type

const decodeEither = Schema.decodeUnknownEither(Query, { errors: "all", onExcessProperty: "error" })

/**
 * A query decoded from what a client sent. A wrong query is CONFIG_INVALID_REQUEST
 * whose message names each offending field (`details.issues`, one line each).
 */
export const decode = (input: unknown): Either.Either<Query, ConfigurationFailure> => {
  // decoding recurses (the JSON Schema is recursive): the nesting is checked first, without recursion
  if (depthOf(input, limits.maxDepth) > limits.maxDepth) {
    return Either.left(
      ConfigurationFailure.invalidRequest(`invalid query: the query is nested more than ${limits.maxDepth} levels deep`, {
        details: { issues: [`the query: nested more than ${limits.maxDepth} levels deep`] }
      })
    )
  }
  return Either.mapLeft(decodeEither(input), (error) => {
    const issues = Issues.describe(error, "an infer.query.v1 object", "the query")
    return ConfigurationFailure.invalidRequest(`invalid query: ${issues.join("; ")}`, { details: { issues } })
  })
}

/** The nesting depth of a JSON value, counted without recursion up to `max + 1`. */
const depthOf = (value: unknown, max: number): number => {
  let deepest = 0
  const stack: Array<{ readonly value: unknown; readonly depth: number }> = [{ value, depth: 0 }]
  while (stack.length > 0) {
    const top = stack.pop()!
    if (typeof top.value !== "object" || top.value === null) continue
    const depth = top.depth + 1
    if (depth > deepest) deepest = depth
    if (deepest > max) return deepest
    for (const child of Array.isArray(top.value) ? top.value : Object.values(top.value)) stack.push({ value: child, depth })
  }
  return deepest
}
