import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fc from "fast-check"
import type { ConstraintFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import { Constraint } from "../src/services/Constraint.js"

const run = <A, E>(effect: Effect.Effect<A, E, Constraint>) => Effect.provide(effect, ConstraintLive.layer)

const sentiment = JsonSchema.object({
  sentiment: JsonSchema.enumOf(["positive", "negative", "neutral"]),
  confidence: JsonSchema.number()
})

const failureOf = <A>(effect: Effect.Effect<A, ConstraintFailure, Constraint>) =>
  run(Effect.flip(effect))

describe("Constraint.repair", () => {
  it.effect("returns valid JSON unchanged", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const text = ' { "a" : [1, 2] } '
        expect(yield* c.repair(text)).toEqual({ text, repaired: false })
      })
    ))

  it.effect("repairs truncated JSON, single quotes and code fences", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const truncated = yield* c.repair('{"a": [1, 2')
        expect(truncated.repaired).toBe(true)
        expect(JSON.parse(truncated.text)).toEqual({ a: [1, 2] })
        expect(JSON.parse((yield* c.repair("{'a': 'b',}")).text)).toEqual({ a: "b" })
        expect(JSON.parse((yield* c.repair('```json\n{"a": 1}\n```')).text)).toEqual({ a: 1 })
      })
    ))

  it.effect("fails with CONSTRAINT_JSON_INVALID and the raw text when repair cannot help", () =>
    Effect.gen(function* () {
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.repair("")))
      expect(failure.code).toBe("CONSTRAINT_JSON_INVALID")
      expect(failure.raw).toBe("")
      expect(failure.violations.some((v) => v.includes("repair failed"))).toBe(true)
    }))

  it("property: never dies, fails only with CONSTRAINT_JSON_INVALID, and leaves valid JSON unchanged", () => {
    const c = Effect.runSync(ConstraintLive.make)
    let failed = 0
    let repaired = 0
    fc.assert(
      fc.property(
        fc.oneof(fc.string(), fc.stringOf(fc.constantFrom("{", "}", "[", "]", '"', ":", ",", "a", "1", " ", "t", "\\", "`"))),
        (text) => {
          const exit = Effect.runSyncExit(c.repair(text))
          // a defect would be a Die: only a success or the typed failure are allowed
          if (Exit.isSuccess(exit)) {
            repaired++
            expect(() => JSON.parse(exit.value.text)).not.toThrow()
          } else {
            failed++
            const failure = Cause.failureOption(exit.cause)
            expect(Option.map(failure, (f) => f.code)).toEqual(Option.some("CONSTRAINT_JSON_INVALID"))
          }
        }
      ),
      { numRuns: 1000 }
    )
    // both branches were exercised
    expect(failed).toBeGreaterThan(0)
    expect(repaired).toBeGreaterThan(0)
    fc.assert(
      fc.property(fc.json(), (text) => {
        expect(Effect.runSync(c.repair(text))).toEqual({ text, repaired: false })
      }),
      { numRuns: 300 }
    )
  })
})

describe("Constraint.normalizeEnums", () => {
  const nested = JsonSchema.object({
    items: JsonSchema.array(
      JsonSchema.object({ kind: JsonSchema.enumOf(["Alpha", "beta"]), tags: JsonSchema.array(JsonSchema.enumOf(["x", "Y"])) })
    ),
    mood: JsonSchema.enumOf(["Yes", "YES", "no"])
  })

  it.effect("maps a unique case-insensitive match to the member, in nested objects and arrays", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const input = { items: [{ kind: "ALPHA", tags: ["X", "y", "z"] }, { kind: "Beta", tags: [] }], mood: "NO" }
        const before = structuredClone(input)
        expect(c.normalizeEnums(input, nested)).toEqual({
          items: [{ kind: "Alpha", tags: ["x", "Y", "z"] }, { kind: "beta", tags: [] }],
          mood: "no"
        })
        expect(input).toEqual(before)
      })
    ))

  it.effect("leaves ambiguous and unknown values for validation, and unchanged values as the same reference", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        expect(c.normalizeEnums({ mood: "yes" }, nested)).toEqual({ mood: "yes" })
        expect(c.normalizeEnums({ mood: "YES" }, nested)).toEqual({ mood: "YES" })
        expect(c.normalizeEnums({ mood: "maybe" }, nested)).toEqual({ mood: "maybe" })
        const exact = { items: [{ kind: "Alpha", tags: ["x"] }], mood: "Yes" }
        expect(c.normalizeEnums(exact, nested)).toBe(exact)
      })
    ))

  const alphabet = ["a", "A", "b", "Bc", "bC", "d"]
  const caseVariant = fc
    .tuple(fc.constantFrom(...alphabet), fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }))
    .map(([s, flips]) => [...s].map((ch, i) => (flips[i] ? ch.toUpperCase() : ch.toLowerCase())).join(""))
  const schemaArb = fc.letrec<{ schema: JsonSchema.JsonSchema }>((tie) => ({
    schema: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.subarray(alphabet, { minLength: 1 }).map((members) => JsonSchema.enumOf(members)),
      tie("schema").map((items) => JsonSchema.array(items)),
      fc.dictionary(fc.constantFrom("p", "q", "r"), tie("schema"), { maxKeys: 3 }).map((ps) => JsonSchema.object(ps))
    )
  })).schema
  const valueArb = fc.letrec<{ value: unknown }>((tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      caseVariant,
      fc.integer(),
      fc.array(tie("value"), { maxLength: 3 }),
      fc.dictionary(fc.constantFrom("p", "q", "r", "s"), tie("value"), { maxKeys: 4 })
    )
  })).value

  it.effect("property: normalization is idempotent", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        fc.assert(
          fc.property(schemaArb, valueArb, (schema, value) => {
            const once = c.normalizeEnums(value, schema)
            expect(c.normalizeEnums(once, schema)).toEqual(once)
          }),
          { numRuns: 500 }
        )
      })
    ))
})

describe("Constraint.enforce with a raw JSON Schema", () => {
  it.effect("valid JSON passes without repair", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const out = yield* c.enforce('{"sentiment":"positive","confidence":0.9}', c.target(sentiment))
        expect(out.value).toEqual({ sentiment: "positive", confidence: 0.9 })
        expect(out.repaired).toBe(false)
        expect(out.normalized).toBe(false)
        expect(JSON.parse(out.content)).toEqual(out.value)
      })
    ))

  it.effect("invalid JSON is repaired, then normalized, then validated", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const raw = "```json\n{'sentiment': 'POSITIVE', 'confidence': 0.5}\n```"
        const out = yield* c.enforce(raw, c.target(sentiment))
        expect(out.value).toEqual({ sentiment: "positive", confidence: 0.5 })
        expect(out.repaired).toBe(true)
        expect(out.normalized).toBe(true)
        expect(out.raw).toBe(raw)
      })
    ))

  it.effect("repair is not applied when not allowed: CONSTRAINT_JSON_INVALID with the raw text", () =>
    Effect.gen(function* () {
      const raw = '{"sentiment": "positive", "confidence": 0.5'
      const failure = yield* failureOf(
        Effect.flatMap(Constraint, (c) => c.enforce(raw, c.target(sentiment), { repairAllowed: false }))
      )
      expect(failure.code).toBe("CONSTRAINT_JSON_INVALID")
      expect(failure.raw).toBe(raw)
      expect(failure.violations[0]).toMatch(/^\$: not valid JSON/)
      expect(failure.details).toMatchObject({ repairAttempted: false })
    }))

  it.effect("JSON wrapped in prose is extracted: leading prose, trailing prose, truncated", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const t = c.target(sentiment)
        const lead = yield* c.enforce('Sure! Here it is:\n{"sentiment": "positive", "confidence": 1}', t)
        expect(lead).toMatchObject({ value: { sentiment: "positive", confidence: 1 }, repaired: true })
        const trail = yield* c.enforce('Result: {"sentiment": "negative", "confidence": 0} Hope this helps!', t)
        expect(trail.value).toEqual({ sentiment: "negative", confidence: 0 })
        const cut = yield* c.enforce('Answer: {"confidence": 0.5, "sentiment": "neutral"', t)
        expect(cut.value).toEqual({ sentiment: "neutral", confidence: 0.5 })
        // a stray bracket after prose is not an answer
        expect((yield* Effect.flip(c.enforce("not json at all {", t))).code).toBe("CONSTRAINT_JSON_INVALID")
        // a truncated block keeps everything after its last closing bracket
        const nested = yield* c.repair('x {"a": [1], "b": [2')
        expect(JSON.parse(nested.text)).toEqual({ a: [1], b: [2] })
      })
    ))

  it.effect("unrepairable text: CONSTRAINT_JSON_INVALID after a repair attempt", () =>
    Effect.gen(function* () {
      const raw = "{{"
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.enforce(raw, c.target(sentiment))))
      expect(failure.code).toBe("CONSTRAINT_JSON_INVALID")
      expect(failure.raw).toBe(raw)
      expect(failure.details).toMatchObject({ repairAttempted: true })
    }))

  it.effect("an unknown enum value: CONSTRAINT_ENUM_UNRECOGNIZED naming the path and the allowed members", () =>
    Effect.gen(function* () {
      const raw = '{"sentiment":"meh","confidence":0.2}'
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.enforce(raw, c.target(sentiment))))
      expect(failure.code).toBe("CONSTRAINT_ENUM_UNRECOGNIZED")
      expect(failure.raw).toBe(raw)
      expect(failure.violations).toEqual([
        '$.sentiment: Expected one of "positive" | "negative" | "neutral", actual "meh"'
      ])
    }))

  it.effect("an ambiguous enum value is rejected, not guessed", () =>
    Effect.gen(function* () {
      const schema = JsonSchema.object({ answer: JsonSchema.enumOf(["Yes", "YES", "no"]) })
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.enforce('{"answer":"yes"}', c.target(schema))))
      expect(failure.code).toBe("CONSTRAINT_ENUM_UNRECOGNIZED")
      expect(failure.violations[0]).toMatch(/^\$\.answer: /)
    }))

  it.effect("schema violations: CONSTRAINT_SCHEMA_INVALID with every path and rule", () =>
    Effect.gen(function* () {
      const schema = JsonSchema.object({
        sentiment: JsonSchema.enumOf(["positive", "negative"]),
        confidence: JsonSchema.number(),
        items: JsonSchema.array(JsonSchema.object({ n: JsonSchema.integer() }))
      })
      const raw = '{"sentiment":"nope","items":[{"n":1},{"n":1.5},{}]}'
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.enforce(raw, c.target(schema))))
      expect(failure.code).toBe("CONSTRAINT_SCHEMA_INVALID")
      expect(failure.raw).toBe(raw)
      expect(failure.violations).toEqual([
        '$.sentiment: Expected one of "positive" | "negative", actual "nope"',
        "$.confidence: is missing",
        "$.items[1].n: Expected an integer, actual 1.5",
        "$.items[2].n: is missing"
      ])
    }))

  it.effect("a value of the wrong JSON type at the root names the root", () =>
    Effect.gen(function* () {
      const failure = yield* failureOf(Effect.flatMap(Constraint, (c) => c.enforce("[1]", c.target(sentiment))))
      expect(failure.code).toBe("CONSTRAINT_SCHEMA_INVALID")
      expect(failure.violations).toHaveLength(1)
      expect(failure.violations[0]).toMatch(/^\$: Expected/)
    }))

  it.effect("properties the schema does not name are kept, optional ones may be absent", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const schema = JsonSchema.object({ a: JsonSchema.string(), b: JsonSchema.boolean() }, ["a"])
        const out = yield* c.enforce('{"a":"x","extra":[1]}', c.target(schema))
        expect(out.value).toEqual({ a: "x", extra: [1] })
        expect(yield* c.enforce("null", c.target({}))).toMatchObject({ value: null })
        // required names the properties do not describe must still be present
        const failure = yield* Effect.flip(c.enforce('{"a":1}', c.target({ type: "object", required: ["a", "b"] })))
        expect(failure.violations).toEqual(["$.b: is missing"])
      })
    ))
})

describe("Constraint with an Effect Schema (the typed path)", () => {
  class Item extends Schema.Class<Item>("Item")({ name: Schema.String, kind: Schema.Literal("tool", "part") }) {}
  const Order = Schema.Struct({
    status: Schema.Literal("open", "closed"),
    items: Schema.Array(Item),
    note: Schema.optional(Schema.String),
    owner: Schema.NullOr(Schema.String)
  })

  it.effect("returns the Schema's Type, with enums normalized from its literals", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const out = yield* c.enforce(
          '{"status":"OPEN","items":[{"name":"saw","kind":"Tool"}],"owner":null,"junk":1}',
          c.target(Order)
        )
        const status: "open" | "closed" = out.value.status
        expect(status).toBe("open")
        expect(out.value.items[0]).toBeInstanceOf(Item)
        expect(out.value.items[0]!.kind).toBe("tool")
        // content is the Schema's encoding: fields it does not name are gone
        expect(JSON.parse(out.content)).toEqual({ status: "open", items: [{ name: "saw", kind: "tool" }], owner: null })
      })
    ))

  it.effect("merges a union's issues at one path into one violation", () =>
    Effect.gen(function* () {
      const failure = yield* failureOf(
        Effect.flatMap(Constraint, (c) => c.enforce('{"status":"pending","items":[],"owner":null}', c.target(Order)))
      )
      expect(failure.code).toBe("CONSTRAINT_ENUM_UNRECOGNIZED")
      expect(failure.violations).toEqual(['$.status: Expected "open" | "closed", actual "pending"'])
    }))

  it.effect("toJsonSchema keeps enums from literals, unions as anyOf, resolves $refs and drops what the subset lacks", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const js = c.toJsonSchema(
          Schema.Struct({
            order: Order,
            n: Schema.Int,
            nums: Schema.Literal(1, 2),
            pair: Schema.Tuple(Schema.String, Schema.Number),
            either: Schema.Union(Schema.String, Schema.Number),
            named: Schema.String.annotations({ description: "a name" })
          })
        )
        expect(js).toEqual({
          type: "object",
          required: ["order", "n", "nums", "pair", "either", "named"],
          properties: {
            order: {
              type: "object",
              required: ["status", "items", "owner"],
              properties: {
                status: { type: "string", enum: ["open", "closed"] },
                items: {
                  type: "array",
                  items: {
                    type: "object",
                    required: ["name", "kind"],
                    properties: { name: { type: "string" }, kind: { type: "string", enum: ["tool", "part"] } }
                  }
                },
                note: { type: "string" },
                owner: { type: "string" }
              }
            },
            n: { type: "integer", description: "an integer" },
            nums: { type: "number" },
            pair: { type: "array" },
            either: { anyOf: [{ type: "string" }, { type: "number" }] },
            named: { type: "string", description: "a name" }
          }
        })
        // the subset decodes as the domain's JsonSchema
        expect(Schema.is(JsonSchema.JsonSchema)(js)).toBe(true)
      })
    ))

  it.effect("toJsonSchema stops at a recursive reference instead of looping", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        interface Tree {
          readonly label: string
          readonly children: ReadonlyArray<Tree>
        }
        const Tree: Schema.Schema<Tree> = Schema.Struct({
          label: Schema.String,
          children: Schema.Array(Schema.suspend((): Schema.Schema<Tree> => Tree))
        }).annotations({ identifier: "Tree" })
        const js = c.toJsonSchema(Tree)
        expect(js.properties?.label).toEqual({ type: "string" })
        expect(js.properties?.children?.type).toBe("array")
      })
    ))

  it.effect("requestConstraints: the JSON schema goes to the engine, a GBNF grammar passes through", () =>
    run(
      Effect.gen(function* () {
        const c = yield* Constraint
        const grammar = 'root ::= "{" ws "}"\nws ::= [ \\t\\n]*'
        const t = c.target(Order)
        expect(c.requestConstraints(t, grammar)).toEqual({ schema: t.jsonSchema, grammar })
        expect(c.requestConstraints(c.target(sentiment))).toEqual({ schema: sentiment })
      })
    ))
})
