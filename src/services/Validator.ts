/**
 * Layer 7: validation and guardrails.
 *
 * A Validator checks an output against rules (length, pattern, a JSON-schema
 * subset, or any custom Effect predicate) and reports pass/fail per rule. The
 * pass rate is a quality signal: it becomes the response's confidence with source
 * "validation". `validate` turns a failing report into a ValidationFailure
 * (VALIDATION_RULE_FAILED) naming the failed rules; it is retryable, and
 * `retryPolicy` is the Schedule the loops re-run a step with (VALIDATE -> EXECUTE).
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

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

export class RuleResult extends Schema.Class<RuleResult>("RuleResult")({
  rule: Schema.String,
  passed: Schema.Boolean,
  reason: Schema.optional(Schema.String)
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
// Service
// ---------------------------------------------------------------------------

export interface Service {
  /** The rules used when a call gives none. */
  readonly rules: ReadonlyArray<Rule>
  /** Runs every rule and reports; never fails. */
  readonly check: (output: string, rules?: ReadonlyArray<Rule>) => Effect.Effect<ValidationReport>
  /** Runs every rule; any failed rule is a ValidationFailure (VALIDATION_RULE_FAILED) naming them. */
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
