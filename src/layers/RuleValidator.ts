/**
 * The rule Validator.
 *
 * Every rule runs (no short-circuit) so that the report says all that is wrong.
 * Length counts characters; a pattern is tested against the whole output; a
 * schema rule parses the output as JSON and validates it with the same JSON-schema
 * subset validator the constraint layer uses, reporting each violation as
 * "path: rule"; a custom rule is any Effect predicate. A semantic rule is judged by
 * the Engine (`layerJudged`): one request per rule, at temperature 0, constrained by
 * the verdict's JSON schema and decoded as a Verdict; an engine that still fails
 * after its retries, or a reply that is not a verdict, fails the rule with that
 * reason (fail closed). The judge's calls follow the request they are made in
 * (`Engine.inRequest`): its hints, its token usage.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Schedule from "effect/Schedule"
import type { InferenceFailure } from "../domain/Failure.js"
import { ValidationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import { formatPath } from "../domain/Issues.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import { toEffectSchema } from "../domain/JsonSchema.js"
import { Engine, InferenceRequest } from "../services/Engine.js"
import * as EngineService from "../services/Engine.js"
import * as RetryPolicy from "../services/RetryPolicy.js"
import type { CheckResult, Rule, Service } from "../services/Validator.js"
import { report, RuleResult, Validator, Verdict, verdictSchema } from "../services/Validator.js"

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

// ---------------------------------------------------------------------------
// Judge
// ---------------------------------------------------------------------------

/** A semantic rule. */
export type SemanticRule = Extract<Rule, { readonly _tag: "Semantic" }>

/** Decides one semantic rule for one output; never fails (an undecided rule fails). */
export type Judge = (output: string, rule: SemanticRule) => Effect.Effect<RuleResult>

/** What the judge is told before each rule. */
export const judgeInstruction =
  "You check another model's output against one criterion. Read the context (when given) and the output, decide " +
  "whether the output meets the criterion, and answer only with JSON: " +
  '{"verdict": "pass" or "fail", "reason": one short sentence}.'

/** The request that asks the judge about one output. */
export const judgeRequest = (output: string, rule: SemanticRule, options: JudgeOptions = {}): InferenceRequest =>
  new InferenceRequest({
    messages: [
      Message.system(judgeInstruction),
      Message.user(
        [
          `Criterion: ${rule.criterion}`,
          ...(rule.context === undefined ? [] : [`Context:\n${rule.context}`]),
          `Output:\n${output}`
        ].join("\n\n")
      )
    ],
    schema: verdictSchema,
    temperature: 0,
    maxTokens: options.maxTokens ?? 256
  })

export interface JudgeOptions {
  /** Tokens for the verdict. Default 256. */
  readonly maxTokens?: number | undefined
  /** When retryable engine failures are retried. Default `RetryPolicy.inference`. */
  readonly retry?: Schedule.Schedule<unknown, InferenceFailure> | undefined
}

const decodeVerdict = Schema.decodeUnknownEither(Schema.parseJson(Verdict))

/**
 * A judge that asks `engine`. Its calls follow the request they are made in
 * (`Engine.inRequest`): they carry its hints where the judge sets none, and count
 * in its token usage.
 */
export const judge = (engine: EngineService.Service, options: JudgeOptions = {}): Judge => {
  const inRequest = EngineService.inRequest(engine)
  return Effect.fn("Validator.judge")(function* (output: string, rule: SemanticRule) {
    const answered = yield* Effect.either(
      Effect.retry(inRequest.infer(judgeRequest(output, rule, options)), {
        schedule: options.retry ?? RetryPolicy.inference,
        while: (f: InferenceFailure) => f.retryable
      })
    )
    const fields = { rule: rule.name, semantic: true }
    if (Either.isLeft(answered)) {
      const f = answered.left
      return new RuleResult({ ...fields, passed: false, reason: `the judge could not answer (${f.code}: ${f.message})` })
    }
    const verdict = decodeVerdict(answered.right.content.trim())
    if (Either.isLeft(verdict)) {
      return new RuleResult({ ...fields, passed: false, reason: `the judge's reply is not a verdict: ${JSON.stringify(answered.right.content.slice(0, 200))}` })
    }
    yield* Effect.annotateCurrentSpan({ "pagantic.validator.verdict": verdict.right.verdict })
    return new RuleResult({ ...fields, passed: verdict.right.verdict === "pass", reason: verdict.right.reason })
  })
}

const noJudge: Judge = (_output, rule) =>
  Effect.succeed(
    new RuleResult({
      rule: rule.name,
      semantic: true,
      passed: false,
      reason: "no judge: a semantic rule needs a validator with an Engine (RuleValidator.layerJudged)"
    })
  )

// ---------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------

/** Runs one rule; a semantic rule asks `judge`. */
export const runRule = (output: string, rule: Rule, judge: Judge = noJudge): Effect.Effect<RuleResult> => {
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
    case "Semantic":
      return judge(output, rule)
  }
}

/** A validator with default rules; semantic rules are decided by `options.judge`. */
export const make = (rules: ReadonlyArray<Rule> = [], options: { readonly judge?: Judge | undefined } = {}): Service => {
  const check = Effect.fn("Validator.check")(function* (output: string, given?: ReadonlyArray<Rule>) {
    const results = yield* Effect.forEach(given ?? rules, (rule) => runRule(output, rule, options.judge))
    const r = report(results)
    yield* Effect.annotateCurrentSpan({ passed: r.passed, failed: r.failed })
    return r
  })
  const validate = Effect.fn("Validator.validate")(function* (output: string, given?: ReadonlyArray<Rule>) {
    const r = yield* check(output, given)
    if (r.ok) return r
    const failed = r.results.filter((x) => !x.passed)
    const named = failed.map((x) => x.reason === undefined ? x.rule : `${x.rule} (${x.reason})`).join(", ")
    const fields = { failedRules: failed.map((x) => x.rule), details: { passRate: r.passRate, passed: r.passed, failed: r.failed } }
    return yield* r.semanticOnly
      ? ValidationFailure.semanticFailed(`semantic validation failed: ${named}`, fields)
      : ValidationFailure.ruleFailed(`validation failed: ${named}`, fields)
  })
  return { rules, check, validate }
}

/** A Validator layer whose default rules are `rules`; semantic rules fail for want of a judge. */
export const layer = (rules: ReadonlyArray<Rule> = []): Layer.Layer<Validator> =>
  Layer.succeed(Validator, Validator.of(make(rules)))

/** A Validator layer that judges semantic rules with the Engine in context. */
export const layerJudged = (rules: ReadonlyArray<Rule> = [], options: JudgeOptions = {}): Layer.Layer<Validator, never, Engine> =>
  Layer.effect(Validator, Effect.map(Engine, (engine) => Validator.of(make(rules, { judge: judge(engine, options) }))))
