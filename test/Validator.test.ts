import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/TestClock"
import { isRetryable } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as ValidatorLayer from "../src/layers/RuleValidator.js"
import * as Validator from "../src/services/Validator.js"

const personSchema = JsonSchema.object({ name: JsonSchema.string(), age: JsonSchema.integer(), role: JsonSchema.enumOf(["admin", "user"]) })

describe("Validator", () => {
  it.effect("length: min and max in characters, with a reason when failing", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const rule = Validator.length({ min: 3, max: 5 })
      expect((yield* v.check("abcd", [rule])).ok).toBe(true)
      const short = yield* v.check("ab", [rule])
      expect(short.results[0]).toMatchObject({ rule: "length(3..5)", passed: false, reason: "2 characters, at least 3 required" })
      expect((yield* v.check("abcdef", [rule])).results[0]!.reason).toBe("6 characters, at most 5 allowed")
    }).pipe(Effect.provide(ValidatorLayer.layer())))

  it.effect("pattern: must match, or must not match; a global regex gives the same answer twice", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const citation = Validator.pattern(/\[\d+\]/g, { name: "cites a source" })
      expect((yield* v.check("see [1]", [citation])).ok).toBe(true)
      expect((yield* v.check("see [1]", [citation])).ok).toBe(true)
      expect((yield* v.check("no source", [citation])).failedRules).toEqual(["cites a source"])
      const noApology = Validator.pattern(/as an ai/i, { mustMatch: false, name: "no disclaimer" })
      expect((yield* v.check("As an AI, I cannot", [noApology])).results[0]).toMatchObject({ passed: false, reason: "matches /as an ai/" })
    }).pipe(Effect.provide(ValidatorLayer.layer())))

  it.effect("schema: parses JSON and checks the subset, naming paths; non-JSON fails", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const rule = Validator.schema(personSchema)
      expect((yield* v.check("{\"name\":\"Ada\",\"age\":36,\"role\":\"admin\"}", [rule])).ok).toBe(true)
      const bad = yield* v.check("{\"name\":\"Ada\",\"age\":36.5,\"role\":\"root\"}", [rule])
      expect(bad.ok).toBe(false)
      expect(bad.results[0]!.reason).toContain("$.age")
      expect(bad.results[0]!.reason).toContain("$.role")
      expect((yield* v.check("not json", [rule])).results[0]!.reason).toBe("$: not valid JSON")
      expect(ValidatorLayer.schemaViolations("{\"name\":\"Ada\",\"role\":\"user\"}", personSchema)).toEqual([
        "$.age: is missing"
      ])
    }).pipe(Effect.provide(ValidatorLayer.layer())))

  it.effect("custom: any Effect predicate, with or without a reason", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const noBannedWords = Validator.custom("no banned words", (out) =>
        Effect.as(Ref.update(seen, (s) => [...s, out]), out.includes("darn") ? { passed: false, reason: "says darn" } : true))
      const r = yield* v.check("oh darn", [noBannedWords])
      expect(r.results[0]).toMatchObject({ rule: "no banned words", passed: false, reason: "says darn" })
      expect(yield* Ref.get(seen)).toEqual(["oh darn"])
    }).pipe(Effect.provide(ValidatorLayer.layer())))

  it.effect("the pass rate over all rules becomes confidence with source \"validation\"", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const report = yield* v.check("hello")
      expect(report.results.map((r) => r.passed)).toEqual([true, true, false, true])
      expect(report.passed).toBe(3)
      expect(report.failed).toBe(1)
      expect(report.passRate).toBe(0.75)
      expect(report.confidence).toEqual({ value: 0.75, source: "validation" })
      expect((yield* v.check("x", [])).passRate).toBe(1)
    }).pipe(
      Effect.provide(
        ValidatorLayer.layer([
          Validator.length({ min: 1 }),
          Validator.pattern(/h/),
          Validator.pattern(/\d/, { name: "has a digit" }),
          Validator.custom("lowercase", (s) => Effect.succeed(s === s.toLowerCase()))
        ])
      )
    ))

  it.effect("validate: a failing report is VALIDATION_RULE_FAILED naming the failed rules; it is retryable", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const error = yield* Effect.flip(v.validate("hi"))
      expect(error._tag).toBe("ValidationFailure")
      expect(error.code).toBe("VALIDATION_RULE_FAILED")
      expect(error.failedRules).toEqual(["long enough", "has a digit"])
      expect(error.message).toContain("long enough (2 characters, at least 5 required)")
      expect(error.details).toMatchObject({ passRate: 0, passed: 0, failed: 2 })
      expect(isRetryable(error)).toBe(true)
      expect((yield* v.validate("hello 1")).ok).toBe(true)
    }).pipe(
      Effect.provide(
        ValidatorLayer.layer([Validator.length({ min: 5, name: "long enough" }), Validator.pattern(/\d/, { name: "has a digit" })])
      )
    ))

  it.effect("retryPolicy re-runs a failing validation at most twice, on the Clock", () =>
    Effect.gen(function* () {
      const v = yield* Validator.Validator
      const attempts = yield* Ref.make(0)
      const produce = Effect.flatMap(Ref.updateAndGet(attempts, (n) => n + 1), (n) => v.validate(n < 3 ? "no" : "yes!"))
      const fiber = yield* Effect.fork(Effect.retry(produce, { schedule: Validator.retryPolicy, while: isRetryable }))
      yield* TestClock.adjust("50 millis")
      expect(yield* Ref.get(attempts)).toBe(1)
      yield* TestClock.adjust("10 seconds")
      expect((yield* Fiber.join(fiber)).ok).toBe(true)
      expect(yield* Ref.get(attempts)).toBe(3)

      yield* Ref.set(attempts, -10)
      const exhausted = yield* Effect.fork(Effect.retry(produce, { schedule: Validator.retryPolicy, while: isRetryable }))
      yield* TestClock.adjust("10 seconds")
      const error = yield* Effect.flip(Fiber.join(exhausted))
      expect(error.code).toBe("VALIDATION_RULE_FAILED")
      expect(yield* Ref.get(attempts)).toBe(-7)
    }).pipe(Effect.provide(ValidatorLayer.layer([Validator.length({ min: 3 })]))))
})
