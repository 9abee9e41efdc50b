import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import * as Event from "../src/domain/Event.js"
import { InferenceFailure, ToolFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as Memory from "../src/layers/InMemoryMemory.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import { ContextProvider } from "../src/services/ContextProvider.js"
import { currentCorrelation, EventLog } from "../src/services/EventLog.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as EngineService from "../src/services/Engine.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import { add, correlationProbe, failing, hanging, slow, throwing } from "./support/tools.js"

const engine = ScriptedEngine.layer
const tools = (...ts: ReadonlyArray<Tool.Tool<any, any>>) => Registry.layer(ts)

describe("AgentLoop", () => {
  describe("conversation", () => {
    it.effect("keeps history across turns, system prompt first; messages() is a copy", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "You are terse." })
        const first = yield* agent.chat("Hello")
        const second = yield* agent.chat("And again")
        expect(first.content).toBe("Hi.")
        expect(first.stopReason).toBe("finish")
        expect(second.content).toBe("Hi again.")
        const history = yield* agent.messages
        expect(history.map((m) => [m.role, m.content])).toEqual([
          ["system", "You are terse."],
          ["user", "Hello"],
          ["assistant", "Hi."],
          ["user", "And again"],
          ["assistant", "Hi again."]
        ])
        ;(history as Array<Message.Message>).pop()
        expect((yield* agent.messages).length).toBe(5)
        // the second request carried the whole history
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.map((m) => m.content)).toEqual(["You are terse.", "Hello", "Hi.", "And again"])
        expect(requests[1]!.sessionKey).toBe(agent.sessionId)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("Hi."), ScriptedEngine.reply("Hi again.")])))
    )

    it.effect("continues a session kept in the ConversationStore", () =>
      Effect.gen(function* () {
        const a = yield* AgentLoop.make({ sessionId: "s1", systemPrompt: "sys" })
        yield* a.chat("one")
        const b = yield* AgentLoop.make({ sessionId: "s1", systemPrompt: "sys" })
        yield* b.chat("two")
        const history = yield* b.messages
        expect(history.map((m) => m.content)).toEqual(["sys", "one", "1", "two", "2"])
      }).pipe(
        Effect.provide(Layer.merge(engine([ScriptedEngine.reply("1"), ScriptedEngine.reply("2")]), Memory.layerMemory))
      )
    )
  })

  describe("tool loop", () => {
    it.effect("runs a requested tool, feeds the result back and answers", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const result = yield* agent.chat("What is 2 + 3?")
        expect(result.content).toBe("5")
        expect(result.inferences).toBe(2)
        expect(result.toolCalls).toHaveLength(1)
        expect(result.toolCalls[0]).toMatchObject({ name: "add", result: "5", isError: false, id: "call_1" })
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.tools.map((t) => t.name)).toEqual(["add"])
        expect(requests[0]!.tools[0]!.parameters).toMatchObject({
          type: "object",
          properties: { a: { type: "number" }, b: { type: "number" } },
          required: ["a", "b"]
        })
        const last = requests[1]!.messages.at(-1)!
        expect(last).toMatchObject({ role: "tool", content: "5", toolCallId: "call_1", name: "add", isError: false })
        const history = yield* agent.messages
        expect(history.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]),
              ScriptedEngine.reply("5")
            ]),
            tools(add)
          )
        )
      )
    )

    it.effect("runs the calls of one round concurrently, never more than the cap", () =>
      Effect.gen(function* () {
        const running = yield* Ref.make(0)
        const peak = yield* Ref.make(0)
        const layer = Layer.merge(
          engine([
            ScriptedEngine.toolCalls([1, 2, 3, 4].map(() => ({ name: "slow", arguments: { seconds: 1 } }))),
            ScriptedEngine.reply("ok")
          ]),
          tools(slow(running, peak))
        )
        const fiber = yield* AgentLoop.make({ toolConcurrency: 2 }).pipe(
          Effect.flatMap((a) => a.chat("go")),
          Effect.provide(layer),
          Effect.fork
        )
        yield* TestClock.adjust("1 second")
        expect(fiber.unsafePoll()).toBeNull()
        yield* TestClock.adjust("1 second")
        const result = yield* Fiber.join(fiber)
        expect(result.toolCalls).toHaveLength(4)
        expect(yield* Ref.get(peak)).toBe(2)
      })
    )

    it.effect("feeds an unknown tool, a failing tool, a throwing tool and bad arguments back as errors", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const result = yield* agent.chat("try everything")
        expect(result.content).toBe("recovered")
        const byName = Object.fromEntries(result.toolCalls.map((r) => [r.name, r]))
        expect(byName["nope"]!.isError).toBe(true)
        expect(byName["nope"]!.result).toContain("TOOL_NOT_FOUND")
        expect(byName["nope"]!.result).toContain("available tools: add, failing, throwing")
        expect(byName["failing"]!.result).toContain("TOOL_EXECUTION_FAILED")
        expect(byName["failing"]!.result).toContain("the disk is full")
        expect(byName["throwing"]!.result).toContain("boom")
        expect(byName["add"]!.isError).toBe(true)
        expect(byName["add"]!.result).toContain("Invalid arguments")
        const requests = yield* ScriptedEngine.requests
        const toolMessages = requests[1]!.messages.filter(Message.isTool)
        expect(toolMessages).toHaveLength(4)
        expect(toolMessages.every((m) => m.isError)).toBe(true)
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([
              ScriptedEngine.toolCalls([
                { name: "nope", arguments: {} },
                { name: "failing", arguments: {} },
                { name: "throwing", arguments: {} },
                { name: "add", arguments: { a: "two" } }
              ]),
              ScriptedEngine.reply("recovered")
            ]),
            tools(add, failing, throwing)
          )
        )
      )
    )

    it.effect("a hanging tool times out with TOOL_TIMEOUT and the loop goes on", () =>
      Effect.gen(function* () {
        const fiber = yield* AgentLoop.make().pipe(
          Effect.flatMap((a) => a.chat("wait")),
          Effect.provide(
            Layer.merge(
              engine([ScriptedEngine.toolCalls([{ name: "hanging", arguments: {} }]), ScriptedEngine.reply("gave up")]),
              tools(hanging)
            )
          ),
          Effect.fork
        )
        yield* TestClock.adjust("4 seconds")
        expect(fiber.unsafePoll()).toBeNull()
        yield* TestClock.adjust("1 second")
        const result = yield* Fiber.join(fiber)
        expect(result.content).toBe("gave up")
        expect(result.toolCalls[0]!.result).toContain("TOOL_TIMEOUT")
      })
    )

    it.effect("retries an idempotent tool on its Schedule, never a non-idempotent one", () =>
      Effect.gen(function* () {
        const flakyCalls = yield* Ref.make(0)
        const strictCalls = yield* Ref.make(0)
        const flaky = Tool.make({
          name: "flaky",
          description: "fails twice",
          parameters: Schema.Struct({}),
          idempotent: true,
          handler: () =>
            Effect.flatMap(Ref.updateAndGet(flakyCalls, (n) => n + 1), (n) =>
              n < 3 ? Effect.fail("transient") : Effect.succeed("finally")
            )
        })
        const strict = Tool.make({
          name: "strict",
          description: "fails once",
          parameters: Schema.Struct({}),
          handler: () => Effect.zipRight(Ref.update(strictCalls, (n) => n + 1), Effect.fail("no"))
        })
        const fiber = yield* AgentLoop.make({ toolRetry: RetryPolicy.exponential({ base: "1 second", times: 3 }) }).pipe(
          Effect.flatMap((a) => a.chat("go")),
          Effect.provide(
            Layer.merge(
              engine([
                ScriptedEngine.toolCalls([
                  { name: "flaky", arguments: {} },
                  { name: "strict", arguments: {} }
                ]),
                ScriptedEngine.reply("done")
              ]),
              tools(flaky, strict)
            )
          ),
          Effect.fork
        )
        yield* TestClock.adjust("1 minute")
        const result = yield* Fiber.join(fiber)
        expect(yield* Ref.get(flakyCalls)).toBe(3)
        expect(yield* Ref.get(strictCalls)).toBe(1)
        expect(result.toolCalls.find((r) => r.name === "flaky")).toMatchObject({ result: "finally", isError: false })
        expect(result.toolCalls.find((r) => r.name === "strict")!.isError).toBe(true)
      })
    )

    it.effect("stops at maxToolIterations with a stop reason, keeping a well-formed transcript", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ maxToolIterations: 3 })
        const result = yield* agent.chat("loop forever")
        expect(result.stopReason).toBe("max_iterations")
        expect(result.toolCalls).toHaveLength(3)
        expect(result.inferences).toBe(4)
        const history = yield* agent.messages
        // every assistant tool call is answered by a tool message
        const calls = history.filter(Message.isAssistant).flatMap((m) => m.toolCalls.map((c) => c.id))
        const answered = history.filter(Message.isTool).map((m) => m.toolCallId)
        expect(answered.sort()).toEqual(calls.sort())
        expect(history.filter(Message.isTool).at(-1)!.content).toContain("iteration limit")
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }])], {
              whenExhausted: "repeat-last"
            }),
            tools(add)
          )
        )
      )
    )

    it.effect("stops when the turn's token budget is spent", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ turnTokenBudget: 25 })
        const result = yield* agent.chat("spend")
        expect(result.stopReason).toBe("budget_exhausted")
        expect(result.usage.totalTokens).toBeGreaterThanOrEqual(25)
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }])], {
              whenExhausted: "repeat-last"
            }),
            tools(add)
          )
        )
      )
    )

    it.effect("offers and runs only whitelisted tools", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ allowTools: ["failing"] })
        const result = yield* agent.chat("add")
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.tools.map((t) => t.name)).toEqual(["failing"])
        expect(result.toolCalls[0]!.result).toContain("TOOL_NOT_FOUND")
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }]), ScriptedEngine.reply("no")]),
            tools(add, failing)
          )
        )
      )
    )

    it.effect("fails with the ToolFailure when toolErrorMode is 'fail'", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ toolErrorMode: "fail" })
        const error = yield* Effect.flip(agent.chat("x"))
        expect(error).toBeInstanceOf(ToolFailure)
        expect(error.code).toBe("TOOL_EXECUTION_FAILED")
        expect(yield* agent.messages).toEqual([])
      }).pipe(
        Effect.provide(
          Layer.merge(engine([ScriptedEngine.toolCalls([{ name: "failing", arguments: {} }])]), tools(failing))
        )
      )
    )

    it.effect("calls the tool-result hook for each execution", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make<ReadonlyArray<string>>([])
        const agent = yield* AgentLoop.make({
          onToolResult: (r) => Ref.update(seen, (s) => [...s, `${r.name}=${r.result}`])
        })
        yield* agent.chat("x")
        expect(yield* Ref.get(seen)).toEqual(["add=3"])
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 2 } }]), ScriptedEngine.reply("3")]),
            tools(add)
          )
        )
      )
    )
  })

  describe("inference failures", () => {
    it.effect("retries a retryable inference failure on the Schedule", () =>
      Effect.gen(function* () {
        const fiber = yield* AgentLoop.make().pipe(
          Effect.flatMap((a) => a.chat("hi")),
          Effect.provide(
            engine([ScriptedEngine.fail(InferenceFailure.engineError("503 from upstream")), ScriptedEngine.reply("hello")])
          ),
          Effect.fork
        )
        yield* TestClock.adjust("10 seconds")
        const result = yield* Fiber.join(fiber)
        expect(result.content).toBe("hello")
      })
    )

    it.effect("fails with a non-retryable InferenceFailure and leaves history unchanged", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "sys" })
        const error = yield* Effect.flip(agent.chat("a very long prompt"))
        expect(error).toBeInstanceOf(InferenceFailure)
        expect(error.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
        expect((yield* agent.messages).map((m) => m.content)).toEqual(["sys"])
        expect(yield* ScriptedEngine.requests).toHaveLength(1)
      }).pipe(Effect.provide(engine([ScriptedEngine.fail(InferenceFailure.contextExceeded("4100 > 4096 tokens"))])))
    )
  })

  describe("ephemeral context", () => {
    const provider = (build: (q: string) => Effect.Effect<ReadonlyArray<Message.Message>, InferenceFailure>) =>
      Layer.succeed(ContextProvider, { build })

    it.effect("is inserted just before the user message and never stored", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ systemPrompt: "sys" })
        yield* agent.chat("Where is Paris?")
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.messages.map((m) => m.content)).toEqual([
          "sys",
          "Relevant context: about Where is Paris?",
          "Where is Paris?"
        ])
        expect((yield* agent.messages).map((m) => m.content)).toEqual(["sys", "Where is Paris?", "France."])
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([ScriptedEngine.reply("France.")]),
            provider((q) => Effect.succeed([Message.system(`Relevant context: about ${q}`)]))
          )
        )
      )
    )

    it.effect("a failing provider degrades to no context and is recorded", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const result = yield* agent.chat("q")
        expect(result.content).toBe("fine")
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.messages).toHaveLength(1)
        const events = yield* Effect.flatMap(EventLog, (l) => l.events)
        const ctx = events.find((e) => e._tag === "ContextRetrieved")
        expect(ctx).toMatchObject({ error: "INFERENCE_ENGINE_ERROR: index offline", messageCount: 0 })
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            engine([ScriptedEngine.reply("fine")]),
            provider(() => Effect.fail(InferenceFailure.engineError("index offline"))),
            Observe.eventLogMemory
          )
        )
      )
    )
  })

  describe("streaming", () => {
    it.effect("emits text deltas, tool calls, tool results and the finished turn", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const events = yield* Stream.runCollect(agent.chatStream("add 1 and 2"))
        const list = [...events]
        const tags = list.map((e) => e._tag)
        expect(tags.indexOf("ToolCallRequested")).toBeLessThan(tags.indexOf("ToolResultReady"))
        expect(tags.at(-1)).toBe("TurnFinished")
        const text = list.flatMap((e) => (e._tag === "TextDelta" && e.inference === 1 ? [e.text] : [])).join("")
        expect(text).toBe("The sum is 3.")
        const finished = list.at(-1)
        expect(finished?._tag === "TurnFinished" && finished.result.content).toBe("The sum is 3.")
        expect((yield* agent.messages).at(-1)!.content).toBe("The sum is 3.")
      }).pipe(
        Effect.provide(
          Layer.merge(
            engine([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 2 } }]),
              ScriptedEngine.reply("The sum is 3.")
            ]),
            tools(add)
          )
        )
      )
    )
  })

  describe("chat with onEvent", () => {
    const script = () =>
      Layer.merge(
        engine([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 2 } }]),
          ScriptedEngine.reply("The sum is 3.")
        ]),
        tools(add)
      )
    /** An event with its ids and timings left out: what two runs of the same turn share. */
    const shape = (e: AgentLoop.AgentEvent) =>
      e._tag === "TextDelta" ? `TextDelta ${e.inference} ${e.text}` : e._tag === "InferenceFinished" ? `InferenceFinished ${e.result.content}` : e._tag

    it.effect("hands over the events chatStream emits (all but TurnFinished), in order, and returns the turn", () =>
      Effect.gen(function* () {
        const streamed = yield* Effect.flatMap(AgentLoop.make(), (agent) => Stream.runCollect(agent.chatStream("add 1 and 2"))).pipe(
          Effect.provide(script())
        )
        const seen: Array<AgentLoop.AgentEvent> = []
        const result = yield* Effect.gen(function* () {
          const agent = yield* AgentLoop.make()
          const turn = yield* agent.chat("add 1 and 2", {
            onEvent: (event) => Effect.sync(() => seen.push(event))
          })
          return turn
        }).pipe(Effect.provide(script()))
        expect(result.content).toBe("The sum is 3.")
        expect(seen.map(shape)).toEqual([...streamed].filter((e) => e._tag !== "TurnFinished").map(shape))
        expect(seen.map((e) => e._tag)).toContain("TextDelta")
        expect(seen.map((e) => e._tag)).toContain("ToolResultReady")
      })
    )
  })

  describe("observability", () => {
    it.effect("records inference and tool events with correlation ids linking tools to their inference", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ sessionId: "sess-7" })
        yield* agent.chat("2+3?")
        const events = yield* Effect.flatMap(EventLog, (l) => l.events)
        expect(events.map((e) => e._tag)).toEqual([
          "InferenceStart",
          "InferenceEnd",
          "ToolStart",
          "ToolEnd",
          "InferenceStart",
          "InferenceEnd"
        ])
        const requestIds = new Set(events.map((e) => e.correlation.requestId))
        expect(requestIds.size).toBe(1)
        expect([...requestIds][0]).not.toBe("unscoped")
        expect(events.every((e) => e.correlation.sessionId === "sess-7")).toBe(true)
        const start = events[0] as Event.InferenceStart
        const toolStart = events[2] as Event.ToolStart
        expect(toolStart.inferenceId).toBe(start.inferenceId)
        expect(toolStart.toolCallId).toBe("call_1")
        expect(toolStart.correlation.toolCallId).toBe("call_1")
        expect(events[3]).toMatchObject({ success: true, toolName: "add" })
        expect(events[1]).toMatchObject({ finishReason: "tool_calls", toolCallCount: 1 })
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")]),
            tools(add),
            Observe.eventLogMemory
          )
        )
      )
    )
  })

  describe("one turn at a time", () => {
    it.effect("a second turn waits for the first to commit; the history has both whole, in order", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const first = yield* Effect.fork(agent.chat("one"))
        const second = yield* Effect.fork(agent.chat("two"))
        yield* TestClock.adjust("1 second")
        expect((yield* Fiber.join(first)).content).toBe("1")
        expect((yield* Fiber.join(second)).content).toBe("2")
        expect((yield* agent.messages).map((m) => m.content)).toEqual(["one", "1", "two", "2"])
        // the second request was made after the first turn's answer was in the history
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.map((m) => m.content)).toEqual(["one", "1", "two"])
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("1", { delay: "1 second" }), ScriptedEngine.reply("2")])))
    )

    it.effect("a failed turn, an interrupted turn and a turn interrupted while waiting all let the next one in", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        expect((yield* Effect.flip(agent.chat("fails")))._tag).toBe("InferenceFailure")
        const running = yield* Effect.fork(agent.chat("slow"))
        yield* TestClock.adjust("1 second")
        const waiting = yield* Effect.fork(agent.chat("waits"))
        yield* TestClock.adjust("1 second")
        yield* Fiber.interrupt(waiting)
        yield* Fiber.interrupt(running)
        const last = yield* agent.chat("last").pipe(Effect.timeout("1 second"), Effect.fork)
        yield* TestClock.adjust("1 second")
        expect((yield* Fiber.join(last)).content).toBe("ok")
        expect((yield* agent.messages).map((m) => m.content)).toEqual(["last", "ok"])
      }).pipe(Effect.provide(engine([
        ScriptedEngine.fail(InferenceFailure.modelUnavailable("down")),
        ScriptedEngine.reply("never", { delay: "1 hour" }),
        ScriptedEngine.reply("ok")
      ])))
    )

    it.effect("the turn's correlation holds inside it and is set back after it", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make<ReadonlyArray<string>>([])
        const probe = correlationProbe(seen, (c) => c.sessionId ?? "none")
        const agent = yield* AgentLoop.make({ sessionId: "s-probe" }).pipe(
          Effect.provide(Layer.merge(engine([ScriptedEngine.toolCalls([{ name: "probe", arguments: {} }]), ScriptedEngine.reply("done")]), tools(probe)))
        )
        const before = yield* currentCorrelation
        yield* agent.chat("probe")
        expect(yield* Ref.get(seen)).toEqual(["s-probe"])
        expect(yield* currentCorrelation).toEqual(before)
        const failed = yield* AgentLoop.make({ sessionId: "s-fail" }).pipe(
          Effect.provide(engine([ScriptedEngine.fail(InferenceFailure.modelUnavailable("down"))]))
        )
        yield* Effect.flip(failed.chat("x"))
        expect(yield* currentCorrelation).toEqual(before)
      })
    )
  })

  describe("streamed inference", () => {
    it.effect("a stream that ends without its Finish part fails the turn with INFERENCE_MALFORMED_RESPONSE; its text was streamed", () =>
      Effect.gen(function* () {
        let streams = 0
        const cut: EngineService.Service = {
          infer: () => Effect.die("not called: the turn streams"),
          stream: () =>
            EngineService.streamFrom((emit) => Effect.suspend(() => {
              streams++
              return emit(EngineService.StreamPart.textDelta("half an ans"))
            })),
          modelInfo: Effect.succeed(new ModelInfo({ name: "cut", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
        }
        const agent = yield* AgentLoop.make({ inferenceRetry: RetryPolicy.none }).pipe(Effect.provideService(EngineService.Engine, cut))
        const deltas: Array<string> = []
        const failure = yield* Effect.flip(agent.chat("hi", {
          onEvent: (event) => Effect.sync(() => void (event._tag === "TextDelta" && deltas.push(event.text)))
        }))
        expect(failure).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_MALFORMED_RESPONSE" })
        expect(deltas).toEqual(["half an ans"])
        // a streamed attempt that emitted text is not retried, whatever the schedule
        const retried = yield* AgentLoop.make({ inferenceRetry: RetryPolicy.exponential({ base: "1 millis", times: 3 }) }).pipe(
          Effect.provideService(EngineService.Engine, cut)
        )
        streams = 0
        yield* Effect.flip(retried.chat("hi", { onEvent: () => Effect.void }))
        expect(streams).toBe(1)
        // the history is as it was
        expect(yield* agent.messages).toEqual([])
      }))
  })

  describe("cancellation", () => {
    it.effect("interrupting mid-tool stops the tool and leaves the history as it was", () =>
      Effect.gen(function* () {
        const started = yield* Deferred.make<void>()
        const released = yield* Ref.make(false)
        const blocking = Tool.make({
          name: "blocking",
          description: "blocks",
          parameters: Schema.Struct({}),
          handler: () =>
            Effect.zipRight(
              Deferred.succeed(started, undefined),
              Effect.never.pipe(Effect.onInterrupt(() => Ref.set(released, true)))
            )
        })
        const agent = yield* AgentLoop.make({ systemPrompt: "sys" }).pipe(
          Effect.provide(
            Layer.merge(
              engine([ScriptedEngine.toolCalls([{ name: "blocking", arguments: {} }]), ScriptedEngine.reply("never")]),
              tools(blocking)
            )
          )
        )
        const fiber = yield* Effect.fork(agent.chat("block"))
        yield* Deferred.await(started)
        yield* Fiber.interrupt(fiber)
        expect(yield* Ref.get(released)).toBe(true)
        expect((yield* agent.messages).map((m) => m.content)).toEqual(["sys"])
      })
    )

    it.effect("a turn past its timeout fails with CANCELLED_TIMEOUT and history is unchanged", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ turnTimeout: "2 seconds" }).pipe(
          Effect.provide(engine([ScriptedEngine.reply("late", { delay: "5 seconds" })]))
        )
        const fiber = yield* Effect.fork(Effect.flip(agent.chat("hurry")))
        yield* TestClock.adjust("2 seconds")
        const error = yield* Fiber.join(fiber)
        expect(error._tag).toBe("Cancellation")
        expect(error.code).toBe("CANCELLED_TIMEOUT")
        expect(yield* agent.messages).toEqual([])
      })
    )
  })
})

describe("RetryPolicy", () => {
  it.effect("retries `times` times, with capped, jittered, whole-millisecond delays", () =>
    Effect.gen(function* () {
      const { Clock } = yield* Effect.promise(() => import("effect"))
      const times = yield* Ref.make<ReadonlyArray<number>>([])
      const attempt = Effect.flatMap(Clock.currentTimeMillis, (t) =>
        Effect.zipRight(Ref.update(times, (ts) => [...ts, t]), Effect.fail("again"))
      )
      const fiber = yield* Effect.fork(
        Effect.retry(attempt, RetryPolicy.exponential({ base: "300 millis", times: 6, cap: "1 second" }))
      )
      yield* TestClock.adjust("1 minute")
      yield* Fiber.await(fiber)
      const at = yield* Ref.get(times)
      expect(at).toHaveLength(7)
      const gaps = at.slice(1).map((t, i) => t - at[i]!)
      for (const gap of gaps) {
        expect(Number.isInteger(gap)).toBe(true)
        expect(gap).toBeLessThanOrEqual(1000)
      }
      expect(gaps[0]).toBeGreaterThanOrEqual(240)
      expect(gaps[0]).toBeLessThanOrEqual(360)
      expect(gaps.at(-1)).toBe(1000)
    })
  )
})
