import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import type { ConfigurationFailure } from "../src/domain/Failure.js"
import * as Query from "../src/domain/Query.js"
import * as Check from "../src/programs/query/Check.js"

// The query wire (infer.query.v1) and its one-time check.

const base = {
  kind: "infer.query.v1",
  input: { inline: "<document>" },
  responders: [{ kind: "llm", model: "~sonnet" }],
  fold: { function: "best_of" },
  answer_shape: { kind: "core.classification.v1" }
}
const aliases = { sonnet: "claude-sonnet", "gpt-4": "gpt-4o", haiku: "claude-haiku", gemini: "gemini-pro" }

const refused = (input: unknown, options: Check.Options = { aliases }): ConfigurationFailure => {
  const result = Check.check(input, options)
  if (Either.isRight(result)) throw new Error("expected the query to be refused")
  expect(result.left.code).toBe("CONFIG_INVALID_REQUEST")
  return result.left
}
const accepted = (input: unknown, options: Check.Options = { aliases }): Check.Checked => {
  const result = Check.check(input, options)
  if (Either.isLeft(result)) throw new Error(result.left.message)
  return result.right
}

describe("the seed's examples decode", () => {
  const examples: ReadonlyArray<readonly [string, unknown]> = [
    ["query A (classification, best_of)", base],
    [
      "query B (a nested query over A's KNOW, consensus)",
      {
        kind: "infer.query.v1",
        input: { record_id: "know-123" },
        responders: [{ kind: "llm", model: "~sonnet" }, { kind: "llm", model: "~gpt-4" }],
        fold: { function: "consensus" },
        answer_shape: { kind: "core.summary.v1" }
      }
    ],
    [
      "verify",
      {
        ...base,
        responders: undefined,
        orchestration: {
          pattern: "verify",
          primary: [{ kind: "llm", model: "~sonnet" }],
          verifier: { kind: "llm", model: "~gpt-4" },
          tiebreaker: { kind: "actor", did: "did:example:alice" },
          agreement_threshold: 0.85
        }
      }
    ],
    [
      "waterfall",
      {
        ...base,
        responders: undefined,
        orchestration: {
          pattern: "waterfall",
          stages: [
            { responders: [{ kind: "pattern", capability: "summary" }] },
            { responders: [{ kind: "llm", model: "~haiku" }] },
            { responders: [{ kind: "llm", model: "~sonnet" }] }
          ],
          accept_expression: "fold.answer.confidence >= 0.85"
        }
      }
    ],
    [
      "retry_on_low_confidence",
      { ...base, orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "fold.answer.confidence < 0.7", max_attempts: 3, retry_dial: 0.6 } }
    ],
    [
      "escalate",
      {
        ...base,
        responders: undefined,
        orchestration: {
          pattern: "escalate",
          tiers: [
            { responders: [{ kind: "llm", model: "~haiku" }] },
            { responders: [{ kind: "llm", model: "~sonnet" }] },
            { responders: [{ kind: "actor", did: "did:example:alice" }] }
          ],
          escalation_expression: "fold.answer.confidence < 0.7"
        }
      }
    ],
    [
      "ensemble_with_audit",
      {
        ...base,
        responders: undefined,
        obligation_resolution: "validation_error",
        orchestration: {
          pattern: "ensemble_with_audit",
          primary_responders: [{ kind: "llm", model: "~sonnet" }, { kind: "llm", model: "~gpt-4" }, { kind: "llm", model: "~gemini" }],
          auditor: { kind: "actor", did: "did:example:compliance-officer" },
          audit_expression: "audit.approved == true"
        }
      }
    ]
  ]
  for (const [name, query] of examples) {
    it(name, () => {
      const checked = accepted(JSON.parse(JSON.stringify(query)))
      expect(checked.query.kind).toBe("infer.query.v1")
    })
  }

  it("defaults: consensus, single_shot, top_k 3, quorum 1, last_writer_wins; aliases resolved", () => {
    const checked = accepted({ ...base, fold: undefined })
    expect(checked.fold.function).toBe("consensus")
    expect(checked.orchestration.pattern).toBe("single_shot")
    expect(checked.topK).toBe(3)
    expect(checked.minQuorum).toBe(1)
    expect(checked.obligationResolution).toBe("last_writer_wins")
    expect(checked.responders[0]!.model).toBe("claude-sonnet")
    expect(checked.input).toEqual({ _tag: "Inline", text: "<document>" })
  })

  it("every CEL place is compiled once, at check time", () => {
    const checked = accepted({
      ...base,
      responders: [{ kind: "llm", model: "~sonnet", expression: "responder.availability.status == 'available'" }],
      fold: { function: "ensemble_weighted", weight_expression: "response.confidence" }
    })
    expect(checked.responders[0]!.expression?.type).toBe("bool")
    expect(checked.fold.options.weight?.type).toBe("double")
  })
})

describe("refused queries name the field", () => {
  const table: ReadonlyArray<readonly [string, unknown, string]> = [
    ["an unknown answer kind", { ...base, answer_shape: { kind: "core.poem.v1" } }, 'answer_shape.kind: expected "core.classification.v1" | "core.summary.v1" | "core.text.v1" | "core.json.v1", got "core.poem.v1"'],
    ["core.json.v1 without its schema", { ...base, answer_shape: { kind: "core.json.v1" } }, "answer_shape.schema: is missing"],
    ["an oversized inline input", { ...base, input: { inline: "x".repeat(Query.limits.maxInlineChars + 1) } }, "input.inline: at most 262,144 characters, got 262,145"],
    ["both inputs", { ...base, input: { inline: "a", record_id: "b" } }, "input: exactly one of inline and record_id"],
    ["a misspelt option", { ...base, fold: { function: "consensus", similarty: "text" } }, "fold.similarty: is unexpected"],
    ["an unknown responder kind", { ...base, responders: [{ kind: "oracle" }] }, "responders.0.kind: expected"],
    ["too many responders", { ...base, responders: Array.from({ length: 33 }, () => ({ kind: "actor", did: "d" })) }, "responders: at most 32 responders"],
    ["an oversized expression", { ...base, responders: [{ kind: "actor", did: "d", expression: "true || ".repeat(200) + "true" }] }, "responders.0.expression: a CEL expression of at most 1024 characters"],
    ["a verify threshold out of range", { ...base, responders: undefined, orchestration: { pattern: "verify", primary: [{ kind: "actor", did: "a" }], verifier: { kind: "actor", did: "b" }, tiebreaker: { kind: "actor", did: "c" }, agreement_threshold: 2 } }, "orchestration.agreement_threshold"],
    ["max_attempts past the bound", { ...base, orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "true", max_attempts: 11 } }, "orchestration.max_attempts: an integer in [1, 10]"],
    ["a wrong kind", { ...base, kind: "infer.query.v2" }, 'kind: expected "infer.query.v1"'],
    ["an unknown alias", { ...base, responders: [{ kind: "llm", model: "~opus" }] }, 'responders.0.model: unknown alias "~opus" (known: ~sonnet'],
    ["no responders for single_shot", { ...base, responders: undefined }, "responders: the single_shot pattern needs at least one responder"],
    ["responders where the pattern names its own", { ...base, orchestration: { pattern: "escalate", tiers: [{ responders: [{ kind: "actor", did: "a" }] }], escalation_expression: "false" } }, "responders: the escalate pattern names its own responders"],
    ["a quorum above top_k", { ...base, top_k: 2, min_quorum: 3 }, "min_quorum: 3 can never be met with top_k 2"],
    ["semantic similarity without a provider", { ...base, fold: { function: "consensus", similarity: "semantic" } }, "fold.similarity: semantic similarity needs a similarity provided"],
    ["a threshold with structural similarity", { ...base, fold: { function: "consensus", similarity_threshold: 0.5 } }, "fold.similarity_threshold: applies to text and semantic"]
  ]
  for (const [name, query, message] of table) {
    it(name, () => {
      expect(refused(query).message).toContain(message)
    })
  }

  it("semantic similarity is accepted when the application provides one", () => {
    expect(accepted({ ...base, fold: { function: "consensus", similarity: "semantic" } }, { aliases, semantic: () => 1 }).fold.options.similarity).toBe("semantic")
  })

  it("a bad CEL expression is refused at check time with field and position", () => {
    const failure = refused({ ...base, fold: { function: "expression", expression: "responses.size( - 1" } })
    expect(failure.message).toContain("fold.expression: ")
    const expressions = failure.details.expressions as ReadonlyArray<{ field: string; position: number }>
    expect(expressions[0]!.field).toBe("fold.expression")
    expect(typeof expressions[0]!.position).toBe("number")
  })

  it("every problem is listed, not only the first", () => {
    const failure = refused({
      ...base,
      responders: [{ kind: "llm", model: "~nope", expression: "responder.nme == 'x'" }],
      orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "fold.answer.confidence" }
    })
    const issues = failure.details.issues as ReadonlyArray<string>
    expect(issues.length).toBe(3)
    expect(issues[0]).toContain("responders.0.expression: No such key: nme")
    expect(issues.some((i) => i.startsWith("responders.0.model: unknown alias"))).toBe(true)
    expect(issues.some((i) => i.startsWith("orchestration.threshold_expression: must yield a bool, yields double"))).toBe(true)
  })

  it("nesting past the bound is refused before decoding (no stack overflow)", () => {
    let schema: Record<string, unknown> = { type: "string" }
    for (let i = 0; i < 20_000; i++) schema = { type: "array", items: schema }
    expect(refused({ ...base, answer_shape: { kind: "core.json.v1", schema } }).message).toBe("invalid query: the query is nested more than 64 levels deep")
  })

  it("not an object at all", () => {
    expect(refused(null).message).toBe("invalid query: the query: expected an infer.query.v1 object, got null")
  })

  it("a JSON schema past the bounds (64 KB) is refused", () => {
    const schema = { type: "string", description: "x".repeat(70_000) }
    expect(refused({ ...base, answer_shape: { kind: "core.json.v1", schema } }).message).toContain("answer_shape.schema")
  })
})

describe("a value of the wrong type anywhere is refused naming its field, never thrown", () => {
  // every field of every variant: each pattern, each fold, each answer shape, each responder kind
  const full: ReadonlyArray<unknown> = [
    {
      ...base,
      responders: [
        { kind: "llm", model: "~sonnet", expression: "true" },
        { kind: "pattern", capability: "c", expression: "true" },
        { kind: "system", name: "s", capability: "c", expression: "true" },
        { kind: "actor", did: "d", expression: "true" }
      ],
      fold: { function: "ensemble_weighted", weight_expression: "1.0", similarity: "text", similarity_threshold: 0.5 },
      answer_shape: { kind: "core.classification.v1", labels: ["a", "b"] },
      orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "false", max_attempts: 2, retry_dial: 0.5 },
      top_k: 2,
      min_quorum: 1,
      max_latency_secs: 10,
      dial: 0.5,
      budget: { tokens: 10, calls: 2 },
      obligation_resolution: "validation_error"
    },
    {
      ...base,
      input: { record_id: "r" },
      responders: undefined,
      fold: { function: "expression", expression: "0" },
      answer_shape: { kind: "core.json.v1", schema: { type: "object", properties: { a: { type: "string", enum: ["x"] } }, required: ["a"] } },
      orchestration: {
        pattern: "verify",
        primary: [{ kind: "actor", did: "a" }],
        verifier: { kind: "actor", did: "b" },
        tiebreaker: { kind: "actor", did: "c" },
        agreement_threshold: "1.0"
      }
    },
    {
      ...base,
      responders: undefined,
      fold: { function: "consensus", similarity: "structural" },
      orchestration: { pattern: "waterfall", stages: [{ responders: [{ kind: "actor", did: "a" }] }], accept_expression: "true", on_exhausted: "fail" }
    },
    {
      ...base,
      responders: undefined,
      orchestration: { pattern: "escalate", tiers: [{ responders: [{ kind: "actor", did: "a" }] }], escalation_expression: "false", on_expired: "fail" }
    },
    {
      ...base,
      responders: undefined,
      orchestration: { pattern: "ensemble_with_audit", primary_responders: [{ kind: "actor", did: "a" }], auditor: { kind: "actor", did: "b" }, audit_expression: "true" }
    }
  ]
  const wrongValues: ReadonlyArray<unknown> = [null, 42, true, {}, [], "x"]

  /** Every path of a JSON value (the root excluded), as key lists. */
  const pathsOf = (value: unknown, prefix: ReadonlyArray<string> = []): Array<ReadonlyArray<string>> => {
    if (typeof value !== "object" || value === null) return []
    return Object.entries(value).filter(([, child]) => child !== undefined).flatMap(([key, child]) => [
      [...prefix, key],
      ...pathsOf(child, [...prefix, key])
    ])
  }
  const replaced = (value: unknown, path: ReadonlyArray<string>, replacement: unknown): unknown => {
    const copy = JSON.parse(JSON.stringify(value))
    let at = copy
    for (const key of path.slice(0, -1)) at = at[key]
    at[path.at(-1)!] = replacement
    return copy
  }

  it("each example is accepted as it is", () => {
    for (const query of full) accepted(JSON.parse(JSON.stringify(query)))
  })

  it("null, a number, a boolean, an object, an array or a string at every field", () => {
    let tried = 0
    const wrong: Array<string> = []
    for (const query of full) {
      for (const path of pathsOf(JSON.parse(JSON.stringify(query)))) {
        for (const value of wrongValues) {
          const field = path.join(".")
          const result = Either.try(() => Check.check(replaced(query, path, value), { aliases }))
          tried++
          if (Either.isLeft(result)) {
            wrong.push(`${field} = ${JSON.stringify(value)} threw ${String(result.left)}`)
            continue
          }
          const checked = result.right
          if (Either.isRight(checked)) continue
          // the refusal names the field, the object that holds it (a union that no longer matches) or a field inside it
          const issues = (checked.left.details.issues ?? []) as ReadonlyArray<string>
          const named = [...issues, checked.left.message].some((issue) =>
            issue.includes(`${field}.`) || path.some((_, n) => issue.includes(`${path.slice(0, path.length - n).join(".")}:`))
          )
          if (!named) wrong.push(`${field} = ${JSON.stringify(value)}: ${checked.left.message}`)
        }
      }
    }
    expect(wrong, wrong.join("\n")).toEqual([])
    expect(tried).toBeGreaterThan(400)
  })

  it("a number or null where text is expected: input.inline, a CEL expression", () => {
    expect(refused({ ...base, input: { inline: 42 } }).message).toContain("input.inline: expected string, got 42")
    expect(refused({ ...base, input: { inline: null } }).message).toContain("input.inline: expected string, got null")
    expect(refused({ ...base, responders: [{ kind: "actor", did: "d", expression: null }] }).message).toContain(
      "responders.0.expression: expected string, got null"
    )
    expect(refused({ ...base, fold: { function: "expression", expression: null } }).message).toContain("fold.expression")
  })
})

describe("a waterfall with the waterfall_first fold", () => {
  it("accepts candidates by the pattern's accept_expression", () => {
    const checked = accepted({
      ...base,
      responders: undefined,
      fold: { function: "waterfall_first" },
      orchestration: { pattern: "waterfall", stages: [{ responders: [{ kind: "actor", did: "a" }] }], accept_expression: "fold.answer.confidence >= 0.85" }
    })
    const accept = checked.fold.options.accept
    expect(accept).toBeDefined()
    const candidate = (confidence: number) => ({
      function: "waterfall_first" as const,
      answer: { category: "news" },
      body: {},
      confidence,
      chosen: { responder: "a", responderIndex: 0, kind: "actor" as const, attempt: 1, stage: 0, recordId: "r", outcome: { _tag: "Answered" as const, body: {} } },
      support: [],
      groups: [],
      valid: 1,
      total: 1,
      rejected: []
    })
    expect(accept!(candidate(0.9))).toEqual(Either.right(true))
    expect(accept!(candidate(0.5))).toEqual(Either.right(false))
  })
})
