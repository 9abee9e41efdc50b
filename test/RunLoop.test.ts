import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RunLoop from "../src/programs/RunLoop.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import { EventLog } from "../src/services/EventLog.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as RunLoopExample from "../examples/run-loop.js"
import { add, slow } from "./support/tools.js"

const { RunMessage } = RunLoop
const engine = ScriptedEngine.layer
const tools = (...ts: ReadonlyArray<Tool.Tool<any, any>>) => Registry.layer(ts)
const withIds = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, IdGenerator.Test)
const addThenAnswer = (answer: string) =>
  Layer.merge(
    engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply(answer)]),
    tools(add)
  )
const loopingAdd = Layer.merge(
  engine([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }])], { whenExhausted: "repeat-last" }),
  tools(add)
)

/** Every tool call of the transcript has exactly one tool message answering it. */
const wellFormed = (messages: ReadonlyArray<RunLoop.RunMessage.RunMessage>) => {
  const calls = messages.flatMap((m) => m.toolCalls.map((c) => c.id)).sort()
  const answered = messages.flatMap((m) => (m.toolResult === undefined ? [] : [m.toolResult.callId])).sort()
  expect(answered).toEqual(calls)
}

describe("RunLoop", () => {
  describe("stop reasons", () => {
    it.effect("finish: runs the tool, feeds the result back, returns the answer with ids and the raw tool result", () =>
      withIds(Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("What is 2 + 3?")])
        expect(result.stopReason).toBe("finish")
        expect(result.output).toEqual(Option.some("5"))
        expect(result.content).toBe("5")
        expect(result.iterations).toBe(2)
        expect(Option.isNone(result.error)).toBe(true)
        expect(result.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
        expect(new Set(result.messages.map((m) => m.id)).size).toBe(4)
        expect(result.messages[2]!.toolResult).toMatchObject({ callId: "call_1", name: "add", content: "5", raw: "5" })
        expect(result.toolCalls).toHaveLength(1)
        expect(result.usage.calls).toBe(2)
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.at(-1)).toMatchObject({ role: "tool", content: "5", toolCallId: "call_1" })
      })).pipe(Effect.provide(addThenAnswer("5"))))

    it.effect("length: a reply cut off by maxTokens", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("Tell me everything")], { request: { maxTokens: 3 } })
        expect(result.stopReason).toBe("length")
        expect(result.content).toBe("Once upon a")
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.maxTokens).toBe(3)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("Once upon a", { finishReason: "length" })]))))

    it.effect("max_iterations: the cap counts model calls; the last calls are answered 'not executed'", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("loop")], { maxIterations: 3 })
        expect(result.stopReason).toBe("max_iterations")
        expect(result.iterations).toBe(3)
        expect(result.toolCalls).toHaveLength(2)
        expect(yield* ScriptedEngine.requests).toHaveLength(3)
        wellFormed(result.messages)
        expect(result.messages.at(-1)!.content).toContain("not executed: iteration limit (3 model calls)")
      }).pipe(Effect.provide(loopingAdd)))

    it.effect("error: a context overflow is a value, recognised by isContextOverflow", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("a very long prompt")])
        expect(result.stopReason).toBe("error")
        expect(Option.isSome(result.error) && RunLoop.isContextOverflow(result.error.value)).toBe(true)
        expect(RunLoop.isContextOverflow(InferenceFailure.engineError("503"))).toBe(false)
        expect(result.iterations).toBe(0)
        expect(result.messages.map((m) => m.role)).toEqual(["user"])
      }).pipe(Effect.provide(engine([ScriptedEngine.fail(InferenceFailure.contextExceeded("4100 > 4096 tokens"))]))))

    it.effect("error: a retryable inference failure is retried on the schedule first", () =>
      Effect.gen(function* () {
        const fiber = yield* Effect.fork(
          RunLoop.run([Message.user("hi")], { inferenceRetry: RetryPolicy.exponential({ base: "1 second", times: 1 }) })
        )
        yield* TestClock.adjust("10 seconds")
        const result = yield* Fiber.join(fiber)
        expect(result.stopReason).toBe("error")
        expect(Option.map(result.error, (e) => e.code)).toEqual(Option.some("INFERENCE_ENGINE_ERROR"))
        expect(yield* ScriptedEngine.requests).toHaveLength(2)
      }).pipe(Effect.provide(engine([ScriptedEngine.fail(InferenceFailure.engineError("503"))], { whenExhausted: "repeat-last" }))))

    it.effect("budget_exhausted (tokens): stops when the model still wants tools; pending calls not executed", () =>
      Effect.gen(function* () {
        // each scripted call costs 10 prompt + 1 output tokens
        const result = yield* RunLoop.run([Message.user("spend")], { budget: { tokens: 30 } })
        expect(result.stopReason).toBe("budget_exhausted")
        expect(result.usage.totalTokens).toBe(33)
        expect(result.iterations).toBe(3)
        expect(result.toolCalls).toHaveLength(2)
        wellFormed(result.messages)
        expect(result.messages.at(-1)!.content).toContain("token budget (30) exhausted")
      }).pipe(Effect.provide(loopingAdd)))

    it.effect("budget_exhausted (cost): the CostTracker's prices count", () =>
      Effect.gen(function* () {
        // 11 tokens at 1 per token: 11 per call
        const result = yield* RunLoop.run([Message.user("spend")], { budget: { cost: 0.00002 } })
        expect(result.stopReason).toBe("budget_exhausted")
        expect(result.iterations).toBe(2)
        expect(result.cost).toBeCloseTo(0.000022, 9)
        expect(result.messages.at(-1)!.content).toContain("cost budget")
      }).pipe(
        Effect.provide(
          Layer.merge(loopingAdd, Observe.costTrackerMemory({ scripted: { promptPerMillion: 1, outputPerMillion: 1 } }))
        )
      ))

    it.effect("finish_over_budget: the answer arrived past the budget; output kept and flagged", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("What is 2 + 3?")], { budget: { tokens: 12 } })
        expect(result.stopReason).toBe("finish_over_budget")
        expect(result.output).toEqual(Option.some("5"))
      }).pipe(Effect.provide(Layer.merge(
        engine([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { promptTokens: 5, outputTokens: 5 } }),
          ScriptedEngine.reply("5", { usage: { promptTokens: 5, outputTokens: 5 } })
        ]),
        tools(add)
      ))))

    it.effect("finish within the budget: spending exactly the budget is within it", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("hi")], { budget: { tokens: 11 } })
        expect(result.stopReason).toBe("finish")
        expect(result.usage.totalTokens).toBe(11)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("hello")]))))

    it.effect("aborted: the tool in flight is interrupted, its unfinished siblings answered 'not executed'", () =>
      Effect.gen(function* () {
        const started = yield* Deferred.make<void>()
        const abort = yield* Deferred.make<void>()
        const interrupted = yield* Ref.make(false)
        const blocking = Tool.make({
          name: "blocking",
          description: "blocks",
          parameters: Schema.Struct({}),
          handler: () =>
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.never.pipe(Effect.onInterrupt(() => Ref.set(interrupted, true))))
        })
        const addDone = yield* Deferred.make<void>()
        const fiber = yield* RunLoop.run([Message.user("go")], {
          abort: Deferred.await(abort),
          onEvent: (e) => e._tag === "ToolResultReady" && e.record.name === "add" ? Deferred.succeed(addDone, undefined) : Effect.void
        }).pipe(
          Effect.provide(Layer.merge(
            engine([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 2 } }, { name: "blocking", arguments: {} }]),
              ScriptedEngine.reply("never")
            ]),
            tools(add, blocking)
          )),
          Effect.fork
        )
        yield* Deferred.await(started)
        yield* Deferred.await(addDone)
        yield* Deferred.succeed(abort, undefined)
        const result = yield* Fiber.join(fiber)
        expect(result.stopReason).toBe("aborted")
        expect(yield* Ref.get(interrupted)).toBe(true)
        wellFormed(result.messages)
        const results = result.messages.flatMap((m) => (m.toolResult === undefined ? [] : [m.toolResult]))
        expect(results.map((r) => [r.name, r.content])).toEqual([
          ["add", "3"],
          ["blocking", "Error: not executed: the run was aborted"]
        ])
        expect(result.toolCalls.map((r) => r.name)).toEqual(["add"])
      }), 10_000)

    it.effect("aborted: an abort during inference interrupts the model call", () =>
      Effect.gen(function* () {
        const controller = new AbortController()
        const fiber = yield* Effect.fork(RunLoop.run([Message.user("slow")], { abort: controller.signal }))
        yield* TestClock.adjust("1 second")
        controller.abort()
        const result = yield* Fiber.join(fiber)
        expect(result.stopReason).toBe("aborted")
        expect(result.iterations).toBe(0)
        expect(result.messages).toHaveLength(1)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("late", { delay: "1 hour" })]))), 10_000)

    it.effect("aborted: a signal aborted before the run starts calls nothing", () =>
      Effect.gen(function* () {
        const controller = new AbortController()
        controller.abort()
        const result = yield* RunLoop.run([Message.user("x")], { abort: controller.signal })
        expect(result.stopReason).toBe("aborted")
        expect(yield* ScriptedEngine.requests).toHaveLength(0)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("no")]))))
  })

  describe("messages", () => {
    it.effect("internal messages stay in the transcript and are in no engine request", () =>
      withIds(Effect.gen(function* () {
        const note = yield* RunMessage.internal("plan: add first, then answer", { metadata: { source: "planner" } })
        const result = yield* RunLoop.run([yield* RunMessage.system("sys"), note, yield* RunMessage.user("2+3?")], {
          transformContext: (messages) =>
            Effect.map(RunMessage.internal("transform note"), (n) => [...messages, n])
        })
        expect(result.messages.filter((m) => m.role === "internal").map((m) => m.content)).toEqual([
          "plan: add first, then answer"
        ])
        expect(result.messages[1]!.metadata).toEqual({ source: "planner" })
        const requests = yield* ScriptedEngine.requests
        expect(requests).toHaveLength(2)
        for (const request of requests) {
          const contents = request.messages.map((m) => m.content)
          expect(contents.some((c) => c.includes("plan:") || c.includes("transform note"))).toBe(false)
          expect(contents[0]).toBe("sys")
        }
      })).pipe(Effect.provide(addThenAnswer("5"))))

    it.effect("a run message with a wrong role/field combination is refused by name", () =>
      Effect.gen(function* () {
        const bad = new RunMessage.RunMessage({ id: "m1", role: "tool", content: "x" })
        const error = yield* Effect.flip(RunLoop.run([bad]))
        expect(error._tag).toBe("ConfigurationFailure")
        expect(error.message).toContain('messages[0] (id m1) has role "tool" but no toolResult')
      }).pipe(Effect.provide(engine([]))))
  })

  describe("configuration", () => {
    it.effect("bad values are one CONFIG_INVALID_REQUEST naming each", () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(RunLoop.make({ maxIterations: 0, maxToolConcurrency: 1.5, budget: { tokens: -1 } }))
        expect(error.code).toBe("CONFIG_INVALID_REQUEST")
        expect(error.message).toContain("maxIterations must be a whole number of at least 1, got 0")
        expect(error.message).toContain("maxToolConcurrency")
        expect(error.message).toContain("budget.tokens")
      }).pipe(Effect.provide(engine([]))))

    it.effect("a cost budget without a CostTracker is refused", () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(RunLoop.make({ budget: { cost: 1 } }))
        expect(error.message).toContain("budget.cost needs a CostTracker")
      }).pipe(Effect.provide(engine([]))))

    it.effect("running a finished loop again is a typed failure", () =>
      Effect.gen(function* () {
        const loop = yield* RunLoop.make()
        expect(yield* loop.finished).toBe(false)
        yield* loop.run([Message.user("hi")])
        expect(yield* loop.finished).toBe(true)
        const error = yield* Effect.flip(loop.run([Message.user("again")]))
        expect(error).toBeInstanceOf(RunLoop.LoopFinished)
        expect(error._tag).toBe("LoopFinished")
        if (error._tag !== "LoopFinished") return
        expect(error.phase).toBe("finished")
        expect(error.stopReason).toBe("finish")
        expect(error.message).toContain("has finished (stop reason finish)")
        expect(yield* ScriptedEngine.requests).toHaveLength(1)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("hello"), ScriptedEngine.reply("again")]))))

    it.effect("running a loop while its run is going is LoopFinished with phase running, and the first run goes on", () =>
      Effect.gen(function* () {
        const loop = yield* RunLoop.make()
        const first = yield* Effect.fork(loop.run([Message.user("slow")]))
        yield* TestClock.adjust("1 second")
        const error = yield* Effect.flip(loop.run([Message.user("again")]))
        expect(error._tag).toBe("LoopFinished")
        if (error._tag !== "LoopFinished") return
        expect(error.phase).toBe("running")
        expect(error.stopReason).toBeUndefined()
        yield* TestClock.adjust("1 minute")
        expect((yield* Fiber.join(first)).output).toEqual(Option.some("late"))
        expect(yield* ScriptedEngine.requests).toHaveLength(1)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("late", { delay: "1 minute" }), ScriptedEngine.reply("again")]))), 10_000)

    it.effect("transformContext runs before every request, and its result is what is sent", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make<ReadonlyArray<number>>([])
        const result = yield* RunLoop.run([Message.user("2+3?")], {
          transformContext: (messages) =>
            Effect.gen(function* () {
              yield* Ref.update(seen, (s) => [...s, messages.length])
              return [yield* RunMessage.system(`context for ${messages.length} messages`), ...messages]
            })
        })
        expect(result.stopReason).toBe("finish")
        expect(yield* Ref.get(seen)).toEqual([1, 3])
        const requests = yield* ScriptedEngine.requests
        expect(requests.map((r) => r.messages[0]!.content)).toEqual(["context for 1 messages", "context for 3 messages"])
        // the transform shapes the request only: the transcript does not keep its output
        expect(result.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
      }).pipe(Effect.provide(addThenAnswer("5"))))

    it.effect("request defaults and the tool whitelist reach the engine", () =>
      Effect.gen(function* () {
        yield* RunLoop.run([Message.user("x")], {
          request: { temperature: 0.3, seed: 7, sessionKey: "s1" },
          allowTools: ["add"]
        })
        const [request] = yield* ScriptedEngine.requests
        expect(request).toMatchObject({ temperature: 0.3, seed: 7, sessionKey: "s1", maxTokens: 2048 })
        expect(request!.tools.map((t) => t.name)).toEqual(["add"])
      }).pipe(Effect.provide(Layer.merge(engine([ScriptedEngine.reply("ok")]), tools(add, slow(Ref.unsafeMake(0), Ref.unsafeMake(0)))))))
  })

  describe("tools", () => {
    const concurrencyRun = (parallelTools: boolean) =>
      Effect.gen(function* () {
        const running = yield* Ref.make(0)
        const peak = yield* Ref.make(0)
        const fiber = yield* RunLoop.run([Message.user("go")], { parallelTools }).pipe(
          Effect.provide(Layer.merge(
            engine([
              ScriptedEngine.toolCalls([1, 2, 3].map(() => ({ name: "slow", arguments: { seconds: 1 } }))),
              ScriptedEngine.reply("ok")
            ]),
            tools(slow(running, peak))
          )),
          Effect.fork
        )
        yield* TestClock.adjust("1 second")
        const earlyDone = fiber.unsafePoll() !== null
        yield* TestClock.adjust("2 seconds")
        const result = yield* Fiber.join(fiber)
        return { peak: yield* Ref.get(peak), earlyDone, result }
      })

    it.effect("parallelTools=false runs the calls of a reply one at a time", () =>
      Effect.gen(function* () {
        const { earlyDone, peak, result } = yield* concurrencyRun(false)
        expect(peak).toBe(1)
        expect(earlyDone).toBe(false)
        expect(result.toolCalls).toHaveLength(3)
      }))

    it.effect("parallel tools run at once (the contrast to the sequential case)", () =>
      Effect.gen(function* () {
        const { earlyDone, peak } = yield* concurrencyRun(true)
        expect(peak).toBe(3)
        expect(earlyDone).toBe(true)
      }))

    it.effect("toolErrorMode 'stop' ends the run with the ToolFailure as its error, the transcript well-formed", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("x")], { toolErrorMode: "stop", parallelTools: false })
        expect(result.stopReason).toBe("error")
        expect(Option.map(result.error, (e) => e.code)).toEqual(Option.some("TOOL_NOT_FOUND"))
        wellFormed(result.messages)
        expect(result.messages.at(-1)!.content).toContain("not executed")
      }).pipe(Effect.provide(Layer.merge(
        engine([ScriptedEngine.toolCalls([{ name: "nope", arguments: {} }, { name: "add", arguments: { a: 1, b: 1 } }])]),
        tools(add)
      ))))
  })

  describe("streaming", () => {
    it.effect("emits iterations, text deltas, tool events and ends with LoopFinished", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make(0)
        const events = [...(yield* Stream.runCollect(
          RunLoop.runStream([Message.user("add 2 and 3")], { onEvent: () => Ref.update(seen, (n) => n + 1) })
        ))]
        const tags = events.map((e) => e._tag)
        expect(tags[0]).toBe("IterationStarted")
        expect(tags.at(-1)).toBe("LoopFinished")
        expect(tags.indexOf("ToolCallRequested")).toBeLessThan(tags.indexOf("ToolResultReady"))
        const text = events.flatMap((e) => (e._tag === "TextDelta" && e.iteration === 1 ? [e.text] : [])).join("")
        expect(text).toBe("The sum is 5.")
        expect(yield* Ref.get(seen)).toBe(events.length)
        const last = events.at(-1)!
        expect(last._tag === "LoopFinished" && last.result.stopReason).toBe("finish")
      }).pipe(Effect.provide(addThenAnswer("The sum is 5."))))
  })
})

describe("examples/run-loop", () => {
  it.effect("runs the calculator through RunLoop on a swapped-in engine; the internal note reaches no request", () =>
    Effect.gen(function* () {
      const result = yield* RunLoopExample.program()
      expect(result.stopReason).toBe("finish")
      expect(result.output).toEqual(Option.some("The answer is 19."))
      expect(result.messages.map((m) => m.role)).toEqual(["internal", "user", "assistant", "tool", "assistant"])
      const requests = yield* ScriptedEngine.requests
      expect(requests.every((r) => r.messages.every((m) => !m.content.includes("example")))).toBe(true)
      expect(requests[0]!.temperature).toBe(0)
    }).pipe(
      Effect.provide(Layer.merge(
        RunLoopExample.AppLive,
        engine([
          ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "12 + 7" } }]),
          ScriptedEngine.reply("The answer is 19.")
        ])
      ))
    ))
})

describe("tool events", () => {
  it.effect("argsHash is the same for the same arguments in any key order, different for different ones", () =>
    Effect.gen(function* () {
      yield* RunLoop.run([Message.user("add")])
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      const hashes = events.flatMap((e) => (e._tag === "ToolStart" ? [e.argsHash] : []))
      expect(hashes).toHaveLength(3)
      for (const h of hashes) expect(h).toMatch(/^[0-9a-f]{8}$/)
      expect(hashes[0]).toBe(hashes[1])
      expect(hashes[2]).not.toBe(hashes[0])
    }).pipe(Effect.provide(Layer.mergeAll(
      engine([
        ScriptedEngine.toolCalls([
          { name: "add", arguments: { a: 1, b: 2 } },
          { name: "add", arguments: { b: 2, a: 1 } },
          { name: "add", arguments: { a: 2, b: 1 } }
        ]),
        ScriptedEngine.reply("done")
      ]),
      tools(add),
      Observe.eventLogMemory
    ))))
})

describe("steps", () => {
  it.effect("each model call and tool call goes through its step wrapper with its structural key", () =>
    Effect.gen(function* () {
      const keys: Array<string> = []
      const result = yield* RunLoop.run([Message.user("2+3, 1+1")], {
        steps: {
          model: (key, call) => Effect.zipRight(Effect.sync(() => keys.push(`model ${key.iteration}.${key.index}`)), call),
          tool: (key, call) =>
            Effect.zipRight(Effect.sync(() => keys.push(`tool ${key.iteration} ${key.call.id}`)), call)
        }
      })
      expect(result.stopReason).toBe("finish")
      expect(keys).toEqual(["model 0.0", "tool 0 call_1", "tool 0 call_2", "model 1.0"])
    }).pipe(Effect.provide(Layer.merge(
      engine([
        ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }, { name: "add", arguments: { a: 1, b: 1 } }]),
        ScriptedEngine.reply("5 and 2")
      ]),
      tools(add)
    ))))

  it.effect("a step that returns a kept result runs nothing: a replayed run calls neither engine nor tool", () =>
    Effect.gen(function* () {
      // first run: keep every step's result
      const models = new Map<string, any>()
      const toolResults = new Map<string, RunLoop.ToolOutcome>()
      const first = yield* RunLoop.run([Message.user("2+3")], {
        steps: {
          model: (key, call) => Effect.tap(call, (r) => Effect.sync(() => models.set(`${key.iteration}.${key.index}`, r))),
          tool: (key, call) => Effect.tap(call, (o) => Effect.sync(() => toolResults.set(key.call.id, o)))
        }
      }).pipe(Effect.provide(addThenAnswer("5")))
      // replay: the kept results stand for the steps; the engine has no script and there is no tool
      const calls = yield* Ref.make(0)
      const counting = Tool.make({ ...add, handler: (args: { a: number; b: number }) => Effect.zipRight(Ref.update(calls, (n) => n + 1), add.handler(args)) })
      const replay = yield* RunLoop.run([Message.user("2+3")], {
        steps: {
          model: (key) => Effect.succeed(models.get(`${key.iteration}.${key.index}`)),
          tool: (key) => Effect.succeed(toolResults.get(key.call.id)!)
        }
      }).pipe(Effect.provide(Layer.merge(engine([]), tools(counting))))
      expect(replay.output).toEqual(first.output)
      expect(replay.messages.map((m) => [m.role, m.content])).toEqual(first.messages.map((m) => [m.role, m.content]))
      expect(yield* Ref.get(calls)).toBe(0)
    }))
})
