/**
 * Seeds 01-03 to the letter (issue #12), through the facade: the contract gaps
 * whose fix is in the facade's request handling. Gap 1: every ExecutionHint
 * reaches every inference of every mode. Gap 5: a failed request reports the
 * tokens and tool calls it spent before it failed.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { InferenceFailure, OrchestrationFailure } from "../src/domain/Failure.js"
import { causeChain, maxCauseDepth, SystemError, SystemRequest, toSystemError } from "../src/domain/System.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ModelReranker from "../src/layers/ModelReranker.js"
import * as RuleValidator from "../src/layers/RuleValidator.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { forClient } from "../src/adapters/http/Refusals.js"
import * as Facade from "../src/programs/Facade.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import { w3cTraceId } from "../src/programs/internal/Spans.js"
import { type InferenceRequest, InferenceResult } from "../src/services/Engine.js"
import { EventLog } from "../src/services/EventLog.js"
import * as Validator from "../src/services/Validator.js"
import { add, failing } from "./support/tools.js"

/** Tests that could wait forever on the TestClock end here instead. */
const bound = 20_000

const decode = Schema.decodeUnknownSync(SystemRequest)

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), Constraint.layer, Observe.eventLogMemory)
const withTools = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(env(script), Registry.layer([add, failing]))

const schemaOutput = {
  schema: {
    type: "object",
    properties: { sentiment: { type: "string", enum: ["positive", "negative"] } },
    required: ["sentiment"]
  }
}

/** A request run to its response with the TestClock moved on (retries wait on it). */
const respond = (request: Record<string, unknown>) =>
  Effect.gen(function* () {
    const system = yield* Facade.make()
    const fiber = yield* Effect.fork(system.run(decode(request)))
    yield* TestClock.adjust("1 minute")
    return yield* Fiber.join(fiber)
  })

// ---------------------------------------------------------------------------
// Gap 1: hints
// ---------------------------------------------------------------------------

const hints = { maxTokens: 77, temperature: 0.7, topP: 0.9, options: { mirostat: 2, repeat_penalty: 1.1 } }

/** Every request the engine was sent carries every hint. */
const expectHinted = (requests: ReadonlyArray<InferenceRequest>, count: number) => {
  expect(requests).toHaveLength(count)
  for (const [i, r] of requests.entries()) {
    expect({ i, maxTokens: r.maxTokens, temperature: r.temperature, topP: r.topP, options: r.options }).toEqual({
      i,
      ...hints
    })
  }
}

describe("gap 1: every ExecutionHint reaches every inference of every mode", { timeout: bound }, () => {
  it.effect("chat: both inferences of a turn with a tool round", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "chat", messages: [{ role: "user", content: "2+3?" }], hints })
      expect(response.error).toBeUndefined()
      expectHinted(yield* ScriptedEngine.requests, 2)
    }).pipe(
      Effect.provide(
        withTools([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")])
      )
    ))

  it.effect("structured: the tool phase's inferences and the structured reply", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        tools: ["add"],
        hints
      })
      expect(response.error).toBeUndefined()
      expectHinted(yield* ScriptedEngine.requests, 3)
    }).pipe(
      Effect.provide(
        withTools([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }]),
          ScriptedEngine.reply("done"),
          ScriptedEngine.reply('{"sentiment":"positive"}')
        ])
      )
    ))

  it.effect("structured: a re-prompted reply carries them too", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        hints
      })
      expect(response.error).toBeUndefined()
      expectHinted(yield* ScriptedEngine.requests, 2)
    }).pipe(
      Effect.provide(env([ScriptedEngine.reply('{"sentiment":"great"}'), ScriptedEngine.reply('{"sentiment":"positive"}')]))
    ))

  it.effect("redundant: every replica", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "redundant",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        redundancy: { n: 3 },
        hints
      })
      expect(response.error).toBeUndefined()
      expectHinted(yield* ScriptedEngine.requests, 3)
    }).pipe(Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"sentiment":"positive"}'))))))

  it.effect("plan: every infer step; a step's own setting is more specific and stays", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "plan",
        messages: [],
        hints,
        plan: {
          steps: [
            { name: "first", type: "infer", input: "Explain 5" },
            { name: "second", type: "infer", input: "Explain 6", dependsOn: [] },
            {
              name: "own",
              type: "infer",
              dependsOn: [],
              input: { messages: [{ _tag: "UserMessage", role: "user", content: "Explain 7" }], temperature: 0.1, options: { mirostat: 0 } }
            }
          ]
        }
      })
      expect(response.error).toBeUndefined()
      const requests = yield* ScriptedEngine.requests
      const byPrompt = (text: string) => requests.find((r) => r.messages.at(-1)?.content === text)!
      expectHinted([byPrompt("Explain 5"), byPrompt("Explain 6")], 2)
      expect(byPrompt("Explain 7")).toMatchObject({
        maxTokens: 77,
        temperature: 0.1,
        topP: 0.9,
        options: { mirostat: 0, repeat_penalty: 1.1 }
      })
    }).pipe(Effect.provide(env([ScriptedEngine.reply("Five."), ScriptedEngine.reply("Six."), ScriptedEngine.reply("Seven.")]))))

  it.effect("task: the analyzer and the default processor `infer`", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "task", messages: [{ role: "user", content: "do it" }], hints })
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ a: "red" })
      const requests = yield* ScriptedEngine.requests
      expectHinted(requests, 2)
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply(
            toJson(new TaskList({ analysis: "one", tasks: [new Task({ id: "a", type: "t", processor: "infer", description: "Name a colour" })] }))
          ),
          ScriptedEngine.reply("red")
        ])
      )
    ))

  it.effect("a maxTokens or topP of 0 means the engine's default: nothing is sent for them", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "chat",
        messages: [{ role: "user", content: "hi" }],
        hints: { maxTokens: 0, topP: 0 }
      })
      expect(response.error).toBeUndefined()
      const [request] = yield* ScriptedEngine.requests
      expect(request!.topP).toBeUndefined()
      expect(request!.maxTokens).not.toBe(0)
    }).pipe(Effect.provide(env([ScriptedEngine.reply("hello")]))))
})

// ---------------------------------------------------------------------------
// Gap 5: what a failed request spent
// ---------------------------------------------------------------------------

const broken = (message: string) => ScriptedEngine.fail(InferenceFailure.modelUnavailable(message))

describe("gap 5: a failed request reports the tokens and tool calls it spent", { timeout: bound }, () => {
  it.effect("chat: the first inference's usage and the tool call it asked for, then the engine failed", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "chat", messages: [{ role: "user", content: "2+3?" }] })
      expect(response.error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      expect(response.tokenUsage).toMatchObject({ promptTokens: 12, outputTokens: 3, calls: 1 })
      expect(response.toolCallsMade.map((c) => [c.name, c.arguments, c.result, c.isError])).toEqual([
        ["add", { a: 2, b: 3 }, "5", false]
      ])
    }).pipe(
      Effect.provide(
        withTools([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { promptTokens: 12, outputTokens: 3 } }),
          broken("the model went away")
        ])
      )
    ))

  it.effect("structured: every rejected reply's usage", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput
      })
      expect(response.error?.code).toBe("CONSTRAINT_ENUM_UNRECOGNIZED")
      expect(response.tokenUsage).toMatchObject({ promptTokens: 30, calls: 3 })
    }).pipe(
      Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"sentiment":"great"}')))))
    )

  it.effect("structured with tools: the tool phase's calls (a failed one as an error record) and usage", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        tools: ["add", "failing"]
      })
      expect(response.error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      expect(response.tokenUsage).toMatchObject({ promptTokens: 20, calls: 2 })
      expect(response.toolCallsMade.map((c) => [c.id, c.name, c.isError])).toEqual([
        ["t1", "add", false],
        ["t2", "failing", true]
      ])
      expect(response.toolCallsMade[1]!.result).toContain("TOOL_EXECUTION_FAILED")
    }).pipe(
      Effect.provide(
        withTools([
          ScriptedEngine.toolCalls([{ id: "t1", name: "add", arguments: { a: 1, b: 1 } }, { id: "t2", name: "failing", arguments: {} }]),
          ScriptedEngine.reply("done"),
          broken("gone")
        ])
      )
    ))

  it.effect("redundant: every replica's reply, though none was valid", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "redundant",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        redundancy: { n: 3 }
      })
      expect(response.error?.category).toBe("ConstraintFailure")
      expect(response.tokenUsage).toMatchObject({ promptTokens: 30, calls: 3 })
    }).pipe(Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"sentiment":"great"}'))))))

  it.effect("plan: the infer step's usage and the tool step's failed call", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "plan",
        messages: [],
        plan: {
          steps: [
            { name: "think", type: "infer", input: "Explain 5" },
            { name: "sum", type: "tool", input: { name: "add", arguments: { a: 2, b: 2 }, id: "s1" } },
            { name: "break", type: "tool", input: { name: "failing", arguments: {}, id: "s2" } }
          ]
        }
      })
      expect(response.error?.code).toBe("TOOL_EXECUTION_FAILED")
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10, calls: 1 })
      expect(response.toolCallsMade.map((c) => [c.id, c.name, c.result, c.isError])).toEqual([
        ["s1", "add", "4", false],
        ["s2", "failing", expect.stringContaining("the disk is full"), true]
      ])
    }).pipe(Effect.provide(withTools([ScriptedEngine.reply("Five.")]))))

  it.effect("task: the analyzer's replies, though none was a task list", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "task", messages: [{ role: "user", content: "do it" }] })
      expect(response.error).toBeDefined()
      const analyzed = (yield* ScriptedEngine.requests).length
      expect(analyzed).toBeGreaterThan(0)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10 * analyzed, calls: analyzed })
    }).pipe(Effect.provide(env(Array.from({ length: 5 }, () => ScriptedEngine.reply("no tasks here"))))))

  it.effect("a request refused at INIT spent nothing", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "structured", messages: [{ role: "user", content: "x" }] })
      expect(response.error?.code).toBe("CONFIG_SCHEMA_REQUIRED")
      expect(response.tokenUsage.calls).toBe(0)
      expect(response.toolCallsMade).toEqual([])
    }).pipe(Effect.provide(env([]))))
})

// ---------------------------------------------------------------------------
// Gap 10: the cause chain
// ---------------------------------------------------------------------------

describe("gap 10: SystemError.causedBy wraps the underlying error as a chain", { timeout: bound }, () => {
  it("each link keeps its failure's tag and code or its error's name, and follows its own cause; the chain encodes and decodes", () => {
    const root = new Error("ECONNREFUSED 127.0.0.1:8080")
    const replica = InferenceFailure.engineError("the engine is down", {}, root)
    const top = OrchestrationFailure.noConsensus("only 1 of 3 replicas produced a valid candidate", { cause: replica })
    const error = toSystemError(top)
    expect(error.causedBy).toEqual({
      name: "InferenceFailure",
      code: "INFERENCE_ENGINE_ERROR",
      message: "the engine is down",
      causedBy: { name: "Error", message: "ECONNREFUSED 127.0.0.1:8080" }
    })
    const wire = JSON.parse(JSON.stringify(Schema.encodeSync(SystemError)(error)))
    expect(Schema.decodeUnknownSync(SystemError)(wire).causedBy).toEqual(error.causedBy)
  })

  it("a cycle ends where it closes; a deep chain is cut at maxCauseDepth; a non-error is its JSON", () => {
    const looped = new Error("loop")
    ;(looped as { cause?: unknown }).cause = looped
    expect(causeChain(looped)).toEqual({ name: "Error", message: "loop" })
    let deep: unknown = new Error("bottom")
    for (let i = 0; i < 20; i++) deep = new Error(`level ${i}`, { cause: deep })
    let depth = 0
    for (let link = causeChain(deep); link !== undefined; link = link.causedBy) depth++
    expect(depth).toBe(maxCauseDepth)
    expect(causeChain({ status: 503 })).toEqual({ name: "object", message: '{"status":503}' })
  })

  it("at the HTTP boundary every link's message is cut to an excerpt", () => {
    const error = toSystemError(InferenceFailure.engineError("down", {}, new Error("x".repeat(5_000), { cause: new Error("y".repeat(5_000)) })))
    const safe = forClient(error)
    expect(safe.causedBy!.message.length).toBeLessThan(300)
    expect(safe.causedBy!.causedBy!.message.length).toBeLessThan(300)
  })

  it.effect("through the facade: a redundant request below its quorum answers NO_CONSENSUS caused by the replica's failure", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "redundant",
        messages: [{ role: "user", content: "I love it" }],
        output: schemaOutput,
        redundancy: { n: 3, quorum: 3 }
      })
      expect(response.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(response.error?.causedBy).toMatchObject({ name: "InferenceFailure", code: "INFERENCE_MODEL_UNAVAILABLE", message: "gone" })
    }).pipe(
      Effect.provide(
        env([ScriptedEngine.reply('{"sentiment":"positive"}'), broken("gone"), ScriptedEngine.reply('{"sentiment":"positive"}')])
      )
    ))
})

// ---------------------------------------------------------------------------
// Gap 9: the trace id is the request's trace
// ---------------------------------------------------------------------------

describe("gap 9: a trace id given to the facade is the trace of the request's spans", { timeout: bound }, () => {
  /** An engine that answers with the trace id of the span it is called in. */
  const traced = env([
    ScriptedEngine.respond(() =>
      Effect.map(Effect.orDie(Effect.currentSpan), (span) =>
        new InferenceResult({ content: span.traceId, toolCalls: [], usage: TokenUsage.empty, finishReason: "stop" })))
  ])
  const chat = (fields: Record<string, unknown>) =>
    Effect.flatMap(Facade.make(), (system) => system.run(decode({ mode: "chat", messages: [{ role: "user", content: "hi" }], ...fields })))
  const eventTraces = Effect.map(Effect.flatMap(EventLog, (log) => log.events), (events) => new Set(events.map((e) => e.correlation.traceId)))

  it.effect("a W3C trace id is the spans' trace id itself, and the events'", () =>
    Effect.gen(function* () {
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
      const response = yield* chat({ traceId })
      expect(response.content).toBe(traceId)
      expect(yield* eventTraces).toEqual(new Set([traceId]))
    }).pipe(Effect.provide(traced)))

  it.effect("inside a span of another trace, the request's own trace id still wins", () =>
    Effect.gen(function* () {
      const traceId = "4BF92F3577B34DA6A3CE929D0E0E4736"
      const response = yield* chat({ traceId }).pipe(Effect.withSpan("application"))
      expect(response.content).toBe(traceId.toLowerCase())
    }).pipe(Effect.provide(traced)))

  it.effect("any other trace id names a trace derived from it: the same id, the same trace", () =>
    Effect.gen(function* () {
      const first = yield* chat({ traceId: "trace-tel-1" })
      const again = yield* chat({ traceId: "trace-tel-1" }).pipe(Effect.provide(traced))
      expect(first.content).toMatch(/^[0-9a-f]{32}$/)
      expect(first.content).toBe(w3cTraceId("trace-tel-1"))
      expect(again.content).toBe(first.content)
      expect(w3cTraceId("trace-tel-2")).not.toBe(first.content)
    }).pipe(Effect.provide(traced)))

  it.effect("without a trace id the request joins the trace it runs in, and its events name that trace", () =>
    Effect.gen(function* () {
      const [response, outer] = yield* Effect.zip(chat({}), Effect.map(Effect.orDie(Effect.currentSpan), (s) => s.traceId)).pipe(
        Effect.withSpan("application")
      )
      expect(response.content).toBe(outer)
      expect(yield* eventTraces).toEqual(new Set([outer]))
    }).pipe(Effect.provide(traced)))
})

// ---------------------------------------------------------------------------
// Gap 7: confidence from validation and retrieval
// ---------------------------------------------------------------------------

describe("gap 7: confidence from validation and retrieval, where the mode produces them", { timeout: bound }, () => {
  const structured = { mode: "structured", messages: [{ role: "user", content: "I love it" }], output: schemaOutput }

  it.effect("structured: the validation pass rate (1 when the first reply passed)", () =>
    Effect.gen(function* () {
      const response = yield* respond(structured)
      expect(response).toMatchObject({ confidence: 1, confidenceSource: "validation" })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"positive"}')]))))

  it.effect("structured: half when one reply of two was rejected", () =>
    Effect.gen(function* () {
      const response = yield* respond(structured)
      expect(response).toMatchObject({ confidence: 0.5, confidenceSource: "validation" })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"great"}'), ScriptedEngine.reply('{"sentiment":"positive"}')]))))

  const passages = [
    { content: "The Eiffel Tower was finished in 1889.", source: "a.txt", score: 0 },
    { content: "Paris is in France.", source: "b.txt", score: 0 }
  ]
  const rerankThenAnswer = {
    mode: "plan",
    messages: [],
    plan: {
      steps: [
        { name: "rank", type: "rerank", input: { query: "When was the Eiffel Tower finished?", candidates: passages } },
        { name: "answer", type: "infer" }
      ]
    }
  }

  it.effect("plan: the best score of its rerank step, on the [0, 1] scale of a model reranker", () =>
    Effect.gen(function* () {
      const response = yield* respond(rerankThenAnswer)
      expect(response.error).toBeUndefined()
      expect(response).toMatchObject({ confidence: 0.9, confidenceSource: "retrieval" })
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          ModelReranker.layer(),
          env([ScriptedEngine.reply('{"score":0.9}'), ScriptedEngine.reply('{"score":0.2}'), ScriptedEngine.reply("1889.")])
        )
      )
    ))

  it.effect("plan: a BM25 score is no confidence", () =>
    Effect.gen(function* () {
      const response = yield* respond(rerankThenAnswer)
      expect(response.error).toBeUndefined()
      expect(response.confidence).toBeUndefined()
    }).pipe(Effect.provide(Layer.merge(LexicalReranker.layer(), env([ScriptedEngine.reply("1889.")])))))

  it.effect("plan: a validate step's pass rate, before any retrieval score", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        ...rerankThenAnswer,
        plan: { steps: [...rerankThenAnswer.plan.steps, { name: "check", type: "validate" }] }
      })
      expect(response.error).toBeUndefined()
      expect(response).toMatchObject({ confidence: 1, confidenceSource: "validation" })
    }).pipe(
      Effect.provide(
        Layer.mergeAll(
          Layer.provideMerge(ModelReranker.layer(), env([ScriptedEngine.reply('{"score":0.9}'), ScriptedEngine.reply('{"score":0.2}'), ScriptedEngine.reply("1889.")])),
          RuleValidator.layer([Validator.length({ min: 1 })])
        )
      )
    ))
})

// ---------------------------------------------------------------------------
// strictValidation through the facade
// ---------------------------------------------------------------------------

describe("output.strictValidation through the facade: the Validator's rules on a structured answer", { timeout: bound }, () => {
  const scored = {
    schema: {
      type: "object",
      properties: { sentiment: { type: "string", enum: ["positive", "negative"] }, confidence: { type: "number" } },
      required: ["sentiment", "confidence"]
    }
  }
  const confident = Validator.custom("confidence >= 0.5", (output) => Effect.succeed(JSON.parse(output).confidence >= 0.5))
  const unsure = (replies: number) =>
    Layer.merge(
      env(Array.from({ length: replies }, (_, i) => ScriptedEngine.reply(`{"sentiment":"positive","confidence":0.${i + 1}}`))),
      RuleValidator.layer([confident])
    )
  /** As an HTTP client sends it: an untrusted envelope. */
  const runRaw = (output: Record<string, unknown>) =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const fiber = yield* Effect.fork(
        system.runUnknown({ mode: "structured", messages: [{ role: "user", content: "I love it" }], output })
      )
      yield* TestClock.adjust("1 minute")
      return yield* Fiber.join(fiber)
    })

  it.effect("false (the default): the last schema-valid answer comes back with its failed rules as violations", () =>
    Effect.gen(function* () {
      const response = yield* runRaw(scored)
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ sentiment: "positive", confidence: 0.3 })
      expect(response.validationResult).toMatchObject({ passed: 0, failed: 3, violations: ["confidence >= 0.5"] })
      expect(response.confidence).toBe(0)
      // each rejected reply was re-prompted with the rule that failed
      expect((yield* ScriptedEngine.requests)[1]!.messages.at(-1)!.content).toContain("confidence >= 0.5")
    }).pipe(Effect.provide(unsure(3))))

  it.effect("true: the rule failure is the request's error, no partial answer", () =>
    Effect.gen(function* () {
      const response = yield* runRaw({ ...scored, strictValidation: true })
      expect(response.error).toMatchObject({ code: "VALIDATION_RULE_FAILED", details: { failedRules: ["confidence >= 0.5"] } })
      expect(response.structuredOutput).toBeUndefined()
    }).pipe(Effect.provide(unsure(3))))

  /** A redundant request of `n` replicas, as an HTTP client sends it. */
  const redundantRaw = (n: number) =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const fiber = yield* Effect.fork(
        system.runUnknown({ mode: "redundant", messages: [{ role: "user", content: "I love it" }], output: scored, redundancy: { n } })
      )
      yield* TestClock.adjust("1 minute")
      return yield* Fiber.join(fiber)
    })
  const replies = (confidences: ReadonlyArray<string>) =>
    Layer.merge(
      env(confidences.map((c, i) => ScriptedEngine.reply(`{"sentiment":"${i === 0 ? "negative" : "positive"}","confidence":${c}}`))),
      RuleValidator.layer([confident])
    )

  it.effect("redundant: a replica that breaks a rule does not vote; the others decide", () =>
    Effect.gen(function* () {
      // replica 0 says negative but is unsure: without the rule it would be one of three votes
      const response = yield* redundantRaw(3)
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ sentiment: "positive", confidence: 0.8 })
      expect(response.validationResult).toMatchObject({ passed: 2, failed: 1, violations: ["replica 0: confidence >= 0.5"] })
      expect(response.confidence).toBe(1)
      expect(yield* ScriptedEngine.requests).toHaveLength(3)
    }).pipe(Effect.provide(replies(["0.1", "0.8", "0.8"]))))

  it.effect("redundant: when the rules leave too few replicas, ORCHESTRATION_NO_CONSENSUS naming each broken rule (never a ValidationFailure: not this pattern's to emit)", () =>
    Effect.gen(function* () {
      const response = yield* redundantRaw(3)
      expect(response.error).toMatchObject({ code: "ORCHESTRATION_NO_CONSENSUS", category: "OrchestrationFailure" })
      expect(response.error?.causedBy).toMatchObject({ code: "VALIDATION_RULE_FAILED" })
      expect(response.structuredOutput).toBeUndefined()
    }).pipe(Effect.provide(replies(["0.1", "0.2", "0.3"]))))

  it.effect("an answer that passes the rules is accepted after a re-prompt", () =>
    Effect.gen(function* () {
      const response = yield* runRaw({ ...scored, strictValidation: true })
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ sentiment: "positive", confidence: 0.9 })
      expect(response).toMatchObject({ confidence: 0.5, validationResult: { passed: 1, failed: 1 } })
    }).pipe(
      Effect.provide(
        Layer.merge(
          env([ScriptedEngine.reply('{"sentiment":"positive","confidence":0.1}'), ScriptedEngine.reply('{"sentiment":"positive","confidence":0.9}')]),
          RuleValidator.layer([confident])
        )
      )
    ))
})
