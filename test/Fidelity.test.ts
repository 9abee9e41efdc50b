/**
 * Seeds 01-03 to the letter (issue #12): one test per contract gap closed outside
 * the facade. Each names the behaviour of the seed it checks.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Event from "../src/domain/Event.js"
import { InferenceFailure, ValidationFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { calculator } from "../src/layers/tools/Calculator.js"
import * as RuleValidator from "../src/layers/RuleValidator.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Facade from "../src/programs/Facade.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as SpecializedLoop from "../src/programs/SpecializedLoop.js"
import * as Structured from "../src/programs/Structured.js"
import { EventLog } from "../src/services/EventLog.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import * as Validator from "../src/services/Validator.js"
import { add } from "./support/tools.js"

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), Constraint.layer, Observe.eventLogMemory)

const sentiment = JsonSchema.object({
  sentiment: JsonSchema.enumOf(["positive", "negative", "neutral"]),
  confidence: JsonSchema.number()
})
const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral"), confidence: Schema.Number })
const ask = [Message.system("Classify sentiment."), Message.user("I love it")]

const transitions = Effect.map(
  Effect.flatMap(EventLog, (log) => log.events),
  (events) =>
    events
      .filter((e): e is Event.LifecycleTransition => e._tag === "LifecycleTransition")
      .map((t) => `${t.fromState}->${t.toState}#${t.attempt}`)
)

describe("Fidelity (issue #12)", () => {
  describe("gap 2: a structured call out of retries", () => {
    it.effect("goes VALIDATE -> ERROR on its last rejected reply, with attempts equal to the engine's answers", () =>
      Effect.gen(function* () {
        const system = yield* Facade.make()
        const request = Schema.decodeUnknownSync(SystemRequest)({
          mode: "structured",
          requestId: "r-2",
          messages: [{ role: "user", content: "I love it" }],
          output: { schema: sentiment }
        })
        const fiber = yield* Effect.fork(system.execute(request))
        yield* TestClock.adjust("1 minute")
        const execution = yield* Fiber.join(fiber)
        expect(execution.response.error?.code).toBe("CONSTRAINT_SCHEMA_INVALID")
        expect((yield* ScriptedEngine.requests).length).toBe(3)
        expect(execution.transitions.map((t) => `${t.from}->${t.to}`)).toEqual([
          "INIT->PREPARE",
          "PREPARE->EXECUTE",
          "EXECUTE->VALIDATE",
          "VALIDATE->EXECUTE",
          "EXECUTE->VALIDATE",
          "VALIDATE->EXECUTE",
          "EXECUTE->VALIDATE",
          "VALIDATE->ERROR"
        ])
        expect(execution.state.current).toBe("ERROR")
        expect(execution.state.attempt).toBe(3)
        expect((yield* transitions).at(-1)).toBe("VALIDATE->ERROR#3")
      }).pipe(
        Effect.provide(
          env([
            ScriptedEngine.reply('{"sentiment":"positive","confidence":"1"}'),
            ScriptedEngine.reply('{"sentiment":"positive","confidence":"2"}'),
            ScriptedEngine.reply('{"sentiment":"positive","confidence":"3"}')
          ])
        )
      ), { timeout: 20_000 })

    it.effect("outside a tracked request: no VALIDATE -> EXECUTE event after the last reply", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(Effect.flip(Structured.run(ask, { schema: sentiment, retry: RetryPolicy.exponential({ times: 1 }) })))
        yield* TestClock.adjust("1 minute")
        yield* Fiber.join(fiber)
        expect(yield* transitions).toEqual(["EXECUTE->VALIDATE#1", "VALIDATE->EXECUTE#2", "EXECUTE->VALIDATE#2"])
      }).pipe(
        Effect.provide(
          env([
            ScriptedEngine.reply('{"sentiment":"positive"}'),
            ScriptedEngine.reply('{"sentiment":"positive"}')
          ])
        )
      ), { timeout: 20_000 })
  })

  describe("gap 6: RepairAllowed and StrictValidation", () => {
    it.effect("repairAllowed false: a reply that is not JSON is terminal, never re-prompted", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(Effect.flip(Structured.run(ask, { schema: sentiment, repairAllowed: false })))
        yield* TestClock.adjust("1 minute")
        const failure = yield* Fiber.join(fiber)
        expect(failure).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_JSON_INVALID" })
        expect((yield* ScriptedEngine.requests).length).toBe(1)
        expect(yield* transitions).toEqual(["EXECUTE->VALIDATE#1"])
      }).pipe(
        Effect.provide(
          env([ScriptedEngine.reply('{"sentiment":"positive"'), ScriptedEngine.reply('{"sentiment":"positive","confidence":1}')])
        )
      ), { timeout: 20_000 })

    it.effect("repairAllowed false: a schema violation (content, not structure) is still re-prompted", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(Structured.run(ask, { schema: sentiment, repairAllowed: false }))
        yield* TestClock.adjust("1 minute")
        const result = yield* Fiber.join(fiber)
        expect(result.attempts).toBe(2)
      }).pipe(
        Effect.provide(
          env([ScriptedEngine.reply('{"sentiment":"positive"}'), ScriptedEngine.reply('{"sentiment":"positive","confidence":1}')])
        )
      ), { timeout: 20_000 })

    const confident = (value: { readonly confidence: number }) =>
      value.confidence >= 0.5 ? Effect.void : Effect.fail(ValidationFailure.ruleFailed("not confident enough", { failedRules: ["confidence >= 0.5"] }))
    const unsure = env([
      ScriptedEngine.reply('{"sentiment":"positive","confidence":0.1}'),
      ScriptedEngine.reply('{"sentiment":"neutral","confidence":0.2}')
    ])
    const twoAttempts = RetryPolicy.exponential({ times: 1 })

    it.effect("strictValidation false: the last schema-valid value comes back with its failed rules as warnings", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(
          Structured.run(ask, { schema: Sentiment, validate: confident, retry: twoAttempts, strictValidation: false })
        )
        yield* TestClock.adjust("1 minute")
        const result = yield* Fiber.join(fiber)
        expect(result.partial).toBe(true)
        expect(result.value).toEqual({ sentiment: "neutral", confidence: 0.2 })
        expect(result.attempts).toBe(2)
        expect(result.validation).toMatchObject({ passed: 0, failed: 2, violations: ["confidence >= 0.5"] })
      }).pipe(Effect.provide(unsure)), { timeout: 20_000 })

    it.effect("strictValidation true: no partial result, the rule failure ends the call", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(
          Effect.flip(Structured.run(ask, { schema: Sentiment, validate: confident, retry: twoAttempts, strictValidation: true }))
        )
        yield* TestClock.adjust("1 minute")
        expect(yield* Fiber.join(fiber)).toMatchObject({ _tag: "ValidationFailure", code: "VALIDATION_RULE_FAILED" })
        expect((yield* ScriptedEngine.requests).length).toBe(2)
      }).pipe(Effect.provide(unsure)), { timeout: 20_000 })
  })

  describe("gap 3: VALIDATION_SEMANTIC_FAILED from a model-judged rule", () => {
    const context = "The Eiffel Tower is in Paris. It was finished in 1889."
    const judged = (script: ReadonlyArray<ScriptedEngine.Step>) =>
      Layer.provideMerge(RuleValidator.layerJudged(), env(script))

    it.effect("a failing verdict raises VALIDATION_SEMANTIC_FAILED; the judge is asked with the verdict schema at temperature 0", () =>
      Effect.gen(function* () {
        const validator = yield* Validator.Validator
        const failure = yield* Effect.flip(
          validator.validate("The Eiffel Tower was finished in 1920.", [Validator.followsFromContext(context)])
        )
        expect(failure).toMatchObject({
          _tag: "ValidationFailure",
          code: "VALIDATION_SEMANTIC_FAILED",
          retryable: true,
          failedRules: ["follows from the context"]
        })
        expect(failure.message).toContain("the context says 1889")
        const [request] = yield* ScriptedEngine.requests
        expect(request!.schema).toEqual(Validator.verdictSchema)
        expect(request!.temperature).toBe(0)
        expect(request!.messages[1]!.content).toContain(context)
        expect(request!.messages[1]!.content).toContain("The Eiffel Tower was finished in 1920.")
      }).pipe(Effect.provide(judged([ScriptedEngine.reply('{"verdict":"fail","reason":"the context says 1889"}')]))), { timeout: 20_000 })

    it.effect("a passing verdict passes; a plain rule failing beside a semantic one is VALIDATION_RULE_FAILED", () =>
      Effect.gen(function* () {
        const validator = yield* Validator.Validator
        const ok = yield* validator.validate("It was finished in 1889.", [Validator.followsFromContext(context)])
        expect(ok.results[0]).toMatchObject({ passed: true, semantic: true, reason: "stated in the context" })
        const both = yield* Effect.flip(
          validator.validate("1920", [Validator.length({ min: 10 }), Validator.followsFromContext(context)])
        )
        expect(both.code).toBe("VALIDATION_RULE_FAILED")
        expect(both.failedRules).toEqual(["length(10..inf)", "follows from the context"])
      }).pipe(
        Effect.provide(
          judged([
            ScriptedEngine.reply('{"verdict":"pass","reason":"stated in the context"}'),
            ScriptedEngine.reply('{"verdict":"fail","reason":"not in the context"}')
          ])
        )
      ), { timeout: 20_000 })

    it.effect("a judge that cannot decide fails the rule (fail closed), naming why", () =>
      Effect.gen(function* () {
        const validator = yield* Validator.Validator
        const report = yield* validator.check("anything", [Validator.semantic("is polite")])
        expect(report.results[0]!.passed).toBe(false)
        expect(report.results[0]!.reason).toContain("the judge's reply is not a verdict")
        const unjudged = yield* Effect.provide(
          Effect.flatMap(Validator.Validator, (v) => v.check("anything", [Validator.semantic("is polite")])),
          RuleValidator.layer()
        )
        expect(unjudged.results[0]!.reason).toContain("no judge")
      }).pipe(Effect.provide(judged([ScriptedEngine.reply("yes, it is polite")]))), { timeout: 20_000 })

    it.effect("through the facade: a plan's validate step with a judged Validator answers VALIDATION_SEMANTIC_FAILED", () =>
      Effect.gen(function* () {
        const system = yield* Facade.make()
        const response = yield* system.run(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "plan",
            messages: [],
            plan: {
              steps: [
                { name: "answer", type: "infer", input: "When was the Eiffel Tower finished?" },
                { name: "check", type: "validate" }
              ]
            }
          })
        )
        expect(response.error).toMatchObject({ code: "VALIDATION_SEMANTIC_FAILED", category: "ValidationFailure" })
        expect(response.error?.message).toContain("follows from the context")
      }).pipe(
        Effect.provide(
          Layer.provideMerge(
            RuleValidator.layerJudged([Validator.followsFromContext(context)]),
            env([ScriptedEngine.reply("It was finished in 1920."), ScriptedEngine.reply('{"verdict":"fail","reason":"the context says 1889"}')])
          )
        )
      ), { timeout: 20_000 })

    it.effect("in a structured call: the semantic failure is re-prompted with its code, and the next answer accepted", () =>
      Effect.gen(function* () {
        const validator = yield* Validator.Validator
        const Answer = Schema.Struct({ year: Schema.Number })
        const fiber = yield* Effect.fork(
          Structured.run([Message.system(context), Message.user("When was the Eiffel Tower finished?")], {
            schema: Answer,
            validate: (value) => Effect.asVoid(validator.validate(JSON.stringify(value), [Validator.followsFromContext(context)]))
          })
        )
        yield* TestClock.adjust("1 minute")
        const result = yield* Fiber.join(fiber)
        expect(result.value).toEqual({ year: 1889 })
        expect(result.attempts).toBe(2)
        const requests = yield* ScriptedEngine.requests
        // answer, verdict, answer again (with the correction), verdict
        expect(requests).toHaveLength(4)
        expect(requests[2]!.messages.at(-1)!.content).toContain("VALIDATION_SEMANTIC_FAILED")
      }).pipe(
        Effect.provide(
          judged([
            ScriptedEngine.reply('{"year":1920}'),
            ScriptedEngine.reply('{"verdict":"fail","reason":"the context says 1889"}'),
            ScriptedEngine.reply('{"year":1889}'),
            ScriptedEngine.reply('{"verdict":"pass","reason":"stated"}')
          ])
        )
      ), { timeout: 20_000 })
  })

  describe("gap 4: every event carries span ids; every mode emits InferenceStart/InferenceEnd", () => {
    const decode = Schema.decodeUnknownSync(SystemRequest)
    const schemaOutput = { schema: { type: "object", properties: { sentiment: { type: "string", enum: ["positive", "negative"] } }, required: ["sentiment"] } }
    const inferencePairs = (events: ReadonlyArray<Event.Event>) => {
      const starts = events.filter((e): e is Event.InferenceStart => e._tag === "InferenceStart")
      const ends = events.filter((e): e is Event.InferenceEnd => e._tag === "InferenceEnd")
      return starts.map((start) => ({ start, end: ends.find((e) => e.inferenceId === start.inferenceId) }))
    }
    const run = (request: unknown) =>
      Effect.gen(function* () {
        const system = yield* Facade.make()
        const response = yield* system.run(decode(request))
        expect(response.error).toBeUndefined()
        return yield* Effect.flatMap(EventLog, (log) => log.events)
      })
    const expectFullCorrelation = (events: ReadonlyArray<Event.Event>, requestId: string) => {
      expect(events.length).toBeGreaterThan(0)
      for (const e of events) {
        expect({ tag: e._tag, requestId: e.correlation.requestId }).toEqual({ tag: e._tag, requestId })
        expect(e.correlation.spanId, `${e._tag} has a span id`).toMatch(/\S/)
        expect(e.correlation.parentSpanId, `${e._tag} has a parent span id`).toMatch(/\S/)
      }
      // an inference's two events share the inference's span, a child of the loop's
      for (const { end, start } of inferencePairs(events)) {
        expect(end?.correlation.spanId).toBe(start.correlation.spanId)
        expect(start.correlation.parentSpanId).not.toBe(start.correlation.spanId)
      }
    }

    it.effect("chat: lifecycle and inference events all carry span and parent span ids", () =>
      Effect.gen(function* () {
        const events = yield* run({ mode: "chat", requestId: "r-chat", messages: [{ role: "user", content: "hi" }] })
        expect(inferencePairs(events)).toHaveLength(1)
        expectFullCorrelation(events, "r-chat")
      }).pipe(Effect.provide(env([ScriptedEngine.reply("hello")]))), { timeout: 20_000 })

    it.effect("structured: one InferenceStart/InferenceEnd pair per reply, schema present", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(
          run({ mode: "structured", requestId: "r-str", messages: [{ role: "user", content: "I love it" }], output: schemaOutput })
        )
        yield* TestClock.adjust("1 minute")
        const events = yield* Fiber.join(fiber)
        const pairs = inferencePairs(events)
        expect(pairs).toHaveLength(2)
        expect(pairs.every(({ end, start }) => start.schemaPresent && end?.finishReason === "stop")).toBe(true)
        expectFullCorrelation(events, "r-str")
      }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"great"}'), ScriptedEngine.reply('{"sentiment":"positive"}')]))), { timeout: 20_000 })

    it.effect("redundant: a pair per replica, each replica's in a span of its own", () =>
      Effect.gen(function* () {
        const events = yield* run({
          mode: "redundant",
          requestId: "r-red",
          messages: [{ role: "user", content: "I love it" }],
          output: schemaOutput,
          redundancy: { n: 3 }
        })
        const pairs = inferencePairs(events)
        expect(pairs).toHaveLength(3)
        expect(new Set(pairs.map((p) => p.start.correlation.spanId)).size).toBe(3)
        expect(new Set(pairs.map((p) => p.start.correlation.parentSpanId)).size).toBe(3)
        expectFullCorrelation(events, "r-red")
      }).pipe(Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"sentiment":"positive"}'))))), { timeout: 20_000 })

    it.effect("plan: an infer step's inference has its pair, with the step's name", () =>
      Effect.gen(function* () {
        const events = yield* run({
          mode: "plan",
          requestId: "r-plan",
          messages: [],
          plan: { steps: [{ name: "explain", type: "infer", input: "Explain 5" }] }
        })
        const pairs = inferencePairs(events)
        expect(pairs).toHaveLength(1)
        expect(pairs[0]!.start.correlation.stepName).toBe("explain")
        expect(pairs[0]!.end?.tokensOut).toBeGreaterThanOrEqual(0)
        expectFullCorrelation(events, "r-plan")
      }).pipe(Effect.provide(env([ScriptedEngine.reply("Five.")]))), { timeout: 20_000 })
  })

  describe("gap 11: agent.chatStructured on the loop, with its history and the loop's grammar", () => {
    const grammar = 'root ::= "{" [^}]* "}"'

    it.effect("the history is in view, the grammar goes only to chatStructured, and the answer joins the history", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "You are terse.", grammar })
        yield* agent.chat("I bought a lamp.")
        const result = yield* agent.chatStructured(Sentiment, "How do I feel about it? I love it.")
        const label: "positive" | "negative" | "neutral" = result.value.sentiment
        expect(label).toBe("positive")
        const [chatRequest, structuredRequest] = yield* ScriptedEngine.requests
        expect(chatRequest!.grammar).toBeUndefined()
        expect(chatRequest!.schema).toBeUndefined()
        expect(structuredRequest!.grammar).toBe(grammar)
        expect(structuredRequest!.schema?.properties?.sentiment?.enum).toEqual(["positive", "negative", "neutral"])
        expect(structuredRequest!.sessionKey).toBe(agent.sessionId)
        expect(structuredRequest!.messages.map((m) => [m.role, m.content])).toEqual([
          ["system", "You are terse."],
          ["user", "I bought a lamp."],
          ["assistant", "Nice lamp."],
          ["user", "How do I feel about it? I love it."]
        ])
        expect((yield* agent.messages).map((m) => [m.role, m.content])).toEqual([
          ["system", "You are terse."],
          ["user", "I bought a lamp."],
          ["assistant", "Nice lamp."],
          ["user", "How do I feel about it? I love it."],
          ["assistant", '{"sentiment":"positive","confidence":0.9}']
        ])
      }).pipe(
        Effect.provide(
          env([ScriptedEngine.reply("Nice lamp."), ScriptedEngine.reply('{"sentiment":"positive","confidence":0.9}')])
        )
      ), { timeout: 20_000 })

    it.effect("a rejected reply and its correction are the turn's working memory, not history; a failed turn stores nothing", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({})
        const fiber = yield* Effect.fork(agent.chatStructured(sentiment, "I love it"))
        yield* TestClock.adjust("1 minute")
        const result = yield* Fiber.join(fiber)
        expect(result.attempts).toBe(2)
        expect((yield* agent.messages).map((m) => m.role)).toEqual(["user", "assistant"])
        const failed = yield* Effect.flip(agent.chatStructured(sentiment, "again", { retry: RetryPolicy.none }))
        expect(failed.code).toBe("CONSTRAINT_SCHEMA_INVALID")
        expect(yield* agent.messages).toHaveLength(2)
      }).pipe(
        Effect.provide(
          env([
            ScriptedEngine.reply('{"sentiment":"positive"}'),
            ScriptedEngine.reply('{"sentiment":"positive","confidence":1}'),
            ScriptedEngine.reply('{"sentiment":"positive"}')
          ])
        )
      ), { timeout: 20_000 })

    it.effect("without the Constraint service the call dies naming what to provide", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({})
        const exit = yield* Effect.exit(agent.chatStructured(sentiment, "I love it"))
        expect(String(exit)).toContain("needs the Constraint service")
      }).pipe(Effect.provide(ScriptedEngine.layer([]))), { timeout: 20_000 })
  })

  describe("gap 12: SpecializedLoop and RedundantLoop stream their progress", () => {
    const collect = <A, E, R>(stream: Stream.Stream<A, E, R>) => Effect.map(Stream.runCollect(stream), Chunk.toReadonlyArray)

    it.effect("RedundantLoop.runStream: each replica as it finishes, the vote, then Finished with the run's result", () =>
      Effect.gen(function* () {
        const progress = yield* collect(RedundantLoop.runStream("I love it", { schema: sentiment, n: 3 }))
        expect(progress.map((p) => p._tag)).toEqual(["ReplicaFinished", "ReplicaFinished", "ReplicaFinished", "VoteCast", "Finished"])
        const finished = progress.map((p) => (p._tag === "ReplicaFinished" ? `${p.outcome.replica}:${p.outcome._tag}` : "")).filter(Boolean)
        expect([...finished].sort()).toEqual(["0:Valid", "1:Valid", "2:Failed"])
        const vote = progress[3]!
        const last = progress[4]!
        if (vote._tag !== "VoteCast" || last._tag !== "Finished") return expect.unreachable()
        expect(vote).toMatchObject({ strategy: "majority", winner: 0, candidates: [
          '{"sentiment":"positive","confidence":1}',
          '{"sentiment":"positive","confidence":1}'
        ] })
        expect(vote.confidence).toBe(last.result.confidence)
        expect(last.result.winner).toBe(0)
        expect(last.result.value).toEqual({ sentiment: "positive", confidence: 1 })
      }).pipe(
        Effect.provide(
          env([
            ScriptedEngine.reply('{"sentiment":"positive","confidence":1}'),
            ScriptedEngine.reply('{"sentiment":"positive","confidence":1}'),
            ScriptedEngine.reply("no idea")
          ])
        )
      ), { timeout: 20_000 })

    it.effect("RedundantLoop.runStream: a run below its quorum fails the stream after the replicas it saw finish", () =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        const failure = yield* Effect.flip(
          Stream.runForEach(RedundantLoop.runStream("I love it", { schema: sentiment, n: 2 }), (p) => Effect.sync(() => seen.push(p._tag)))
        )
        expect(failure.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(seen).toEqual(["ReplicaFinished", "ReplicaFinished"])
      }).pipe(
        Effect.provide(
          env([ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone")), ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone"))])
        )
      ), { timeout: 20_000 })

    it.effect("SpecializedLoop.callStream: tool results, the tool phase's end, a rejected reply, then Finished", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(collect(SpecializedLoop.callStream("What is 2+2, and how do I feel?", { schema: sentiment })))
        yield* TestClock.adjust("1 minute")
        const progress = yield* Fiber.join(fiber)
        expect(progress.map((p) => p._tag)).toEqual(["ToolResultReady", "ToolPhaseFinished", "ReplyRejected", "Finished"])
        const [tool, phase, rejected, finished] = progress
        if (tool?._tag !== "ToolResultReady" || phase?._tag !== "ToolPhaseFinished" || rejected?._tag !== "ReplyRejected" || finished?._tag !== "Finished") {
          return expect.unreachable()
        }
        expect(tool.record).toMatchObject({ name: "add", result: "4" })
        expect(phase.stopReason).toBe("finish")
        expect(rejected.rejection).toMatchObject({ attempt: 1, retrying: true, failure: { code: "CONSTRAINT_SCHEMA_INVALID" } })
        expect(finished.result).toMatchObject({ value: { sentiment: "positive", confidence: 1 }, attempts: 2 })
        expect(finished.result.toolCalls).toHaveLength(1)
      }).pipe(
        Effect.provide(
          Layer.merge(
            env([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 2 } }]),
              ScriptedEngine.reply("It is 4."),
              ScriptedEngine.reply('{"sentiment":"positive"}'),
              ScriptedEngine.reply('{"sentiment":"positive","confidence":1}')
            ]),
            Registry.layer([add])
          )
        )
      ), { timeout: 20_000 })
  })

  describe("gap 13: history full or compact", () => {
    const turn = [ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")]
    const twoTurns = Layer.merge(env([...turn, ...turn]), Registry.layer([add]))

    it.effect("compact keeps [user, assistant] per turn; tool traffic is the turn's working memory", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "Add.", history: "compact" })
        yield* agent.chat("2+3?")
        yield* agent.chat("and again?")
        expect((yield* agent.messages).map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"])
        const requests = yield* ScriptedEngine.requests
        // within a turn the tool result is in view; the next turn starts from the compact history
        expect(requests[1]!.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool"])
        expect(requests[2]!.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"])
      }).pipe(Effect.provide(twoTurns)), { timeout: 20_000 })

    it.effect("full (the default) keeps the tool calls and results", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "Add." })
        yield* agent.chat("2+3?")
        expect((yield* agent.messages).map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant"])
      }).pipe(Effect.provide(twoTurns)), { timeout: 20_000 })
  })
})

layer(Layer.provideMerge(RuleValidator.layerJudged(), LlamaEngine.layer({ sequences: 1 })), { excludeTestServices: true })(
  "Fidelity gap 3 on the bundled model",
  (it) => {
    it.effect("the judge's reply decodes as a verdict (llama.cpp decodes by the verdict schema; the model is not trained to judge: only the shape is checked)", () =>
      Effect.gen(function* () {
        const validator = yield* Validator.Validator
        const context = "The Eiffel Tower is in Paris. It was finished in 1889."
        // Seen on 2026-11-23: "fail" with reason "positive" for both outputs: the tiny
        // sentiment model cannot judge; the verdict's shape is all that holds.
        for (const output of ["It was finished in 1889.", "It was finished in 1920 in Rome."]) {
          const report = yield* validator.check(output, [Validator.followsFromContext(context)])
          const [result] = report.results
          expect(result!.semantic).toBe(true)
          expect(result!.reason ?? "").not.toContain("not a verdict")
          expect(result!.reason ?? "").not.toContain("could not answer")
        }
      }), 120_000)
  }
)

// Gap 13's measurement: 20 calculator turns on the bundled model, full vs compact
// history. Per turn: the prompt tokens llama.cpp evaluated (after prefix reuse)
// and the tokens of the prompts sent (contextTokens - outputTokens per inference).
layer(Layer.mergeAll(LlamaEngine.layer({ sequences: 1, contextSize: 4096 }), Registry.layer([calculator])), { excludeTestServices: true })(
  "Fidelity gap 13 on the bundled model",
  (it) => {
    it.effect("20 turns, full vs compact: evaluated prompt tokens and prefix reuse", () =>
      Effect.gen(function* () {
        const measure = (history: "full" | "compact") =>
          Effect.gen(function* () {
            const agent = yield* AgentLoop.make({ history, maxTokens: 48, temperature: 0, maxToolIterations: 2 })
            let evaluated = 0
            let sent = 0
            let lastHistory = 0
            for (let i = 1; i <= 20; i++) {
              yield* Stream.runForEach(agent.chatStream(`What is ${i} plus ${i + 7}?`), (event) =>
                Effect.sync(() => {
                  if (event._tag !== "InferenceFinished") return
                  evaluated += event.result.usage.promptTokens
                  sent += event.result.usage.contextTokens - event.result.usage.outputTokens
                }))
              lastHistory = (yield* agent.messages).length
            }
            return { history, evaluated, sent, reused: sent - evaluated, messages: lastHistory }
          })
        const full = yield* measure("full")
        const compact = yield* measure("compact")
        console.log(JSON.stringify({ full, compact }))
        expect(compact.messages).toBe(40)
        expect(full.messages).toBeGreaterThanOrEqual(40)
        // prefix reuse: evaluation stays close while the prompts sent grow about twice as fast with full history
        expect(compact.sent).toBeLessThan(full.sent * 0.75)
        expect(full.reused).toBeGreaterThan(full.evaluated)
      }), 600_000)
  }
)
