/**
 * Layer 7: validation and guardrails.
 *
 * A Validator checks an output against rules and reports pass/fail per rule.
 * Two kinds, kept apart as the failure taxonomy keeps them: rule checks (length,
 * pattern, a JSON-schema subset, any custom Effect predicate) decide from the text
 * alone; semantic checks are judged by a model (does the answer follow from the
 * context? does it contradict itself?), asked through the Engine for a verdict in a
 * fixed JSON shape. The pass rate is a quality signal: it becomes the response's
 * confidence with source "validation". `validate` turns a failing report into a
 * ValidationFailure naming the failed rules: VALIDATION_RULE_FAILED when a rule
 * check failed, VALIDATION_SEMANTIC_FAILED when only semantic checks did. Both are
 * retryable, and `retryPolicy` is the Schedule the loops re-run a step with
 * (VALIDATE -> EXECUTE).
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { ValidationFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import * as RetryPolicy from "./RetryPolicy.js"

// ---------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------

/** The outcome of a custom check: pass, or fail with a reason. */
export type CheckResult = boolean | { readonly passed: boolean; readonly reason?: string | undefined }

export type Rule =
  | {
    readonly _tag: "Length"
    readonly name: string
    readonly min?: number | undefined
    readonly max?: number | undefined
  }
  | { readonly _tag: "Pattern"; readonly name: string; readonly pattern: RegExp; readonly mustMatch: boolean }
  | { readonly _tag: "Schema"; readonly name: string; readonly schema: JsonSchema }
  | { readonly _tag: "Custom"; readonly name: string; readonly check: (output: string) => Effect.Effect<CheckResult> }
  | {
    readonly _tag: "Semantic"
    readonly name: string
    /** What the judge decides, as a yes/no question or a statement about the output. */
    readonly criterion: string
    /** What the output is judged against (retrieved passages, the question, the source text). */
    readonly context?: string | undefined
  }

/** The output's length (in characters) lies within [min, max]. */
export const length = (options: {
  readonly min?: number
  readonly max?: number
  readonly name?: string
}): Rule => ({
  _tag: "Length",
  name: options.name ?? `length(${options.min ?? 0}..${options.max ?? "inf"})`,
  min: options.min,
  max: options.max
})

/** The output matches `pattern` (or, with `mustMatch: false`, does not). */
export const pattern = (
  regex: RegExp,
  options: { readonly name?: string; readonly mustMatch?: boolean } = {}
): Rule => ({
  _tag: "Pattern",
  name: options.name ?? `${options.mustMatch === false ? "not " : ""}pattern(${regex.source})`,
  pattern: regex,
  mustMatch: options.mustMatch ?? true
})

/** The output is JSON that follows `schema` (pagantic's JSON-schema subset). */
export const schema = (jsonSchema: JsonSchema, options: { readonly name?: string } = {}): Rule => ({
  _tag: "Schema",
  name: options.name ?? "schema",
  schema: jsonSchema
})

/** Any effectful predicate; it cannot fail (a check that cannot decide should return a reason). */
export const custom = (name: string, check: (output: string) => Effect.Effect<CheckResult>): Rule => ({
  _tag: "Custom",
  name,
  check
})

/**
 * A model-judged rule: the Engine is asked whether the output meets `criterion`
 * (given `context`, when there is one) and answers `{"verdict":"pass"|"fail","reason":...}`.
 * Needs a validator with a judge (`RuleValidator.layerJudged`). An output the judge
 * cannot decide on (the engine failed, or its reply is not a verdict) fails the rule:
 * a guardrail fails closed.
 */
export const semantic = (
  criterion: string,
  options: { readonly name?: string | undefined; readonly context?: string | undefined } = {}
): Rule => ({
  _tag: "Semantic",
  name: options.name ?? `semantic(${criterion})`,
  criterion,
  context: options.context
})

/** A semantic check that the output follows from the given context and adds nothing to it. */
export const followsFromContext = (context: string, options: { readonly name?: string | undefined } = {}): Rule =>
  semantic("Every claim in the output follows from the context; it adds nothing the context does not say.", {
    name: options.name ?? "follows from the context",
    context
  })

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

export class RuleResult extends Schema.Class<RuleResult>("RuleResult")({
  rule: Schema.String,
  passed: Schema.Boolean,
  reason: Schema.optional(Schema.String),
  /** True for a model-judged (semantic) rule. */
  semantic: Schema.optional(Schema.Boolean)
}) {}

/** Pass/fail per rule, and the pass rate as a confidence with source "validation". */
export class ValidationReport extends Schema.Class<ValidationReport>("ValidationReport")({
  results: Schema.Array(RuleResult),
  passed: Schema.NonNegativeInt,
  failed: Schema.NonNegativeInt,
  /** passed / total; 1 when there are no rules. */
  passRate: Schema.Number.pipe(Schema.between(0, 1)),
  confidenceSource: Schema.Literal("validation")
}) {
  get ok(): boolean {
    return this.failed === 0
  }
  get failedRules(): ReadonlyArray<string> {
    return this.results.filter((r) => !r.passed).map((r) => r.rule)
  }
  /** Whether every failed rule is a semantic one (the failure is then VALIDATION_SEMANTIC_FAILED). */
  get semanticOnly(): boolean {
    return this.failed > 0 && this.results.every((r) => r.passed || r.semantic === true)
  }
  /** The confidence this report gives the output. */
  get confidence(): { readonly value: number; readonly source: "validation" } {
    return { value: this.passRate, source: "validation" }
  }
}

/** Builds a report from per-rule results. */
export const report = (results: ReadonlyArray<RuleResult>): ValidationReport => {
  const passed = results.filter((r) => r.passed).length
  return new ValidationReport({
    results,
    passed,
    failed: results.length - passed,
    passRate: results.length === 0 ? 1 : passed / results.length,
    confidenceSource: "validation"
  })
}

// ---------------------------------------------------------------------------
// Judge
// ---------------------------------------------------------------------------

/** A judge's answer to one semantic rule. */
export class Verdict extends Schema.Class<Verdict>("Verdict")({
  verdict: Schema.Literal("pass", "fail"),
  reason: Schema.String
}) {}

/** The JSON schema a judge's reply is constrained by: Verdict's. */
export const verdictSchema: JsonSchema = {
  type: "object",
  properties: {
    verdict: { type: "string", enum: ["pass", "fail"] },
    reason: { type: "string" }
  },
  required: ["verdict", "reason"]
}

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------

export interface Service {
  /** The rules used when a call gives none. */
  readonly rules: ReadonlyArray<Rule>
  /** Runs every rule and reports; never fails. */
  readonly check: (output: string, rules?: ReadonlyArray<Rule>) => Effect.Effect<ValidationReport>
  /**
   * Runs every rule; any failed rule is a ValidationFailure naming them:
   * VALIDATION_RULE_FAILED, or VALIDATION_SEMANTIC_FAILED when only semantic rules failed.
   */
  readonly validate: (
    output: string,
    rules?: ReadonlyArray<Rule>
  ) => Effect.Effect<ValidationReport, ValidationFailure>
}

/** Checks outputs against rules. */
export class Validator extends Context.Tag("pagantic/Validator")<Validator, Service>() {}

/**
 * How a failed validation is retried: exponential from 100ms with jitter, at
 * most 2 retries (3 attempts). Use with `Effect.retry({ schedule, while: isRetryable })`.
 */
export const retryPolicy = RetryPolicy.validation
