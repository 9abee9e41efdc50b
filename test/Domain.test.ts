import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as Issues from "../src/domain/Issues.js"
import * as Lifecycle from "../src/domain/Lifecycle.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as System from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"

describe("Message", () => {
  const decode = Schema.decodeUnknownEither(Message.WireMessage)

  it("decodes each role from its wire form", () => {
    const user = decode({ role: "user", content: "hi" })
    expect(Either.isRight(user) && user.right).toMatchObject({ _tag: "UserMessage", content: "hi" })
    const assistant = decode({
      role: "assistant",
      content: "",
      toolCalls: [{ id: "1", name: "add", arguments: { a: 1 } }]
    })
    expect(Either.isRight(assistant) && Message.isAssistant(assistant.right) && assistant.right.toolCalls[0]!.name).toBe(
      "add"
    )
    const tool = decode({ role: "tool", content: "3", toolCallId: "1", name: "add" })
    expect(Either.isRight(tool) && tool.right).toMatchObject({ _tag: "ToolMessage", isError: false })
  })

  it("rejects invalid field combinations and unknown roles with a clear message", () => {
    const userWithCalls = decode({ role: "user", content: "x", toolCalls: [] })
    expect(Either.isLeft(userWithCalls)).toBe(true)
    expect(String(Either.isLeft(userWithCalls) && userWithCalls.left.message)).toContain("content only")
    const toolWithoutId = decode({ role: "tool", content: "3" })
    expect(String(Either.isLeft(toolWithoutId) && toolWithoutId.left.message)).toContain("toolCallId")
    expect(Either.isLeft(decode({ role: "robot", content: "x" }))).toBe(true)
  })

  it("encodes back to the wire form", () => {
    const encoded = Schema.encodeSync(Message.WireMessage)(Message.assistant("ok"))
    expect(encoded).toEqual({ role: "assistant", content: "ok" })
  })
})

describe("JsonSchema", () => {
  it("decodes the documented subset, recursively, and rejects unknown types", () => {
    const schema = {
      type: "object",
      properties: {
        sentiment: { type: "string", enum: ["positive", "negative", "neutral"] },
        tags: { type: "array", items: { type: "string" } }
      },
      required: ["sentiment"]
    }
    expect(Either.isRight(Schema.decodeUnknownEither(JsonSchema.JsonSchema)(schema))).toBe(true)
    expect(Either.isLeft(Schema.decodeUnknownEither(JsonSchema.JsonSchema)({ type: "date" }))).toBe(true)
    expect(
      Either.isLeft(Schema.decodeUnknownEither(JsonSchema.JsonSchema)({ type: "object", properties: { a: { type: 1 } } }))
    ).toBe(true)
  })

  it("derives the subset from an Effect Schema", () => {
    const derived = JsonSchema.fromSchema(
      Schema.Struct({
        sentiment: Schema.Literal("positive", "negative", "neutral"),
        score: Schema.Number.annotations({ description: "0..1" }),
        tags: Schema.Array(Schema.String),
        note: Schema.optional(Schema.String)
      })
    )
    expect(derived).toEqual({
      type: "object",
      properties: {
        sentiment: { type: "string", enum: ["positive", "negative", "neutral"] },
        score: { type: "number", description: "0..1" },
        tags: { type: "array", items: { type: "string" } },
        note: { type: "string" }
      },
      required: ["sentiment", "score", "tags"]
    })
  })
})

describe("JsonSchema.fromSchema edge cases", () => {
  interface Tree {
    readonly value: string
    readonly children: ReadonlyArray<Tree>
  }
  const Tree: Schema.Schema<Tree> = Schema.Struct({
    value: Schema.String,
    children: Schema.Array(Schema.suspend((): Schema.Schema<Tree> => Tree))
  }).annotations({ identifier: "Tree" })

  it("stops at a recursive schema's cycle instead of overflowing", () => {
    const derived = JsonSchema.fromSchema(Tree)
    expect(derived.type).toBe("object")
    expect(derived.properties?.children?.type).toBe("array")
  })

  it("gives no constraint for a schema JSONSchema cannot describe", () => {
    expect(JsonSchema.fromSchema(Schema.instanceOf(Map))).toEqual({})
  })

  it("does not turn number literals into string enums", () => {
    const derived = JsonSchema.fromSchema(Schema.Literal(1, 2))
    expect(derived.enum).toBeUndefined()
  })
})

describe("TokenUsage", () => {
  const a = TokenUsage.make({ promptTokens: 10, outputTokens: 5, contextWindow: 2048, tokensPerSecond: 100 })
  const b = TokenUsage.make({ promptTokens: 20, outputTokens: 7, contextWindow: 4096, tokensPerSecond: 300 })

  it("sums tokens, averages tokens/s, keeps the largest context window", () => {
    const c = TokenUsage.combine(a, b)
    expect(c.promptTokens).toBe(30)
    expect(c.outputTokens).toBe(12)
    expect(c.totalTokens).toBe(42)
    expect(c.tokensPerSecond).toBe(200)
    expect(c.contextWindow).toBe(4096)
    expect(c.calls).toBe(2)
  })

  it("sums cached prompt tokens; absent when neither side has any", () => {
    const cached = new TokenUsage.TokenUsage({ ...a, cachedPromptTokens: 7 })
    expect(TokenUsage.combine(cached, b).cachedPromptTokens).toBe(7)
    expect(TokenUsage.combine(cached, cached).cachedPromptTokens).toBe(14)
    expect(TokenUsage.combine(a, b).cachedPromptTokens).toBeUndefined()
    expect("cachedPromptTokens" in TokenUsage.combine(a, b)).toBe(false)
  })

  it("is associative with empty as identity", () => {
    const c = TokenUsage.make({ outputTokens: 1, tokensPerSecond: 50 })
    const left = TokenUsage.combine(TokenUsage.combine(a, b), c)
    const right = TokenUsage.combine(a, TokenUsage.combine(b, c))
    expect(left.tokensPerSecond).toBeCloseTo(right.tokensPerSecond)
    expect(left.outputTokens).toBe(right.outputTokens)
    expect(TokenUsage.combine(TokenUsage.empty, a)).toEqual(a)
    expect(TokenUsage.combineAll([a, b, c]).calls).toBe(3)
  })
})

describe("SystemRequest", () => {
  const decode = Schema.decodeUnknownEither(System.SystemRequest)

  it("decodes a minimal request with defaults", () => {
    const r = decode({ mode: "chat", messages: [{ role: "user", content: "hi" }] })
    expect(Either.isRight(r)).toBe(true)
    if (Either.isRight(r)) {
      expect(r.right.tools).toEqual([])
      expect(r.right.output.repairAllowed).toBe(true)
      expect(r.right.hints.maxTokens).toBeUndefined()
    }
  })

  it("decodes hints: timeout in milliseconds becomes a Duration", () => {
    const r = decode({ mode: "structured", messages: [], hints: { timeout: 1500, temperature: 0.2 } })
    expect(Either.isRight(r) && r.right.hints.timeout?.value).toEqual({ _tag: "Millis", millis: 1500 })
  })

  it("rejects an unknown mode, wrong types and a bad message", () => {
    expect(Either.isLeft(decode({ mode: "dance", messages: [] }))).toBe(true)
    expect(Either.isLeft(decode({ mode: "chat", messages: "hi" }))).toBe(true)
    expect(Either.isLeft(decode({ mode: "chat", messages: [{ role: "user" , content: 3 }] }))).toBe(true)
    expect(Either.isLeft(decode({ mode: "chat", messages: [], hints: { temperature: 7 } }))).toBe(true)
  })
})

describe("Lifecycle", () => {
  it("allows the documented forward moves, retries and terminal exits only", () => {
    expect(Lifecycle.canTransition("INIT", "PLAN")).toBe(true)
    expect(Lifecycle.canTransition("INIT", "PREPARE")).toBe(true)
    expect(Lifecycle.canTransition("PREPARE", "EXECUTE")).toBe(true)
    expect(Lifecycle.canTransition("VALIDATE", "EXECUTE")).toBe(true)
    expect(Lifecycle.canTransition("EXECUTE", "ERROR")).toBe(true)
    expect(Lifecycle.canTransition("PLAN", "CANCELLED")).toBe(true)
    expect(Lifecycle.canTransition("INIT", "EXECUTE")).toBe(false)
    expect(Lifecycle.canTransition("COMPLETE", "EXECUTE")).toBe(false)
    expect(Lifecycle.canTransition("ERROR", "CANCELLED")).toBe(false)
  })

  it("the whole table, pair by pair (SUSPENDED is entered from EXECUTE and resumes to EXECUTE)", () => {
    const allowed: Record<Lifecycle.LifecycleState, ReadonlyArray<Lifecycle.LifecycleState>> = {
      INIT: ["PLAN", "PREPARE", "ERROR", "CANCELLED"],
      PLAN: ["PREPARE", "ERROR", "CANCELLED"],
      PREPARE: ["EXECUTE", "ERROR", "CANCELLED"],
      EXECUTE: ["VALIDATE", "SUSPENDED", "COMPLETE", "ERROR", "CANCELLED"],
      VALIDATE: ["EXECUTE", "COMPLETE", "ERROR", "CANCELLED"],
      SUSPENDED: ["EXECUTE", "ERROR", "CANCELLED"],
      COMPLETE: [],
      ERROR: [],
      CANCELLED: []
    }
    const states = Lifecycle.LifecycleState.literals
    expect([...states].sort()).toEqual(Object.keys(allowed).sort())
    for (const from of states) {
      for (const to of states) {
        expect({ from, to, allowed: Lifecycle.canTransition(from, to) }).toEqual({
          from,
          to,
          allowed: allowed[from].includes(to)
        })
      }
    }
  })
})

describe("Issues.describe", () => {
  const Body = Schema.Struct({
    mode: Schema.Literal("chat", "structured"),
    hints: Schema.optional(Schema.Struct({ maxTokens: Schema.optional(Schema.NonNegative) })),
    tools: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({ name: Schema.String }))))
  })
  const issues = (input: unknown) => {
    const decoded = Schema.decodeUnknownEither(Body, { errors: "all" })(input)
    return decoded._tag === "Left" ? Issues.describe(decoded.left, "a body") : []
  }

  it("says one line per path: a literal union once, a missing field, the root by its name", () => {
    expect(issues({ mode: "dance" })).toEqual(['mode: expected "chat" | "structured", got "dance"'])
    expect(issues({})).toEqual(["mode: is missing"])
    expect(issues("text")).toEqual(['the request: expected a body, got "text"'])
  })

  it("a wrong optional or nullable field is reported at its deepest path only", () => {
    expect(issues({ mode: "chat", hints: { maxTokens: -1 } })).toEqual([
      "hints.maxTokens: expected a non-negative number, got -1"
    ])
    expect(issues({ mode: "chat", tools: [{}] })).toEqual(["tools.0.name: is missing"])
  })
})
