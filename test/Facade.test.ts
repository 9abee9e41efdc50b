import { describe, expect, it } from "@effect/vitest"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Supervisor from "effect/Supervisor"
import * as TestClock from "effect/TestClock"
import type * as Event from "../src/domain/Event.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Facade from "../src/programs/Facade.js"
import * as Engine from "../src/services/Engine.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import { currentCorrelation, EventLog } from "../src/services/EventLog.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as ConversationStore from "../src/services/ConversationStore.js"
import { add, correlationProbe } from "./support/tools.js"

const chat = (content: string, fields: Partial<ConstructorParameters<typeof SystemRequest>[0]> = {}) =>
  Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content }], ...fields })

const sentiment = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
}

const base = (script: ReadonlyArray<ScriptedEngine.Step>, ...tools: ReadonlyArray<Tool.Tool<any, any>>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), Registry.layer(tools), Constraint.layer, Observe.eventLogMemory)

const facade = Effect.flatMap(Facade.make(), Effect.succeed)

describe("Facade", () => {
  describe("chat", () => {
    it.effect("a tool the turn runs sees the request's id and session in its correlation, whether or not anybody observes", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make<ReadonlyArray<string>>([])
        const probe = correlationProbe(seen, (c) => `${c.requestId} ${c.sessionId ?? "none"}`)
        const script = () => [ScriptedEngine.toolCalls([{ name: "probe", arguments: {} }]), ScriptedEngine.reply("done")]
        // nobody observes: no EventLog, no Metrics, no tracer exporting
        const quiet = yield* Facade.make().pipe(
          Effect.provide(Layer.mergeAll(ScriptedEngine.layer([...script(), ...script()]), Registry.layer([probe]), Constraint.layer))
        )
        const drawn = yield* quiet.run(chat("probe"))
        const named = yield* quiet.run(chat("probe", { requestId: "r-probe", sessionId: "s-probe" }))
        // observed: the request's span and events, the same correlation
        const observed = yield* Facade.make().pipe(Effect.provide(base(script(), probe)))
        const recorded = yield* observed.run(chat("probe", { requestId: "r-seen", sessionId: "s-seen" }))
        expect([drawn.error, named.error, recorded.error]).toEqual([undefined, undefined, undefined])
        expect(yield* Ref.get(seen)).toEqual([
          `${drawn.requestId} ${drawn.sessionId}`,
          "r-probe s-probe",
          "r-seen s-seen"
        ])
        expect(drawn.requestId).toMatch(/^req_/)
        // the caller's own correlation is as it was
        expect((yield* currentCorrelation).requestId).toBe("unscoped")
      }))

    it.effect("answers, with tool calls made, usage, correlation and the lifecycle walked", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const execution = yield* system.execute(chat("2+3?", { requestId: "r-1", sessionId: "s-1" }))
        const { response } = execution
        expect(response.error).toBeUndefined()
        expect(response.content).toBe("5")
        expect(response.requestId).toBe("r-1")
        expect(response.sessionId).toBe("s-1")
        expect(response.stopReason).toBe("finish")
        expect(response.toolCallsMade).toHaveLength(1)
        expect(response.toolCallsMade[0]).toMatchObject({ name: "add", result: "5" })
        expect(response.tokenUsage.calls).toBe(2)
        expect(execution.transitions.map((t) => `${t.from}->${t.to}`)).toEqual([
          "INIT->PREPARE",
          "PREPARE->EXECUTE",
          "EXECUTE->COMPLETE"
        ])
        expect(execution.state.current).toBe("COMPLETE")
        // the full timeline of the request is rebuilt from its events
        const events = yield* Effect.flatMap(EventLog, (l) => l.events)
        expect(events.every((e) => e.correlation.requestId === "r-1")).toBe(true)
        expect(events.every((e) => e.correlation.sessionId === "s-1")).toBe(true)
        const timeline = events.map((e) =>
          e._tag === "LifecycleTransition" ? `${e.fromState}->${e.toState}` : e._tag
        )
        expect(timeline).toEqual([
          "INIT->PREPARE",
          "PREPARE->EXECUTE",
          "InferenceStart",
          "InferenceEnd",
          "ToolStart",
          "ToolEnd",
          "InferenceStart",
          "InferenceEnd",
          "EXECUTE->COMPLETE"
        ])
        const toolStart = events.find((e): e is Event.ToolStart => e._tag === "ToolStart")!
        const firstInference = events.find((e): e is Event.InferenceStart => e._tag === "InferenceStart")!
        expect(toolStart.inferenceId).toBe(firstInference.inferenceId)
        expect(toolStart.correlation.toolCallId).toBe(toolStart.toolCallId)
      }).pipe(
        Effect.provide(
          base(
            [ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")],
            add
          )
        )
      )
    )

    it.effect("reports progress (text deltas, tool calls, tool results) while a chat runs", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const seen = yield* Ref.make<ReadonlyArray<string>>([])
        const response = yield* system.run(chat("2+3?"), {
          onProgress: (p) =>
            Ref.update(seen, (s) => [
              ...s,
              p._tag === "TextDelta" ? `text:${p.text}` : p._tag === "ToolCallRequested" ? `call:${p.call.name}` : `result:${p.record.result}`
            ])
        })
        expect(response.content).toBe("It is 5.")
        expect(yield* Ref.get(seen)).toEqual(["call:add", "result:5", "text:It ", "text:is ", "text:5."])
      }).pipe(
        Effect.provide(
          base(
            [ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("It is 5.")],
            add
          )
        )
      )
    )

    it.effect("continues a chat session by its id, and generates ids when absent", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const first = yield* system.run(chat("My name is Ada."))
        expect(first.requestId).toMatch(/^req_/)
        expect(first.sessionId).toMatch(/^session_/)
        yield* system.run(chat("What is my name?", { sessionId: first.sessionId }))
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.map((m) => m.content)).toEqual(["My name is Ada.", "Noted.", "What is my name?"])
      }).pipe(Effect.provide(base([ScriptedEngine.reply("Noted."), ScriptedEngine.reply("Ada.")])))
    )

    it.effect("a new session's id is random whatever the IdGenerator (a capability); request ids are the generator's", () =>
      Effect.gen(function* () {
        const uuid = /^session_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
        // drawn by the generator's effect (a generator that cannot draw at once) and at once (IdGenerator.Test can)
        for (const ids of [Layer.succeed(IdGenerator, { next: (prefix) => Effect.succeed(`${prefix}_fixed`) }), IdGenerator.Test]) {
          const system = yield* facade.pipe(Effect.provide(ids))
          const [first, second] = yield* Effect.all([system.run(chat("Hi.")), system.run(chat("Hi."))])
          expect(first.requestId).toMatch(/^req_(fixed|1)$/)
          expect(first.sessionId).toMatch(uuid)
          expect(second.sessionId).toMatch(uuid)
          expect(second.sessionId).not.toBe(first.sessionId)
        }
        // an AgentLoop made without a session id, on a shared store, too
        const agent = yield* AgentLoop.make().pipe(Effect.provide(IdGenerator.Test))
        expect(agent.sessionId).toMatch(uuid)
      }).pipe(Effect.provide(base([ScriptedEngine.reply("Hello."), ScriptedEngine.reply("Hello."), ScriptedEngine.reply("Hello."), ScriptedEngine.reply("Hello.")])))
    )

    it.effect("passes hints through and enforces the tool whitelist (a tool outside it never runs)", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make(0)
        const counted = Tool.make({
          name: "counted",
          description: "counts",
          parameters: Schema.Struct({}),
          handler: () => Effect.as(Ref.update(ran, (n) => n + 1), "ran")
        })
        const response = yield* Effect.flatMap(Facade.make(), (s) =>
          s.run(
            chat("go", {
              tools: ["add"],
              hints: { maxTokens: 64, temperature: 0.3, topP: 0.9, options: { seed_hint: 7 } }
            } as never)
          )
        ).pipe(
          Effect.provide(
            base([ScriptedEngine.toolCalls([{ name: "counted", arguments: {} }]), ScriptedEngine.reply("ok")], add, counted)
          )
        )
        expect(yield* Ref.get(ran)).toBe(0)
        expect(response.toolCallsMade[0]!.result).toContain("TOOL_NOT_FOUND")
      })
    )

    it.effect("sends hints to the engine", () =>
      Effect.gen(function* () {
        const system = yield* facade
        yield* system.run(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "chat",
            messages: [{ role: "user", content: "x" }],
            tools: ["add"],
            hints: { maxTokens: 64, temperature: 0.3, topP: 0.9, options: { mirostat: 2 } }
          })
        )
        const [request] = yield* ScriptedEngine.requests
        expect(request).toMatchObject({ maxTokens: 64, temperature: 0.3, topP: 0.9, options: { mirostat: 2 } })
        expect(request!.tools.map((t) => t.name)).toEqual(["add"])
      }).pipe(Effect.provide(base([ScriptedEngine.reply("ok")], add)))
    )
  })

  describe("chat through the request's engine", () => {
    it.effect("every streamed inference of a chat gets the hints it leaves unset, and what it spent counts in a failure's response", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "chat",
            messages: [{ role: "user", content: "add 2 and 3" }],
            hints: { seed: 7, stop: ["END"], presencePenalty: 0.5 }
          })
        )
        // the second inference failed: the response reports what the first one spent
        expect(response.error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(response.tokenUsage).toMatchObject({ promptTokens: 11, outputTokens: 3, calls: 1 })
        const requests = yield* ScriptedEngine.requests
        expect(requests).toHaveLength(2)
        for (const request of requests) expect(request).toMatchObject({ seed: 7, stop: ["END"], presencePenalty: 0.5 })
      }).pipe(Effect.provide(base([
        ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { promptTokens: 11, outputTokens: 3 } }),
        ScriptedEngine.fail(InferenceFailure.modelUnavailable("down"))
      ], add)))
    )
  })

  describe("structured", () => {
    it.effect("returns the raw content, the structured output and the validation result", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const execution = yield* system.execute(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "structured",
            messages: [
              { role: "system", content: "Classify the sentiment." },
              { role: "user", content: "I love it" }
            ],
            output: { schema: sentiment }
          })
        )
        const { response } = execution
        expect(response.error).toBeUndefined()
        expect(response.content).toBe('{"sentiment": "POSITIVE"}')
        expect(response.structuredOutput).toEqual({ sentiment: "positive" })
        expect(response.validationResult).toBeDefined()
        expect(execution.state.current).toBe("COMPLETE")
        const [request] = yield* ScriptedEngine.requests
        expect(request!.schema).toEqual(sentiment)
        expect(request!.messages.map((m) => m.content)).toEqual(["Classify the sentiment.", "I love it"])
      }).pipe(Effect.provide(base([ScriptedEngine.reply('{"sentiment": "POSITIVE"}')])))
    )

    it.effect("a reply that never validates is a ConstraintFailure with the raw text", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const fiber = yield* Effect.fork(
          system.execute(
            Schema.decodeUnknownSync(SystemRequest)({
              mode: "structured",
              messages: [{ role: "user", content: "I love it" }],
              output: { schema: sentiment }
            })
          )
        )
        yield* TestClock.adjust("1 minute")
        const { response, state } = yield* Fiber.join(fiber)
        expect(response.error?.category).toBe("ConstraintFailure")
        expect(response.error?.details.raw).toBe('{"mood": "great"}')
        expect(state.current).toBe("ERROR")
        expect(state.lastError?.code).toBe(response.error?.code)
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ScriptedEngine.layer([ScriptedEngine.reply('{"mood": "great"}')], { whenExhausted: "repeat-last" }),
            Constraint.layer,
            Observe.eventLogMemory
          )
        )
      )
    )
  })

  describe("redundant", () => {
    it.effect("votes over replicas and reports confidence from voting", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const execution = yield* system.execute(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "redundant",
            messages: [{ role: "user", content: "I love it" }],
            output: { schema: sentiment },
            redundancy: { n: 3 }
          })
        )
        const { response } = execution
        expect(response.error).toBeUndefined()
        expect(response.structuredOutput).toEqual({ sentiment: "positive" })
        expect(response.confidence).toBeCloseTo(2 / 3)
        expect(response.confidenceSource).toBe("voting")
        expect(response.candidates).toEqual([
          '{"sentiment":"positive"}',
          '{"sentiment":"negative"}',
          '{"sentiment":"positive"}'
        ])
        expect(response.tokenUsage.calls).toBe(3)
        expect(execution.transitions.map((t) => t.to)).toEqual(["PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"])
      }).pipe(
        Effect.provide(
          base([
            ScriptedEngine.reply('{"sentiment":"positive"}'),
            ScriptedEngine.reply('{"sentiment":"negative"}'),
            ScriptedEngine.reply('{ "sentiment" : "positive" }')
          ])
        )
      )
    )

    it.effect("unanimity voting without consensus is ORCHESTRATION_NO_CONSENSUS", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "redundant",
            messages: [{ role: "user", content: "meh" }],
            output: { schema: sentiment },
            redundancy: { n: 2, voting: "unanimity" }
          })
        )
        expect(response.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      }).pipe(
        Effect.provide(
          base([ScriptedEngine.reply('{"sentiment":"positive"}'), ScriptedEngine.reply('{"sentiment":"neutral"}')])
        )
      )
    )
  })

  describe("plan", () => {
    it.effect("runs a provided plan through PLAN, chaining step outputs", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const execution = yield* system.execute(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "plan",
            messages: [],
            plan: {
              steps: [
                { name: "sum", type: "tool", input: { name: "add", arguments: { a: 2, b: 3 } } },
                { name: "explain", type: "infer", input: "Explain 5" }
              ]
            }
          })
        )
        const { response } = execution
        expect(response.error).toBeUndefined()
        expect(response.content).toBe("Five is 2 + 3.")
        expect(response.toolCallsMade.map((t) => [t.name, t.result])).toEqual([["add", "5"]])
        expect(Object.keys(response.structuredOutput as object)).toEqual(["sum", "explain"])
        expect(execution.transitions.map((t) => t.to)).toEqual(["PLAN", "PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"])
        expect(execution.state.totalSteps).toBe(2)
      }).pipe(Effect.provide(base([ScriptedEngine.reply("Five is 2 + 3.")], add)))
    )

    it.effect("a failing step answers its typed error with the completed steps as partial content", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "plan",
            messages: [],
            plan: {
              steps: [
                { name: "sum", type: "tool", input: { name: "add", arguments: { a: 1, b: 1 } } },
                { name: "boom", type: "tool", input: { name: "missing", arguments: {} } }
              ]
            }
          })
        )
        expect(response.error?.code).toBe("TOOL_NOT_FOUND")
        expect(JSON.parse(response.content)).toHaveProperty("sum")
      }).pipe(Effect.provide(base([], add)))
    )

    it.effect("without a plan or a Planner the request is invalid; an unknown step type is a step mismatch", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const noPlan = yield* system.runUnknown({ mode: "plan", messages: [{ role: "user", content: "do it" }] })
        expect(noPlan.error?.code).toBe("CONFIG_INVALID_REQUEST")
        const unknownType = yield* system.runUnknown({
          mode: "plan",
          messages: [],
          plan: { steps: [{ name: "x", type: "teleport", input: "now" }] }
        })
        expect(unknownType.error?.category).toBe("OrchestrationFailure")
      }).pipe(Effect.provide(base([])))
    )
  })

  describe("configuration and envelopes", () => {
    it.effect("CONFIG_NO_ENGINE when no engine is provided", () =>
      Effect.gen(function* () {
        const system = yield* Facade.make()
        const execution = yield* system.execute(chat("hi"))
        expect(execution.response.error).toMatchObject({ code: "CONFIG_NO_ENGINE", category: "ConfigurationFailure" })
        expect(execution.state.current).toBe("ERROR")
        expect(execution.transitions.map((t) => t.to)).toEqual(["ERROR"])
      }).pipe(Effect.provide(Constraint.layer))
    )

    it.effect("CONFIG_SCHEMA_REQUIRED for structured and redundant without a schema", () =>
      Effect.gen(function* () {
        const system = yield* facade
        for (const mode of ["structured", "redundant"]) {
          const response = yield* system.runUnknown({ mode, messages: [{ role: "user", content: "x" }] })
          expect(response.error?.code).toBe("CONFIG_SCHEMA_REQUIRED")
        }
        expect(yield* ScriptedEngine.requests).toHaveLength(0)
      }).pipe(Effect.provide(base([])))
    )

    it.effect("a grammar file is read at PREPARE; a missing one is CONFIG_GRAMMAR_NOT_FOUND", () =>
      Effect.gen(function* () {
        const fs = yield* Effect.promise(() => import("node:fs"))
        const os = yield* Effect.promise(() => import("node:os"))
        const path = yield* Effect.promise(() => import("node:path"))
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-grammar-"))
        const file = path.join(dir, "sentiment.gbnf")
        const gbnf = 'root ::= "{\\"sentiment\\": \\"" ("positive" | "negative" | "neutral") "\\"}"'
        fs.writeFileSync(file, gbnf)
        const system = yield* facade
        const request = (grammarFile: string) =>
          Schema.decodeUnknownSync(SystemRequest)({
            mode: "structured",
            messages: [{ role: "user", content: "I love it" }],
            output: { schema: sentiment, grammarFile }
          })
        const ok = yield* system.run(request(file))
        expect(ok.error).toBeUndefined()
        const [sent] = yield* ScriptedEngine.requests
        expect(sent!.grammar).toBe(gbnf)
        const missing = yield* system.execute(request(path.join(dir, "missing.gbnf")))
        expect(missing.response.error).toMatchObject({ code: "CONFIG_GRAMMAR_NOT_FOUND", category: "ConfigurationFailure" })
        expect(missing.response.error?.message).toContain("missing.gbnf")
        expect(missing.state.current).toBe("ERROR")
        // never read whole: a device that never ends, a directory, a file over the grammar limit
        const large = path.join(dir, "large.gbnf")
        fs.writeFileSync(large, "x".repeat(70 * 1024))
        for (const [where, reason] of [["/dev/zero", "not a regular file"], [dir, "not a regular file"], [large, "more than"]] as const) {
          const refused = yield* system.run(request(where))
          expect(refused.error?.code, where).toBe("CONFIG_GRAMMAR_NOT_FOUND")
          expect(refused.error?.message).toContain(reason)
        }
        expect(yield* ScriptedEngine.requests).toHaveLength(1)
        fs.rmSync(dir, { recursive: true, force: true })
      }).pipe(
        Effect.provide(Layer.merge(base([ScriptedEngine.reply('{"sentiment": "positive"}')]), NodeFileSystem.layer))
      )
    )

    it.effect("without a FileSystem a grammar file cannot be read: CONFIG_GRAMMAR_NOT_FOUND", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.runUnknown({
          mode: "structured",
          messages: [{ role: "user", content: "x" }],
          output: { schema: sentiment, grammarFile: "/tmp/whatever.gbnf" }
        })
        expect(response.error?.code).toBe("CONFIG_GRAMMAR_NOT_FOUND")
      }).pipe(Effect.provide(base([])))
    )

    it.effect("bad envelopes answer CONFIG_INVALID_REQUEST naming what is wrong", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const cases: ReadonlyArray<[unknown, string]> = [
          [{ messages: [{ role: "user", content: "x" }] }, "mode"],
          [{ mode: "dance", messages: [] }, "mode"],
          [{ mode: "chat", messages: "hello" }, "messages"],
          [{ mode: "chat", messages: [{ role: "user", content: 42 }] }, "content"],
          [{ mode: "structured", messages: [{ role: "user", content: "x" }], output: { schema: { type: "banana" } } }, "type"],
          [{ mode: "chat", messages: [{ role: "user", content: "x" }], hints: { timeout: "soon" } }, "timeout"],
          ["not an object", "SystemRequest"],
          [{ mode: "chat", messages: [{ role: "assistant", content: "I spoke last" }] }, "user message"]
        ]
        for (const [input, mentions] of cases) {
          const response = yield* system.runUnknown(input)
          expect(response.error?.code, JSON.stringify(input)).toBe("CONFIG_INVALID_REQUEST")
          expect(response.error?.message).toContain(mentions)
          expect(response.error?.retryable).toBe(false)
        }
        const withId = yield* system.runUnknown({ requestId: "mine", mode: "nope", messages: [] })
        expect(withId.requestId).toBe("mine")
        // A wrong optional field is one issue at its own path, not also "expected undefined" above it.
        const negative = yield* system.runUnknown({ mode: "chat", messages: [{ role: "user", content: "x" }], hints: { maxTokens: -5 } })
        expect(negative.error?.details).toEqual({ issues: ["hints.maxTokens: expected a non-negative number, got -5"] })
        expect(yield* ScriptedEngine.requests).toHaveLength(0)
      }).pipe(Effect.provide(base([])))
    )

    it.effect("a tool the request names but nobody registered is TOOL_NOT_FOUND, before any inference", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(chat("What is 2 plus 2?", { tools: ["nope"] }))
        expect(response.error).toMatchObject({ code: "TOOL_NOT_FOUND", category: "ToolFailure", retryable: false })
        expect(response.error?.message).toMatch(/not registered: nope \(registered: none\)/)
        expect(response.error?.details).toMatchObject({ unknownTools: ["nope"] })
        expect(yield* ScriptedEngine.requests).toHaveLength(0)
      }).pipe(Effect.provide(base([ScriptedEngine.reply("4")])))
    )
  })

  describe("cancellation", () => {
    it.effect("a timeout ends in CANCELLED_TIMEOUT with the partial output", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const fiber = yield* Effect.fork(
          system.execute(
            Schema.decodeUnknownSync(SystemRequest)({
              mode: "chat",
              messages: [{ role: "user", content: "count" }],
              hints: { timeout: 3000 }
            })
          )
        )
        yield* TestClock.adjust("3 seconds")
        const { response, state } = yield* Fiber.join(fiber)
        expect(response.error).toMatchObject({ code: "CANCELLED_TIMEOUT", category: "Cancellation" })
        expect(response.content).toBe("one two ")
        expect(state.current).toBe("CANCELLED")
      }).pipe(
        Effect.provide(base([ScriptedEngine.reply("one two three four", { chunkDelay: "1200 millis" })]))
      )
    )

    it.effect("a request that ends before its timeout leaves no fiber behind (its timer is stopped)", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const supervisor = yield* Supervisor.track
        const request = Schema.decodeUnknownSync(SystemRequest)({
          mode: "chat",
          messages: [{ role: "user", content: "hi" }],
          hints: { timeout: 3_600_000 }
        })
        const { response } = yield* system.execute(request).pipe(Effect.supervised(supervisor))
        expect(response.error).toBeUndefined()
        // the fibers the request forked (its run, its timer) have ended: none sleeps on for the hour
        yield* TestClock.adjust("1 millis")
        expect(yield* supervisor.value).toEqual([])
      }).pipe(Effect.provide(base([ScriptedEngine.reply("hello")])))
    )

    it.effect("interrupting the caller interrupts the request's own fiber: its engine call stops, nothing runs on", () =>
      Effect.gen(function* () {
        const stopped = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const engine = Layer.succeed(Engine.Engine, {
          infer: () =>
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
              Effect.onInterrupt(() => Deferred.succeed(stopped, undefined))
            ),
          stream: () => Stream.die("not streamed"),
          modelInfo: Effect.succeed(new ModelInfo({ name: "m", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
        })
        const system = yield* Facade.make().pipe(Effect.provide(Layer.merge(engine, Constraint.layer)))
        const structured = Schema.decodeUnknownSync(SystemRequest)({
          mode: "structured",
          messages: [{ role: "user", content: "x" }],
          output: { schema: sentiment }
        })
        const fiber = yield* Effect.fork(system.run(structured))
        yield* Deferred.await(started)
        yield* Fiber.interrupt(fiber)
        expect(yield* Deferred.isDone(stopped)).toBe(true)
      }).pipe(Effect.timeout("10 seconds"))
    )

    it.effect("cancel(requestId) ends a running request in CANCELLED_SIGNAL", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const fiber = yield* Effect.fork(system.execute(chat("slow", { requestId: "to-cancel" })))
        yield* TestClock.adjust("1 second")
        expect(yield* system.cancel("to-cancel")).toBe(true)
        const { response, state } = yield* Fiber.join(fiber)
        expect(response.error?.code).toBe("CANCELLED_SIGNAL")
        expect(state.current).toBe("CANCELLED")
        expect(yield* system.cancel("to-cancel")).toBe(false)
      }).pipe(Effect.provide(base([ScriptedEngine.reply("late", { delay: "1 hour" })])))
    )

    it.effect("a chat turn cancelled, timed out or failed leaves its session as it was; an answered one stores the turn", () =>
      Effect.gen(function* () {
        const store = yield* ConversationStore.makeInMemory()
        const system = yield* Facade.make().pipe(Effect.provideService(ConversationStore.ConversationStore, store))
        const history = Effect.map(store.load("kept"), (ms) => ms.map((m) => `${m.role}:${m.content}`))
        expect((yield* system.run(chat("one", { sessionId: "kept" }))).content).toBe("first")
        const stored = yield* history
        expect(stored).toEqual(["user:one", "assistant:first"])
        // cancelled while the model answers
        const cancelled = yield* Effect.fork(system.run(chat("two", { sessionId: "kept", requestId: "c-kept" })))
        yield* TestClock.adjust("1 second")
        expect(yield* system.cancel("c-kept")).toBe(true)
        expect((yield* Fiber.join(cancelled)).error?.code).toBe("CANCELLED_SIGNAL")
        expect(yield* history).toEqual(stored)
        // timed out while the model answers
        const timed = yield* Effect.fork(system.run(Schema.decodeUnknownSync(SystemRequest)({
          mode: "chat",
          messages: [{ role: "user", content: "three" }],
          sessionId: "kept",
          hints: { timeout: 2000 }
        })))
        yield* TestClock.adjust("3 seconds")
        expect((yield* Fiber.join(timed)).error?.code).toBe("CANCELLED_TIMEOUT")
        expect(yield* history).toEqual(stored)
        // failed
        expect((yield* system.run(chat("four", { sessionId: "kept" }))).error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(yield* history).toEqual(stored)
        // and a new session whose turn fails is not stored at all
        const lost = yield* system.run(chat("five"))
        expect(lost.error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(yield* store.load(lost.sessionId!)).toEqual([])
        expect((yield* system.run(chat("six", { sessionId: "kept" }))).content).toBe("second")
        expect(yield* history).toEqual([...stored, "user:six", "assistant:second"])
      }).pipe(Effect.provide(base([
        ScriptedEngine.reply("first"),
        ScriptedEngine.reply("late", { delay: "1 hour" }),
        ScriptedEngine.reply("late", { delay: "1 hour" }),
        ScriptedEngine.fail(InferenceFailure.modelUnavailable("down")),
        ScriptedEngine.fail(InferenceFailure.modelUnavailable("down")),
        ScriptedEngine.reply("second")
      ])))
    )

    it.effect("a cancel that comes before its request starts is applied when it starts", () =>
      Effect.gen(function* () {
        const system = yield* facade
        expect(yield* system.cancel("early")).toBe(false)
        const { response, state, transitions } = yield* system.execute(chat("slow", { requestId: "early" }))
        expect(response.error?.code).toBe("CANCELLED_SIGNAL")
        expect(state.current).toBe("CANCELLED")
        expect(transitions.at(-1)?.to).toBe("CANCELLED")
        expect(yield* ScriptedEngine.requests).toHaveLength(0)
      }).pipe(Effect.provide(base([ScriptedEngine.reply("late", { delay: "1 hour" })])))
    )

    it.effect("a pending cancel expires, and a late cancel of a finished request hits no later one", () =>
      Effect.gen(function* () {
        const system = yield* facade
        expect(yield* system.cancel("expired")).toBe(false)
        yield* TestClock.adjust("6 seconds")
        expect((yield* system.run(chat("hi", { requestId: "expired" }))).error).toBeUndefined()
        // "expired" has finished: cancelling it now must not cancel a request that reuses the id.
        expect(yield* system.cancel("expired")).toBe(false)
        expect((yield* system.run(chat("hi again", { requestId: "expired" }))).error).toBeUndefined()
      }).pipe(Effect.provide(base([ScriptedEngine.reply("one"), ScriptedEngine.reply("two")])))
    )
  })

  describe("failures", () => {
    it.effect("an inference failure becomes its SystemError", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(chat("hi"))
        expect(response.error).toMatchObject({
          code: "INFERENCE_CONTEXT_EXCEEDED",
          category: "InferenceFailure",
          retryable: false
        })
      }).pipe(Effect.provide(base([ScriptedEngine.fail(InferenceFailure.contextExceeded("too long"))])))
    )

    it.effect("a defect is labelled ORCHESTRATION_DEFECT, never leaking unlabelled", () =>
      Effect.gen(function* () {
        const system = yield* facade
        const response = yield* system.run(chat("hi"))
        expect(response.error).toMatchObject({ code: "ORCHESTRATION_DEFECT", category: "OrchestrationFailure" })
        expect(response.error?.message).toContain("engine exploded")
      }).pipe(
        Effect.provide(base([ScriptedEngine.respond(() => Effect.die(new Error("engine exploded")))]))
      )
    )
  })

  it.effect("a response encodes to JSON and decodes back", () =>
    Effect.gen(function* () {
      const system = yield* facade
      const response = yield* system.run(chat("hi"))
      const { SystemResponse } = yield* Effect.promise(() => import("../src/domain/System.js"))
      const json = JSON.parse(JSON.stringify(Schema.encodeSync(SystemResponse)(response)))
      expect(Schema.decodeUnknownSync(SystemResponse)(json).content).toBe("hello")
      expect(Message.user("x").role).toBe("user")
    }).pipe(Effect.provide(base([ScriptedEngine.reply("hello")])))
  )
})
