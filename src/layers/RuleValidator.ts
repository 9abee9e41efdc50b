/**
 * The rule Validator.
 *
 * Every rule runs (no short-circuit) so that the report says all that is wrong.
 * Length counts characters; a pattern is tested against the whole output; a
 * schema rule parses the output as JSON and validates it with the same JSON-schema
 * subset validator the constraint layer uses, reporting each violation as
 * "path: rule"; a custom rule is any Effect predicate.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { ValidationFailure } from "../domain/Failure.js"
import { formatPath } from "../domain/Issues.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import { toEffectSchema } from "../domain/JsonSchema.js"
import type { CheckResult, Rule, Service } from "../services/Validator.js"
import { report, RuleResult, Validator } from "../services/Validator.js"

const parseJson = Schema.decodeUnknownEither(Schema.parseJson())

/** The violations of `text` against a JSON schema of the subset; empty when it conforms. */
export const schemaViolations = (text: string, schema: JsonSchema): ReadonlyArray<string> => {
  const json = parseJson(text)
  if (Either.isLeft(json)) return ["$: not valid JSON"]
  const decoded = Schema.decodeUnknownEither(toEffectSchema(schema), { errors: "all" })(json.right)
  if (Either.isRight(decoded)) return []
  return ParseResult.ArrayFormatter.formatErrorSync(decoded.left).map((i) => `${formatPath(i.path)}: ${i.message}`)
}

const fromCheck = (rule: string, result: CheckResult): RuleResult =>
  typeof result === "boolean"
    ? new RuleResult({ rule, passed: result })
    : new RuleResult({ rule, passed: result.passed, ...(result.reason === undefined ? {} : { reason: result.reason }) })

/** Runs one rule. */
export const runRule = (output: string, rule: Rule): Effect.Effect<RuleResult> => {
  switch (rule._tag) {
    case "Length": {
      const n = output.length
      if (rule.min !== undefined && n < rule.min) {
        return Effect.succeed(new RuleResult({ rule: rule.name, passed: false, reason: `${n} characters, at least ${rule.min} required` }))
      }
      if (rule.max !== undefined && n > rule.max) {
        return Effect.succeed(new RuleResult({ rule: rule.name, passed: false, reason: `${n} characters, at most ${rule.max} allowed` }))
      }
      return Effect.succeed(new RuleResult({ rule: rule.name, passed: true }))
    }
    case "Pattern": {
      // A fresh RegExp so that a global/sticky flag's lastIndex never leaks between calls.
      const matches = new RegExp(rule.pattern.source, rule.pattern.flags).test(output)
      const passed = matches === rule.mustMatch
      return Effect.succeed(
        passed
          ? new RuleResult({ rule: rule.name, passed })
          : new RuleResult({
            rule: rule.name,
            passed,
            reason: rule.mustMatch ? `does not match /${rule.pattern.source}/` : `matches /${rule.pattern.source}/`
          })
      )
    }
    case "Schema": {
      const violations = schemaViolations(output, rule.schema)
      return Effect.succeed(
        violations.length === 0
          ? new RuleResult({ rule: rule.name, passed: true })
          : new RuleResult({ rule: rule.name, passed: false, reason: violations.join("; ") })
      )
    }
    case "Custom":
      return Effect.map(rule.check(output), (result) => fromCheck(rule.name, result))
  }
}

/** A validator with default rules. */
export const make = (rules: ReadonlyArray<Rule> = []): Service => {
  const check = Effect.fn("Validator.check")(function* (output: string, given?: ReadonlyArray<Rule>) {
    const results = yield* Effect.forEach(given ?? rules, (rule) => runRule(output, rule))
    const r = report(results)
    yield* Effect.annotateCurrentSpan({ passed: r.passed, failed: r.failed })
    return r
  })
  const validate = Effect.fn("Validator.validate")(function* (output: string, given?: ReadonlyArray<Rule>) {
    const r = yield* check(output, given)
    if (r.ok) return r
    const failed = r.results.filter((x) => !x.passed)
    return yield* ValidationFailure.ruleFailed(
      `validation failed: ${failed.map((x) => x.reason === undefined ? x.rule : `${x.rule} (${x.reason})`).join(", ")}`,
      { failedRules: failed.map((x) => x.rule), details: { passRate: r.passRate, passed: r.passed, failed: r.failed } }
    )
  })
  return { rules, check, validate }
}

/** A Validator layer whose default rules are `rules`. */
export const layer = (rules: ReadonlyArray<Rule> = []): Layer.Layer<Validator> =>
  Layer.succeed(Validator, Validator.of(make(rules)))
