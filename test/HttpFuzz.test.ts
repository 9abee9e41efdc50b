/**
 * `pagantic serve` under generated and mutated requests (fast-check), against a
 * real server on 127.0.0.1 with a canned engine that always answers: text, tool
 * calls, JSON, a value for the request's schema. The hostile-input suite
 * (Hostile.test.ts) pins each finding; this throws 2,000 requests per run of the
 * suite (`npm run test:soak`: 20,000) at both endpoints (and other paths and
 * methods) and holds every answer to the same rules:
 *
 * - no 5xx (the engine always answers, so a 5xx is a bug), and every error in its
 *   endpoint's shape: a SystemResponse with a SystemError on /v1/run and other
 *   paths, OpenAI's `{ error: { message, type, code } }` on /v1/chat/completions;
 * - JSON with a JSON content type (an SSE stream for `stream: true` answers);
 * - small: an error at most 8 KB, a success at most 8 KB plus what a success may
 *   legitimately echo (a plan's tool-step arguments, ids and step names);
 * - no input echoed beyond an excerpt: unique 400+ character markers planted in
 *   random fields never come back as a run of 200 characters (outside that echo,
 *   and never in an error's own fields);
 * - the server alive between batches of ~100: GET /health answers within 100 ms
 *   (tried twice, so that a pause of the shared machine is not taken for a hang);
 * - the heap after the run (after a forced GC; the sessions the server keeps by
 *   design cleared, its event log at a small bound the warm-up fills) within 10%
 *   of the heap before.
 *
 * The run is seeded and prints its seed; FUZZ_SEED=<seed> replays it and
 * FUZZ_CASES=<n> changes its size. A failure names the seed, the case and the
 * request (excerpt).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import fc from "fast-check"
import { ChatCompletion } from "../src/adapters/http/Api.js"
import { ToolCall } from "../src/domain/Message.js"
import type { Message } from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import { SystemResponse } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Calculator from "../src/layers/tools/Calculator.js"
import type { InferenceRequest } from "../src/services/Engine.js"
import { Engine, InferenceResult, StreamPart } from "../src/services/Engine.js"
import type { Reply } from "./support/server.js"
import { send, serve } from "./support/server.js"
import { gc } from "./support/Gc.js"
import { add } from "./support/tools.js"

const SEED = process.env.FUZZ_SEED === undefined ? Date.now() % 2_147_483_647 : Number(process.env.FUZZ_SEED)
const CASES = Number(process.env.FUZZ_CASES ?? 2_000)
/** Requests in flight at once. */
const CONCURRENCY = 8
/** GET /health after every this many cases. */
const HEALTH_EVERY = 96
const HEALTH_BOUND_MS = 100
const ERROR_BOUND = 8 * 1024
const SUCCESS_BOUND = 8 * 1024
const MARKER_LENGTH = 400
/** A marker quoted this long or longer is an echo, not an excerpt. */
const ECHO_RUN = 200

// ---------------------------------------------------------------------------
// The canned engine: always answers, keeps nothing
// (ScriptedEngine keeps every request it is sent, for its Control: over 10,000
// requests that alone would grow the heap the run measures)
// ---------------------------------------------------------------------------

/**
 * A value for a JSON schema (pagantic's subset), or something when the schema is
 * not one: the engine answers well-typed JSON so that structured requests pass.
 */
const exampleOf = (schema: unknown, depth = 0): unknown => {
  if (typeof schema !== "object" || schema === null || depth > 20) return "x"
  const s = schema as Record<string, unknown>
  // never a long key or enum value: the canned engine must not echo what the fuzz plants
  const short = Array.isArray(s.enum) ? s.enum.find((v) => typeof v === "string" && v.length <= 64) : undefined
  if (short !== undefined) return short
  switch (s.type) {
    case "object": {
      const out: Record<string, unknown> = {}
      const props = typeof s.properties === "object" && s.properties !== null ? s.properties as Record<string, unknown> : {}
      for (const [key, value] of Object.entries(props)) {
        if (key.length > 64) continue
        Object.defineProperty(out, key, { value: exampleOf(value, depth + 1), enumerable: true, writable: true, configurable: true })
      }
      return out
    }
    case "array":
      return [exampleOf(s.items, depth + 1)]
    case "number":
    case "integer":
      return 7
    case "boolean":
      return true
    case "null":
      return null
    default:
      return "x"
  }
}

const hash = (text: string): number => {
  let h = 2166136261
  for (let i = 0; i < text.length; i += Math.max(1, Math.floor(text.length / 64))) {
    h = Math.imul(h ^ text.charCodeAt(i), 16777619)
  }
  return h >>> 0
}

const usage = TokenUsage.make({ promptTokens: 12, outputTokens: 5, contextWindow: 4096 })

/**
 * What the canned engine answers a request: the schema's example value; after a
 * tool result, a short text; otherwise, by the last message, a tool call (when the
 * request offers the tool), JSON text or plain text. "slow" in the last message
 * makes it take 30 ms, so that requests overlap.
 */
const answer = (request: InferenceRequest): { readonly result: InferenceResult; readonly delay: number } => {
  const last: Message | undefined = request.messages.at(-1)
  const content = last?.content ?? ""
  const delay = content.includes("slow") ? 30 : 0
  const result = (text: string, calls: ReadonlyArray<ToolCall> = []) =>
    new InferenceResult({ content: text, toolCalls: calls, usage, finishReason: calls.length > 0 ? "tool_calls" : "stop" })
  if (request.schema !== undefined) return { result: result(JSON.stringify(exampleOf(request.schema))), delay }
  if (request.grammar !== undefined) return { result: result('"a"'), delay }
  if (last?.role === "tool") return { result: result("The tools have answered."), delay }
  const offered = new Set(request.tools.map((t) => t.name))
  switch (hash(content) % 4) {
    case 0:
      if (offered.has("calculator")) {
        return { result: result("", [new ToolCall({ id: "call_c", name: "calculator", arguments: { expression: "6*7" } })]), delay }
      }
      break
    case 1:
      if (offered.has("add")) {
        return { result: result("", [new ToolCall({ id: "call_a", name: "add", arguments: { a: 1, b: 2 } })]), delay }
      }
      break
    case 2:
      return { result: result('{"answer": 42, "unit": "none"}'), delay }
  }
  return { result: result("Hello from the canned engine."), delay }
}

const cannedEngine: Layer.Layer<Engine> = Layer.succeed(Engine, {
  infer: (request) => {
    const { delay, result } = answer(request)
    return delay > 0 ? Effect.as(Effect.sleep(delay), result) : Effect.succeed(result)
  },
  stream: (request) => {
    const { delay, result } = answer(request)
    const words = result.content.match(/\S+\s*|\s+/g) ?? []
    return Stream.concat(
      Stream.fromEffect(Effect.sleep(delay)).pipe(Stream.drain),
      Stream.fromIterable<StreamPart>([
        ...words.map(StreamPart.textDelta),
        ...result.toolCalls.map(StreamPart.toolCall),
        StreamPart.finish(result)
      ])
    )
  },
  modelInfo: Effect.succeed(new ModelInfo({ name: "canned", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
})

// ---------------------------------------------------------------------------
// Valid requests of every mode, for both endpoints
// ---------------------------------------------------------------------------

type Json = null | boolean | number | string | Array<Json> | { [key: string]: Json }

const scalar: fc.Arbitrary<Json> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.string({ maxLength: 8 })
)
/** Small JSON values (fc.jsonValue is ten times slower to generate and no more hostile). */
const jsonAny: fc.Arbitrary<Json> = fc.oneof(
  { weight: 4, arbitrary: scalar },
  { weight: 1, arbitrary: fc.array(scalar, { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 6 }), scalar, { maxKeys: 3 }) }
)

/** Large texts are made once per size. */
const memo = new Map<string, string>()
const cached = (key: string, make: () => string): string => {
  const found = memo.get(key)
  if (found !== undefined) return found
  const made = make()
  memo.set(key, made)
  return made
}

const shortText = fc.oneof(
  fc.string({ maxLength: 24 }),
  fc.constantFrom("hi", "what is 6*7?", "add 1 and 2", "slow please", "tell me a joke", "slow: compute"),
  fc.fullUnicodeString({ maxLength: 12 })
)
const toolName = fc.constantFrom("calculator", "add")
const toolList = fc.uniqueArray(toolName, { maxLength: 2 })

const jsonSchemaArb: fc.Arbitrary<Record<string, unknown>> = fc.letrec((tie) => ({
  schema: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.record({ type: fc.constantFrom("string", "number", "integer", "boolean", "null") }),
    fc.record({ type: fc.constant("string"), enum: fc.uniqueArray(fc.string({ minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 5 }) }),
    fc.record({ type: fc.constant("array"), items: tie("schema") }),
    fc.dictionary(fc.constantFrom("a", "b", "name", "count", "ok"), tie("schema"), { maxKeys: 4 }).map((properties) => ({
      type: "object",
      properties,
      required: Object.keys(properties)
    }))
  )
})).schema as fc.Arbitrary<Record<string, unknown>>

const hintsArb = fc.record(
  {
    maxTokens: fc.nat({ max: 512 }),
    temperature: fc.double({ min: 0, max: 2, noNaN: true }),
    topP: fc.double({ min: 0, max: 1, noNaN: true }),
    timeout: fc.integer({ min: 1_000, max: 20_000 }),
    options: fc.dictionary(fc.string({ maxLength: 6 }), scalar, { maxKeys: 3 })
  },
  { requiredKeys: [] }
)

/** A conversation on the /v1/run wire: a system message, a tool round, a last user message. */
const runMessages = fc.tuple(
  fc.option(shortText, { nil: undefined }),
  fc.boolean(),
  fc.array(fc.tuple(shortText, shortText), { maxLength: 3 }),
  shortText
).map(([system, toolRound, turns, last]) => [
  ...(system === undefined ? [] : [{ role: "system", content: system }]),
  ...turns.flatMap(([u, a]) => [{ role: "user", content: u }, { role: "assistant", content: a }]),
  ...(toolRound
    ? [
      { role: "user", content: "compute" },
      { role: "assistant", content: "", toolCalls: [{ id: "t1", name: "calculator", arguments: { expression: "1+1" } }] },
      { role: "tool", content: "2", toolCallId: "t1", name: "calculator" }
    ]
    : []),
  { role: "user", content: last }
])

const ids = fc.record(
  { requestId: fc.string({ minLength: 1, maxLength: 40 }), traceId: fc.hexaString({ minLength: 1, maxLength: 32 }) },
  { requiredKeys: [] }
)

const chatRun = fc.tuple(runMessages, fc.option(hintsArb, { nil: undefined }), fc.option(toolList, { nil: undefined }), ids)
  .map(([messages, hints, tools, extra]) => ({
    mode: "chat",
    messages,
    ...(hints === undefined ? {} : { hints }),
    ...(tools === undefined ? {} : { tools }),
    ...extra
  }))

const structuredRun = fc.tuple(runMessages, jsonSchemaArb, fc.boolean(), fc.boolean(), fc.option(fc.constantFrom('root ::= "a"', 'root ::= "\\"a\\""'), { nil: undefined }), ids)
  .map(([messages, schema, repairAllowed, strictValidation, grammar, extra]) => ({
    mode: "structured",
    messages,
    output: { schema, repairAllowed, strictValidation, ...(grammar === undefined ? {} : { grammar }) },
    ...extra
  }))

const redundantRun = fc.tuple(runMessages, jsonSchemaArb, fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 5 }), fc.constantFrom("majority", "unanimity"))
  .map(([messages, schema, n, quorum, voting]) => ({
    mode: "redundant",
    messages,
    output: { schema },
    redundancy: { n, quorum: Math.min(n, quorum), voting }
  }))

const stepArb = (i: number) =>
  fc.oneof(
    fc.record({
      name: fc.constant(`s${i}`),
      type: fc.constant("tool"),
      input: fc.oneof(
        fc.record({ name: fc.constant("calculator"), arguments: fc.record({ expression: fc.constantFrom("1+1", "2*(3+4)", "1/0", "10/4") }) }),
        fc.record({ name: fc.constant("add"), arguments: fc.record({ a: fc.integer(), b: fc.double({ noNaN: true }) }), id: fc.string({ maxLength: 10 }) })
      )
    }),
    fc.record({
      name: fc.constant(`s${i}`),
      type: fc.constant("infer"),
      input: fc.oneof(
        shortText,
        fc.record({ messages: fc.constant([{ _tag: "UserMessage", role: "user", content: "hi" }]), maxTokens: fc.nat({ max: 64 }), temperature: fc.double({ min: 0, max: 2, noNaN: true }) }, { requiredKeys: ["messages"] })
      )
    }),
    fc.record({ name: fc.constant(`s${i}`), type: fc.constant("infer") }),
    fc.record({ name: fc.constant(`s${i}`), type: fc.constantFrom("retrieve", "rerank", "validate", "custom"), input: shortText })
  ).chain((step) =>
    fc.oneof(
      fc.constant(step),
      fc.constant({ ...step, dependsOn: [] }),
      fc.constant({ ...step, dependsOn: i > 0 ? [`s${i - 1}`] : [] })
    )
  )

const planRun = fc.integer({ min: 1, max: 5 }).chain((n) =>
  fc.tuple(fc.tuple(...Array.from({ length: n }, (_, i) => stepArb(i))), fc.option(toolList, { nil: undefined }))
    .map(([steps, tools]) => ({ mode: "plan", messages: [], plan: { steps }, ...(tools === undefined ? {} : { tools }) }))
)

const chatMessagesOpenAi = fc.tuple(
  fc.option(fc.tuple(fc.constantFrom("system", "developer"), shortText), { nil: undefined }),
  fc.boolean(),
  fc.array(fc.tuple(shortText, shortText), { maxLength: 3 }),
  fc.oneof(shortText, fc.array(shortText.map((text) => ({ type: "text", text })), { minLength: 1, maxLength: 3 }))
).map(([system, toolRound, turns, last]) => [
  ...(system === undefined ? [] : [{ role: system[0], content: system[1] }]),
  ...turns.flatMap(([u, a]) => [{ role: "user", content: u }, { role: "assistant", content: a }]),
  ...(toolRound
    ? [
      { role: "user", content: "compute" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "add", arguments: '{"a":1,"b":2}' } }] },
      { role: "tool", content: "3", tool_call_id: "c1" }
    ]
    : []),
  { role: "user", content: last }
])

const chatCompletion = fc.record(
  {
    model: fc.constantFrom("canned", "gpt-4o", "x"),
    messages: chatMessagesOpenAi,
    tools: toolList.map((names) => names.map((name) => ({ type: "function", function: { name, parameters: { type: "object" } } }))),
    response_format: fc.oneof(
      fc.constant({ type: "text" }),
      fc.constant({ type: "json_object" }),
      jsonSchemaArb.map((schema) => ({ type: "json_schema", json_schema: { name: "out", schema, strict: true } }))
    ),
    stream: fc.boolean(),
    max_tokens: fc.nat({ max: 256 }),
    max_completion_tokens: fc.nat({ max: 256 }),
    temperature: fc.double({ min: 0, max: 2, noNaN: true }),
    top_p: fc.double({ min: 0, max: 1, noNaN: true }),
    n: fc.constant(1),
    user: fc.string({ maxLength: 10 })
  },
  { requiredKeys: ["messages"] }
)

// ---------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------


/** A mutation at a path chosen by `at` (0..1) among the value's paths. */
type Mutation =
  | { readonly kind: "wrongType"; readonly at: number; readonly value: Json }
  | { readonly kind: "hugeString"; readonly at: number; readonly length: number; readonly unit: string }
  | { readonly kind: "deep"; readonly at: number; readonly levels: number; readonly shape: "array" | "object" }
  | { readonly kind: "hugeArray"; readonly at: number; readonly length: number }
  | { readonly kind: "oddString"; readonly at: number; readonly value: string }
  | { readonly kind: "protoKey"; readonly at: number; readonly key: string; readonly value: Json }
  | { readonly kind: "oddNumber"; readonly at: number; readonly raw: string }
  | { readonly kind: "missing"; readonly at: number }
  | { readonly kind: "unknownField"; readonly at: number; readonly key: string; readonly value: Json }
  | { readonly kind: "marker"; readonly at: number; readonly asKey: boolean }

/** Whole-body mutations, applied to the text or the headers. */
type BodyMutation =
  | { readonly kind: "none" }
  | { readonly kind: "contentType"; readonly value: string | undefined }
  | { readonly kind: "truncate"; readonly at: number }
  | { readonly kind: "empty"; readonly value: string }
  | { readonly kind: "notObject"; readonly value: string }
  | { readonly kind: "bytes"; readonly value: ReadonlyArray<number> }
  | { readonly kind: "duplicateKey" }
  | { readonly kind: "oversized" }

const at = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })
const oddStrings = fc.oneof(
  fc.constantFrom("\u0000", "a\u0000b", "\u202e\u200b\ufeff", "\ud800", "\udfff\ud800", "💥".repeat(50), "\r\n\t\b\f\v", "%00", "../../etc/passwd", "${process.env}", "<script>"),
  fc.string16bits({ maxLength: 40 }),
  fc.stringOf(fc.integer({ min: 0, max: 31 }).map((c) => String.fromCharCode(c)), { maxLength: 40 })
)

const hugeLengths = [2_000, 20_000, 100_000, 300_000]
const hugeUnits = ["z", "é", "\u0000", "💥", "ab\"\\"]
const deepLevels = [64, 65, 200, 1_000, 3_000, 8_000]
const arrayLengths = [600, 5_000, 99_000, 120_000]

const hugeString = (unit: string, length: number) =>
  cached(`s${unit}${length}`, () => unit.repeat(Math.ceil(length / unit.length)))
const deepText = (shape: "array" | "object", levels: number) =>
  cached(`d${shape}${levels}`, () =>
    shape === "array"
      ? `${"[".repeat(levels)}1${"]".repeat(levels)}`
      : `${'{"a":'.repeat(levels)}"x"${"}".repeat(levels)}`)
const arrayText = (length: number) =>
  cached(`a${length}`, () => `[${Array.from({ length }, (_, i) => i % 10).join(",")}]`)
const padding = () => cached("pad", () => "x".repeat(1024 * 1024 + 10))

/** Every large text made before the heap is first measured, so the cache is not counted as growth. */
const makeLargeTexts = () => {
  for (const unit of hugeUnits) for (const length of hugeLengths) hugeString(unit, length)
  for (const levels of deepLevels) {
    deepText("array", levels)
    deepText("object", levels)
  }
  for (const length of arrayLengths) arrayText(length)
  padding()
}

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant("wrongType" as const), at, value: jsonAny }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("hugeString" as const), at, length: fc.constantFrom(...hugeLengths), unit: fc.constantFrom(...hugeUnits) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("deep" as const), at, levels: fc.constantFrom(...deepLevels), shape: fc.constantFrom("array" as const, "object" as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("hugeArray" as const), at, length: fc.constantFrom(...arrayLengths) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("oddString" as const), at, value: oddStrings }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("protoKey" as const), at, key: fc.constantFrom("__proto__", "constructor", "prototype", "toString", "hasOwnProperty"), value: jsonAny }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("oddNumber" as const), at, raw: fc.constantFrom("1e308", "-1e308", "1e999", "-1e999", "-0", "0.0000000000000000000001", "5e-324", "9007199254740993", "1.7976931348623157e308", "\"NaN\"", "\"Infinity\"", "\"-0\"", "-1", "1.5") }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("missing" as const), at }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("unknownField" as const), at, key: fc.string({ maxLength: 12 }), value: jsonAny }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("marker" as const), at, asKey: fc.boolean() }) }
)

const bodyMutation: fc.Arbitrary<BodyMutation> = fc.oneof(
  { weight: 40, arbitrary: fc.constant({ kind: "none" as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("contentType" as const), value: fc.constantFrom(undefined, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp", "application/json; charset=utf-8", "APPLICATION/JSON", "json", "") }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("truncate" as const), at }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("empty" as const), value: fc.constantFrom("", " ", "\n\t ", "\u0000") }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("notObject" as const), value: fc.constantFrom("null", "[]", "\"chat\"", "42", "true", "[{}]", "{}", "\ufeff{}", "{\"mode\":\"chat\"}{}") }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("bytes" as const), value: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 64 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: "duplicateKey" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "oversized" as const }) }
)

/** Other paths and methods. */
const route = fc.oneof(
  { weight: 60, arbitrary: fc.constant({ method: "POST", path: "run" as const }) },
  { weight: 60, arbitrary: fc.constant({ method: "POST", path: "chat" as const }) },
  {
    weight: 3,
    arbitrary: fc.record({
      method: fc.constantFrom("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "POST"),
      path: fc.constantFrom("/v1/run", "/v1/chat/completions", "/health", "/v1/run/", "/v1/run?x=1", "/V1/RUN", "/v2/everything", "/", "/v1/../v1/run", "/%00", "/v1/run%2f", `/${"p".repeat(500)}`)
    })
  }
)

interface Case {
  readonly route: { readonly method: string; readonly path: "run" | "chat" | string }
  readonly base: Json
  readonly mutations: ReadonlyArray<Mutation>
  readonly body: BodyMutation
}

const caseArb: fc.Arbitrary<Case> = route.chain((r) =>
  fc.record({
    route: fc.constant(r),
    base: (r.path === "chat"
      ? chatCompletion
      : r.path === "run"
      ? fc.oneof(chatRun, structuredRun, redundantRun, planRun)
      : fc.oneof(chatRun, chatCompletion)) as fc.Arbitrary<Json>,
    mutations: fc.oneof(
      { weight: 3, arbitrary: fc.constant([] as Array<Mutation>) },
      { weight: 7, arbitrary: fc.array(mutation, { minLength: 1, maxLength: 3 }) }
    ),
    body: bodyMutation
  })
)

// -- applying mutations ------------------------------------------------------------

const isObject = (u: unknown): u is Record<string, Json> => typeof u === "object" && u !== null && !Array.isArray(u)

/** Every place in a value, as (parent, key) pairs; the root as undefined. */
const placesOf = (root: Json): Array<{ parent: Record<string, Json> | Array<Json>; key: string | number } | undefined> => {
  const out: Array<{ parent: Record<string, Json> | Array<Json>; key: string | number } | undefined> = [undefined]
  const stack: Array<Json> = [root]
  while (stack.length > 0 && out.length < 2_000) {
    const value = stack.pop()!
    if (Array.isArray(value)) {
      value.forEach((child, i) => {
        out.push({ parent: value, key: i })
        stack.push(child)
      })
    } else if (isObject(value)) {
      for (const key of Object.keys(value)) {
        out.push({ parent: value, key })
        stack.push(value[key]!)
      }
    }
  }
  return out
}

const define = (target: Record<string, Json>, key: string, value: Json) =>
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })

/** The request as a value and as text: mutations applied, raw JSON spliced in where JSON cannot say it. */
interface Built {
  readonly value: Json
  readonly text: string | Uint8Array
  readonly contentType: string | undefined
  readonly markers: ReadonlyArray<string>
}

const markerAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

/** A marker unique to the case and its position: ASCII letters and digits, so JSON never escapes it. */
const makeMarker = (caseIndex: number, n: number): string => {
  let state = (SEED ^ Math.imul(caseIndex + 1, 2654435761) ^ Math.imul(n + 1, 40503)) >>> 0
  let out = `MK${caseIndex}x${n}q`
  while (out.length < MARKER_LENGTH + 40) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0
    out += markerAlphabet[(state >>> 16) % markerAlphabet.length]
  }
  return out
}

const build = (c: Case, caseIndex: number): Built => {
  const value = structuredClone(c.base) as Json
  let root: Json = value
  const raws = new Map<string, string>()
  const markers: Array<string> = []
  const rawToken = (raw: string) => {
    const token = `@@RAW${raws.size}@@`
    raws.set(token, raw)
    return token
  }
  const put = (at: number, replacement: Json) => {
    const places = placesOf(root)
    const place = places[Math.floor(at * places.length)]
    if (place === undefined) root = replacement
    else if (Array.isArray(place.parent)) place.parent[place.key as number] = replacement
    else define(place.parent, place.key as string, replacement)
  }
  const objectAt = (at: number): Record<string, Json> | undefined => {
    const objects = placesOf(root).map((p) => (p === undefined ? root : (p.parent as any)[p.key] as Json)).filter(isObject)
    return objects[Math.floor(at * objects.length)]
  }
  for (const m of c.mutations) {
    switch (m.kind) {
      case "wrongType":
        put(m.at, m.value)
        break
      case "hugeString":
        put(m.at, hugeString(m.unit, m.length))
        break
      case "deep": {
        put(m.at, rawToken(deepText(m.shape, m.levels)))
        break
      }
      case "hugeArray":
        put(m.at, rawToken(arrayText(m.length)))
        break
      case "oddString":
        put(m.at, m.value)
        break
      case "protoKey": {
        const target = objectAt(m.at)
        if (target !== undefined) define(target, m.key, m.value)
        break
      }
      case "oddNumber":
        put(m.at, rawToken(m.raw))
        break
      case "missing": {
        const places = placesOf(root).filter((p) => p !== undefined)
        const place = places[Math.floor(m.at * places.length)]
        if (place !== undefined) {
          if (Array.isArray(place.parent)) place.parent.splice(place.key as number, 1)
          else delete place.parent[place.key as string]
        }
        break
      }
      case "unknownField": {
        const target = objectAt(m.at)
        if (target !== undefined) define(target, m.key, m.value)
        break
      }
      case "marker": {
        const marker = makeMarker(caseIndex, markers.length)
        markers.push(marker)
        const target = m.asKey ? objectAt(m.at) : undefined
        if (target !== undefined) define(target, marker, "v")
        else put(m.at, marker)
        break
      }
    }
  }
  let text = JSON.stringify(root)
  for (const [token, raw] of raws) text = text.split(JSON.stringify(token)).join(raw)
  let contentType: string | undefined = "application/json"
  let body: string | Uint8Array = text
  switch (c.body.kind) {
    case "none":
      break
    case "contentType":
      contentType = c.body.value
      break
    case "truncate":
      body = text.slice(0, Math.floor(c.body.at * text.length))
      break
    case "empty":
      body = c.body.value
      break
    case "notObject":
      body = c.body.value
      break
    case "bytes":
      body = new Uint8Array(c.body.value)
      break
    case "duplicateKey":
      body = text.startsWith("{") ? `{"mode":"plan","messages":[],${text.slice(1)}` : text
      break
    case "oversized":
      body = text.startsWith("{") ? `{"pad":"${padding()}",${text.slice(1)}` : text
      break
  }
  return { value: root, text: body, contentType, markers }
}

// ---------------------------------------------------------------------------
// What an answer may be
// ---------------------------------------------------------------------------

const byteLength = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? "")

/**
 * What a success may echo of a /v1/run plan: its tool steps' arguments and ids
 * (in toolCallsMade and the steps' outputs) and the step names (keys of the
 * outputs, default call ids). Nothing else of a request comes back.
 */
const legitimateEcho = (request: Json): { readonly bytes: number; readonly values: ReadonlyArray<unknown> } => {
  if (!isObject(request) || !isObject(request.plan) || !Array.isArray(request.plan.steps)) return { bytes: 0, values: [] }
  let bytes = 0
  const values: Array<unknown> = []
  for (const step of request.plan.steps) {
    if (!isObject(step)) continue
    bytes += 3 * byteLength(step.name)
    values.push(step.name)
    if (isObject(step.input)) {
      bytes += byteLength(step.input.arguments) + 2 * byteLength(step.input.id) + byteLength(step.input.name)
      values.push(step.input.arguments, step.input.id, step.input.name)
    }
  }
  return { bytes, values }
}

/** The longest run of `marker` that `text` contains, found from aligned 100-character windows. */
const longestRun = (text: string, marker: string): number => {
  let longest = 0
  for (let w = 0; w + 100 <= marker.length; w += 100) {
    const window = marker.slice(w, w + 100)
    for (let i = text.indexOf(window); i !== -1; i = text.indexOf(window, i + 1)) {
      let left = 0
      while (w - left - 1 >= 0 && i - left - 1 >= 0 && text[i - left - 1] === marker[w - left - 1]) left++
      let right = 100
      while (w + right < marker.length && i + right < text.length && text[i + right] === marker[w + right]) right++
      longest = Math.max(longest, left + right)
    }
  }
  return longest
}

const decodeRun = Schema.decodeUnknownEither(SystemResponse)
// excess properties an error: the chat completion is written as built, not encoded through this schema (http/ChatCompletions)
const decodeCompletion = Schema.decodeUnknownEither(ChatCompletion, { onExcessProperty: "error" })

const isSystemError = (u: unknown): boolean =>
  isObject(u) && typeof u.code === "string" && typeof u.category === "string" && typeof u.retryable === "boolean" &&
  typeof u.message === "string" && isObject(u.details)

const isOpenAiError = (u: unknown): boolean =>
  isObject(u) && isObject(u.error) && typeof u.error.message === "string" && typeof u.error.type === "string" &&
  typeof u.error.code === "string"

/** Every rule an answer breaks (none: an empty list). */
const problemsOf = (path: string, method: string, built: Built, reply: Reply): Array<string> => {
  const problems: Array<string> = []
  const route = path.split("?")[0]
  const chatShaped = route === "/v1/chat/completions"
  const contentType = reply.headers.get("content-type") ?? ""
  if (reply.status === 0) return [reply.text]
  if (reply.status >= 500) problems.push(`status ${reply.status} (the engine always answers: a 5xx is a bug)`)
  if (method === "HEAD") return problems
  // the runs page: GET / is its static HTML, the same for every request (nothing of the request in it)
  if (route === "/" && method === "GET" && reply.status === 200) {
    if (!contentType.startsWith("text/html")) problems.push(`the page as ${JSON.stringify(contentType)}`)
    for (const marker of built.markers) {
      if (longestRun(reply.text, marker) >= ECHO_RUN) problems.push("a marker of the request echoed by the page")
    }
    return problems
  }
  const sse = reply.status === 200 && contentType.startsWith("text/event-stream")
  if (sse) {
    if (!chatShaped) problems.push("an event stream outside chat completions")
    const events = reply.text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6))
    if (events.at(-1) !== "[DONE]") problems.push("the stream does not end with [DONE]")
    for (const event of events.slice(0, -1)) {
      try {
        const parsed = JSON.parse(event)
        if (isObject(parsed) && parsed.error !== undefined) problems.push("an error inside a 200 stream")
      } catch {
        problems.push(`an event that is not JSON: ${event.slice(0, 80)}`)
      }
    }
  } else {
    if (!contentType.includes("application/json")) problems.push(`content type ${JSON.stringify(contentType)}`)
    if (reply.json === undefined) problems.push("a body that is not JSON")
    else if (reply.status >= 400) {
      if (chatShaped ? !isOpenAiError(reply.json) : !(isObject(reply.json) && isSystemError(reply.json.error) && Either.isRight(decodeRun(reply.json)))) {
        problems.push(`an error not in the endpoint's shape (${chatShaped ? "OpenAI" : "SystemResponse"})`)
      }
    } else if (reply.status === 200) {
      if (route === "/v1/run" && !(Either.isRight(decodeRun(reply.json)) && reply.json.error === undefined)) {
        problems.push("a 200 that is not a SystemResponse without error")
      }
      if (chatShaped && Either.isLeft(decodeCompletion(reply.json))) problems.push("a 200 that is not a chat.completion")
    } else problems.push(`status ${reply.status}`)
  }
  const echo = route === "/v1/run" ? legitimateEcho(built.value) : { bytes: 0, values: [] }
  const size = Buffer.byteLength(reply.text)
  const bound = (reply.status >= 400 ? ERROR_BOUND : SUCCESS_BOUND) + echo.bytes
  if (size > bound) problems.push(`${size} bytes, more than ${bound}`)
  // an error itself quotes excerpts only; the rest of an answer may carry what a plan echoes
  const echoed = JSON.stringify(echo.values)
  const error = reply.status >= 400 && isObject(reply.json) ? JSON.stringify(reply.json.error) ?? "" : ""
  for (const marker of built.markers) {
    const run = Math.max(longestRun(error, marker), echoed.includes(marker.slice(0, 100)) ? 0 : longestRun(reply.text, marker))
    if (run >= ECHO_RUN) problems.push(`a marker of the request echoed (${run} characters)`)
  }
  return problems
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

const heapAfterGc = Effect.promise(async () => {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  return process.memoryUsage().heapUsed
})

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

interface Sent {
  readonly index: number
  readonly method: string
  readonly path: string
  readonly built: Built
}

const toSent = (c: Case, index: number): Sent => {
  const path = c.route.path === "run" ? "/v1/run" : c.route.path === "chat" ? "/v1/chat/completions" : c.route.path
  return { index, method: c.route.method, path, built: build(c, index) }
}

const describeCase = (sent: Sent): string => {
  const text = typeof sent.built.text === "string" ? sent.built.text : `<${sent.built.text.length} bytes>`
  return `case ${sent.index} (seed ${SEED}): ${sent.method} ${sent.path.slice(0, 60)} ${
    sent.built.contentType ?? "<no content type>"
  } ${text.length > 300 ? `${text.slice(0, 300)}… (${text.length} chars)` : text}`
}

/**
 * One request; a connection error is retried once (a keep-alive socket the server
 * closed while idle), and a second one is an answer of status 0 with the error.
 */
const fire = (url: string, sent: Sent): Effect.Effect<Reply> =>
  Effect.promise(() =>
    once(url, sent).catch(() => once(url, sent)).catch((e: unknown): Reply => ({
      status: 0,
      headers: new Headers(),
      text: `no answer: ${e instanceof Error ? `${e.message} ${String(e.cause ?? "")}` : String(e)}`,
      json: undefined
    }))
  )

const once = (url: string, sent: Sent): Promise<Reply> =>
  (async (): Promise<Reply> => {
    const headers: Record<string, string> = {}
    if (sent.built.contentType !== undefined) headers["content-type"] = sent.built.contentType
    const hasBody = sent.method !== "GET" && sent.method !== "HEAD"
    const res = await fetch(`${url}${sent.path}`, {
      method: sent.method,
      headers,
      ...(hasBody ? { body: sent.built.text } : {}),
      signal: AbortSignal.timeout(15_000)
    })
    const text = await res.text()
    let json: unknown = undefined
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: res.status, headers: res.headers, text, json }
  })()

describe("fuzzing pagantic serve", () => {
  it("the checks catch what they are for: a bare 5xx, an echo, an oversized error, a wrong shape", () => {
    const marker = makeMarker(0, 0)
    const built: Built = { value: { mode: "chat" }, text: "{}", contentType: "application/json", markers: [marker] }
    const reply = (status: number, body: unknown, contentType = "application/json"): Reply => {
      const text = typeof body === "string" ? body : JSON.stringify(body)
      let json: unknown = undefined
      try {
        json = JSON.parse(text)
      } catch {
        json = undefined
      }
      return { status, headers: new Headers({ "content-type": contentType }), text, json }
    }
    const error = (message: string, details: Record<string, unknown> = {}) => ({
      requestId: "r",
      content: "",
      toolCallsMade: [],
      tokenUsage: TokenUsage.empty,
      error: { code: "CONFIG_INVALID_REQUEST", category: "ConfigurationFailure", retryable: false, message, details }
    })
    expect(problemsOf("/v1/run", "POST", built, reply(400, error("bad")))).toEqual([])
    expect(problemsOf("/v1/run", "POST", built, reply(500, "", "text/plain")).length).toBeGreaterThan(1)
    expect(problemsOf("/v1/run", "POST", built, reply(400, error(`got ${marker.slice(10, 210)}`)))).toEqual([
      "a marker of the request echoed (200 characters)"
    ])
    expect(problemsOf("/v1/run", "POST", built, reply(400, error(`got ${marker.slice(10, 209)}`)))).toEqual([])
    expect(problemsOf("/v1/run", "POST", built, reply(400, error("x".repeat(9_000))))[0]).toMatch(/bytes, more than 8192/)
    expect(problemsOf("/v1/chat/completions", "POST", built, reply(400, error("bad")))[0]).toMatch(/OpenAI/)
    expect(longestRun(`..${marker.slice(5, 420)}..`, marker)).toBe(415)
  })

  it.live(`${CASES.toLocaleString("en-US")} generated and mutated requests: no 5xx, JSON errors, bounded answers, no echo, alive, flat memory`, () =>
    Effect.scoped(
      Effect.gen(function* () {
        console.log(`HttpFuzz: seed ${SEED} (FUZZ_SEED=${SEED} replays this run), ${CASES} cases`)
        // the event log and metrics at small bounds, so that the warm-up fills them and the
        // heap is measured with them at the size they keep (full) before and after
        const server = yield* serve({
          engine: cannedEngine,
          tools: [Calculator.calculator, add],
          observe: Layer.merge(Observe.eventLogBounded({ maxEvents: 500 }), Observe.metricsBounded({ maxSamples: 64 }))
        })
        const { url } = server
        const cases = fc.sample(caseArb, { seed: SEED, numRuns: CASES })
        const failures: Array<string> = []
        const statuses = new Map<number, number>()
        let slowestHealth = 0
        let duplicatesSent = 0
        let conflicts = 0

        const check = (sent: Sent, reply: Reply) => {
          statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1)
          const problems = problemsOf(sent.path, sent.method, sent.built, reply)
          if (problems.length > 0 && failures.length < 20) {
            failures.push(`${problems.join("; ")}\n  ${describeCase(sent)}\n  answer ${reply.status}: ${reply.text.slice(0, 300)}`)
          }
        }
        const timedHealth = Effect.map(
          Effect.timed(send(`${url}/health`, { timeoutMs: 5_000 })),
          ([elapsed, res]) => ({ status: res.status, ms: Duration.toMillis(elapsed) })
        )
        // with no request in flight; a second try when the first is slow, so that a pause
        // of this shared machine (other processes, a GC) is not taken for a stuck server
        const health = Effect.gen(function* () {
          let answer = yield* timedHealth
          if (answer.status !== 200 || answer.ms > HEALTH_BOUND_MS) answer = yield* timedHealth
          slowestHealth = Math.max(slowestHealth, answer.ms)
          if (answer.status !== 200 || answer.ms > HEALTH_BOUND_MS) {
            failures.push(`GET /health answered ${answer.status} in ${answer.ms.toFixed(0)} ms twice (bound ${HEALTH_BOUND_MS} ms)`)
          }
        })

        // warm up before the heap is measured: the JIT's code for every path (a few MB over
        // the first thousand requests), connections, lazily built schemas, the event log full
        const warm = fc.sample(caseArb, { seed: SEED ^ 0x5eed, numRuns: 1_000 })
        yield* Effect.forEach(warm, (c, i) => fire(url, toSent(c, -1 - i)), { concurrency: CONCURRENCY, discard: true })
        // small requests on every connection, so that no socket still holds the last large body
        const settle = Effect.zipRight(
          Effect.forEach(Array.from({ length: 4 * CONCURRENCY }), () => send(`${url}/health`), { concurrency: CONCURRENCY, discard: true }),
          server.clearSessions
        )
        makeLargeTexts()
        yield* settle
        const before = yield* heapAfterGc
        const started = performance.now()

        for (let from = 0; from < cases.length && failures.length < 20; from += HEALTH_EVERY) {
          // each request built when it is sent, so that no batch of bodies outlives its batch
          const indices = Array.from({ length: Math.min(HEALTH_EVERY, cases.length - from) }, (_, i) => from + i)
          yield* Effect.forEach(
            indices,
            (index) =>
              Effect.suspend(() => {
                const sent = toSent(cases[index]!, index)
                return Effect.map(fire(url, sent), (reply) => check(sent, reply))
              }),
            { concurrency: CONCURRENCY, discard: true }
          )
          // the same client-chosen request id in flight three times at once: at most one runs
          if ((from / HEALTH_EVERY) % 8 === 0) {
            const requestId = `dup-${from}`
            const body = JSON.stringify({ mode: "chat", messages: [{ role: "user", content: "slow duplicate" }], requestId })
            const sent: Sent = { index: from, method: "POST", path: "/v1/run", built: { value: null, text: body, contentType: "application/json", markers: [] } }
            const replies = yield* Effect.forEach([0, 1, 2], () => fire(url, sent), { concurrency: "unbounded" })
            duplicatesSent += replies.length
            conflicts += replies.filter((r) => r.status === 409).length
            for (const reply of replies) check(sent, reply)
            if (replies.filter((r) => r.status === 200).length < 1) failures.push(`duplicate ids: no request ran (${replies.map((r) => r.status)})`)
          }
          yield* health
        }
        const elapsed = performance.now() - started
        yield* settle
        const after = yield* heapAfterGc
        const summary = [...statuses.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`).join(", ")
        console.log(
          `HttpFuzz: ${cases.length + duplicatesSent} requests in ${(elapsed / 1000).toFixed(1)} s (seed ${SEED}); statuses ${summary}; ` +
            `409 for duplicate ids in flight: ${conflicts}; slowest /health ${slowestHealth.toFixed(1)} ms; ` +
            `heap ${mb(before)} -> ${mb(after)} (${(((after - before) / before) * 100).toFixed(1)}%)`
        )
        expect(failures, failures.join("\n\n")).toEqual([])
        expect(cases.length + duplicatesSent).toBeGreaterThanOrEqual(Math.min(CASES, 10_000))
        expect(after, `heap ${mb(before)} -> ${mb(after)}`).toBeLessThanOrEqual(before * 1.1)
      })
    ).pipe(Effect.timeout("420 seconds"), Effect.orDie), 450_000)
})
