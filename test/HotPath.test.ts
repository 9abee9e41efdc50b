/**
 * What the hot path leaves out when nobody listens (issue 13): no clock read, no
 * event and no metric in Observed without an EventLog or Metrics in the context;
 * no inference or tool span when, besides, no tracer exports them; no span
 * attributes with Effect's native tracer (spans that go nowhere); and the
 * request settings still checked where the messages are no longer re-validated.
 * The speed itself is measured in bench/hotpath.bench.ts, not here.
 */
import { describe, expect, it } from "@effect/vitest"
import * as OtelApi from "@opentelemetry/api"
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Tracer from "effect/Tracer"
import * as Message from "../src/domain/Message.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RunLoop from "../src/programs/RunLoop.js"
import * as Structured from "../src/programs/Structured.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import * as Plan from "../src/domain/Plan.js"
import * as Facade from "../src/programs/Facade.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import * as Observed from "../src/programs/internal/Observed.js"
import * as Request from "../src/programs/internal/Request.js"
import * as Spans from "../src/programs/internal/Spans.js"
import { requestOf } from "../src/programs/run/Strategies.js"
import { Engine, InferenceRequest, InferenceResult, streamFrom, StreamPart } from "../src/services/Engine.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import { Constraint } from "../src/services/Constraint.js"
import { CostTracker } from "../src/services/CostTracker.js"
import { EventLog } from "../src/services/EventLog.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import { Metrics } from "../src/services/Metrics.js"
import * as Tool from "../src/services/ToolRegistry.js"

const request = new InferenceRequest({ messages: [Message.user("hi")], temperature: 0.5 })
const result = new InferenceResult({
  content: "hello",
  toolCalls: [],
  usage: TokenUsage.make({ promptTokens: 3, outputTokens: 2 }),
  finishReason: "stop"
})
const model = Effect.succeed("m")
const observedInference = Observed.inference({ model, request, call: Effect.succeed(result), inferenceId: "inf_1" })
const call = new Message.ToolCall({ id: "call_1", name: "add", arguments: { a: 1 } })
const observedTool = Observed.toolCall({
  call,
  attempt: 1,
  inferenceId: "inf_1",
  requestedBy: Option.none(),
  execute: Effect.succeed("2")
})

/** Runs `effect` under a Clock that counts its reads; the result and the count. */
const countingClockReads = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    let reads = 0
    const clock: Clock.Clock = {
      [Clock.ClockTypeId]: Clock.ClockTypeId,
      unsafeCurrentTimeMillis: () => 0,
      unsafeCurrentTimeNanos: () => 0n,
      currentTimeMillis: Effect.sync(() => {
        reads++
        return 0
      }),
      currentTimeNanos: Effect.sync(() => {
        reads++
        return 0n
      }),
      sleep: () => Effect.void
    }
    const value = yield* Effect.withClock(effect, clock)
    return [value, reads] as const
  })

describe("observability that nobody listens to", { timeout: 30_000 }, () => {
  it.effect("an inference with no EventLog or Metrics reads no clock; its result comes back, in no span of its own", () =>
    Effect.gen(function* () {
      const [[value, span], reads] = yield* countingClockReads(observedInference)
      expect(value.content).toBe("hello")
      expect(Option.isNone(span)).toBe(true)
      expect(reads).toBe(0)
      // With an EventLog its span is opened: events carry its id.
      const [[, recordedSpan]] = yield* countingClockReads(observedInference.pipe(Effect.provide(Observe.eventLogMemory)))
      expect(Option.map(recordedSpan, (s) => s._tag === "Span" ? s.name : s._tag)).toEqual(Option.some("chat m"))
    }))

  it.effect("a metered inference nobody observes is the engine call itself; its usage still reaches a CostTracker", () =>
    Effect.gen(function* () {
      const metered = Observed.meteredInference(model, request, Effect.succeed(result))
      const cost = yield* Effect.gen(function* () {
        expect((yield* metered).content).toBe("hello")
        return yield* (yield* CostTracker).totalCost
      }).pipe(Effect.provide(Observe.costTrackerMemory({ m: { promptPerMillion: 1_000_000, outputPerMillion: 0 } })))
      expect(cost).toBe(3)
    }))

  it.effect("a tool call nobody listens to runs in no span of its own; with an EventLog, in its execute_tool span", () =>
    Effect.gen(function* () {
      const spanName = Effect.map(Effect.option(Effect.currentSpan), Option.map((s) => s.name))
      const inTool = (execute: Effect.Effect<Option.Option<string>>) =>
        Observed.toolCall({ call, attempt: 1, inferenceId: "inf_1", requestedBy: Option.none(), execute })
      expect(yield* inTool(spanName).pipe(Effect.withSpan("caller"))).toEqual(Option.some("caller"))
      expect(yield* inTool(spanName).pipe(Effect.withSpan("caller"), Effect.provide(Observe.eventLogMemory))).toEqual(
        Option.some("execute_tool add")
      )
    }))

  it.effect("with Metrics alone, the inference is timed and its tokens counted", () =>
    Effect.gen(function* () {
      const [, reads] = yield* countingClockReads(observedInference)
      expect(reads).toBe(2)
      const snapshot = yield* Effect.flatMap(Metrics, (m) => m.snapshot)
      expect(snapshot.latencies["inference"]).toEqual([0])
      expect([snapshot.promptTokens, snapshot.outputTokens]).toEqual([3, 2])
    }).pipe(Effect.provide(Observe.metricsMemory)))

  it.effect("an EventLog that keeps nothing counts as nobody: no clock read", () =>
    Effect.gen(function* () {
      const [, reads] = yield* countingClockReads(observedInference)
      expect(reads).toBe(0)
    }).pipe(Effect.provide(Observe.eventLogNoop)))

  it.effect("Metrics that keep nothing count as nobody: no clock read, no span, no id drawn", () =>
    Effect.gen(function* () {
      const [[, span], reads] = yield* countingClockReads(observedInference)
      expect(reads).toBe(0)
      expect(Option.isNone(span)).toBe(true)
      expect(yield* countingIdDraws(Observed.meteredInference(model, request, Effect.succeed(result)))).toBe(0)
      expect(yield* Observed.listened).toBe(false)
    }).pipe(Effect.provide(Layer.merge(Observe.eventLogNoop, Observe.metricsNoop))))

  it.effect("with an EventLog, the inference's start and end are recorded", () =>
    Effect.gen(function* () {
      yield* observedInference
      const events = yield* Effect.flatMap(EventLog, (log) => log.events)
      expect(events.map((e) => e._tag)).toEqual(["InferenceStart", "InferenceEnd"])
    }).pipe(Effect.provide(Observe.eventLogMemory)))

  it.effect("a tool call with no EventLog or Metrics reads no clock; with an EventLog, its events are recorded", () =>
    Effect.gen(function* () {
      const [value, reads] = yield* countingClockReads(observedTool)
      expect(value).toBe("2")
      expect(reads).toBe(0)
      const [, recordedReads] = yield* countingClockReads(observedTool.pipe(Effect.provide(Observe.eventLogMemory)))
      expect(recordedReads).toBeGreaterThan(0)
    }))
})

/** Runs `effect` with an IdGenerator that counts its draws; the count. */
const countingIdDraws = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    let draws = 0
    yield* Effect.provideService(effect, IdGenerator, {
      next: (prefix) =>
        Effect.sync(() => {
          draws++
          return `${prefix}_${draws}`
        })
    })
    return draws
  })

/** Runs `effect` with an IdGenerator that counts its draws by prefix. */
const countingIdDrawsByPrefix = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const draws: Record<string, number> = {}
    yield* Effect.provideService(effect, IdGenerator, {
      next: (prefix) =>
        Effect.sync(() => {
          draws[prefix] = (draws[prefix] ?? 0) + 1
          return `${prefix}_${draws[prefix]}`
        })
    })
    return draws
  })

describe("ids nobody reads", { timeout: 30_000 }, () => {
  const metered = Observed.meteredInference(model, request, Effect.succeed(result))

  // an AgentLoop turn outside a request: the model asks for add(2,3), the tool runs, the model answers
  const add = Tool.make({
    name: "add",
    description: "Adds two numbers",
    parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
    handler: ({ a, b }) => Effect.succeed(String(a + b))
  })
  const turn = Effect.flatMap(AgentLoop.make({ sessionId: "s" }), (agent) => agent.chat("What is 2 + 3?")).pipe(
    Effect.provide(Layer.merge(
      ScriptedEngine.layer([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")]),
      Registry.layer([add])
    ))
  )

  it.effect("an AgentLoop turn draws no request or inference id when nothing records or exports; with an EventLog, one request id and one per inference", () =>
    Effect.gen(function* () {
      const quiet = yield* countingIdDrawsByPrefix(turn)
      expect(quiet["req"]).toBeUndefined()
      expect(quiet["inf"]).toBeUndefined()
      const observed = yield* countingIdDrawsByPrefix(turn.pipe(Effect.provide(Observe.eventLogMemory)))
      expect(observed["req"]).toBe(1)
      expect(observed["inf"]).toBe(2)
    }))

  it.effect("a facade request nobody observes draws its request id and no trace id; with an EventLog its events carry the trace", () =>
    Effect.gen(function* () {
      const request = Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "ping" }] })
      const once = Effect.flatMap(Facade.make(), (facade) => facade.run(request)).pipe(
        Effect.provide(Layer.merge(ScriptedEngine.layer([ScriptedEngine.reply("pong")]), JsonConstraint.layer))
      )
      const quiet = yield* countingIdDrawsByPrefix(once)
      expect([quiet["req"], quiet["trace"]]).toEqual([1, undefined])
      const events = yield* countingIdDrawsByPrefix(once).pipe(
        Effect.zipRight(Effect.flatMap(EventLog, (log) => log.events)),
        Effect.provide(Observe.eventLogMemory)
      )
      expect(events.length).toBeGreaterThan(0)
      for (const event of events) expect(event.correlation).toMatchObject({ requestId: "req_1", traceId: expect.stringMatching(/^[0-9a-f]{32}$/) })
    }))

  it.effect("a single-shot inference draws no id when nothing records or exports; one when an EventLog keeps events", () =>
    Effect.gen(function* () {
      expect(yield* countingIdDraws(metered)).toBe(0)
      expect(yield* countingIdDraws(metered.pipe(Effect.provide(Observe.eventLogMemory)))).toBe(1)
    }))
})

describe("spans with no tracer installed", { timeout: 30_000 }, () => {
  const attributesOf = <E, R>(effect: Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.AnySpan>], E, R>) =>
    Effect.map(effect, ([, span]) => {
      const s = Option.getOrThrow(span)
      return s._tag === "Span" ? Object.fromEntries(s.attributes) : {}
    })

  it.effect("Effect's native tracer: with events recorded the inference span is opened, but not annotated", () =>
    Effect.gen(function* () {
      expect(yield* Spans.exporting).toBe(false)
      expect(yield* attributesOf(observedInference.pipe(Effect.provide(Observe.eventLogMemory)))).toEqual({})
    }))

  it.effect("a loop's span (Observed.span) is opened only when events are recorded or a tracer exports", () =>
    Effect.gen(function* () {
      const spanName = Effect.map(Effect.option(Effect.currentSpan), Option.map((s) => s.name))
      const spanned = Observed.span("Loop.run")(spanName)
      expect(yield* spanned.pipe(Effect.withSpan("caller"))).toEqual(Option.some("caller"))
      expect(yield* spanned.pipe(Effect.withSpan("caller"), Effect.provide(Observe.eventLogMemory))).toEqual(
        Option.some("Loop.run")
      )
      expect(yield* spanned.pipe(Effect.withSpan("caller"), Effect.provide(Observe.metricsMemory))).toEqual(
        Option.some("Loop.run")
      )
      const native = yield* Effect.tracer
      const exporting = Tracer.make({ span: (...args) => native.span(...args), context: native.context })
      expect(yield* spanned.pipe(Effect.withSpan("caller"), Effect.withTracer(exporting))).toEqual(Option.some("Loop.run"))
    }))

  it.effect("a constraint check is in a span of its own only when a tracer exports spans", () =>
    Effect.gen(function* () {
      const constraint = yield* Constraint
      const target = constraint.target(Schema.Struct({ answer: Schema.Number }))
      const names: Array<string> = []
      const native = yield* Effect.tracer
      const recording = Tracer.make({ span: (name, ...rest) => (names.push(name), native.span(name, ...rest)), context: native.context })
      yield* constraint.enforce('{"answer":5}', target).pipe(Effect.withSpan("caller"), Effect.provide(Observe.eventLogMemory))
      yield* Effect.withTracer(constraint.enforce('{"answer":5}', target), recording)
      expect(names).toEqual(["Constraint.enforce"])
    }).pipe(Effect.provide(JsonConstraint.layer)))

  it.effect("Observed.fn: Effect.fn's span, opened only when events are recorded or a tracer exports", () =>
    Effect.gen(function* () {
      const named = Observed.fn("Voting.test")(function* (n: number) {
        const span = yield* Effect.option(Effect.currentSpan)
        return [n, Option.map(span, (s) => s.name)] as const
      })
      expect(yield* named(1).pipe(Effect.withSpan("caller"))).toEqual([1, Option.some("caller")])
      expect(yield* named(2).pipe(Effect.withSpan("caller"), Effect.provide(Observe.eventLogMemory))).toEqual([
        2,
        Option.some("Voting.test")
      ])
      const failing = Observed.fn("Voting.fails")(function* (reason: string) {
        return yield* Effect.fail(reason)
      })
      expect(yield* Effect.flip(failing("no"))).toBe("no")
    }))

  it.effect("any other tracer: the span carries the gen_ai and correlation attributes", () =>
    Effect.gen(function* () {
      const native = yield* Effect.tracer
      const recording = Tracer.make({ span: (...args) => native.span(...args), context: native.context })
      const attributes = yield* attributesOf(Effect.withTracer(observedInference, recording))
      expect(attributes).toMatchObject({
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.request.temperature": 0.5,
        "gen_ai.usage.output_tokens": 2,
        "pagantic.inference_id": "inf_1",
        "pagantic.request_id": "unscoped"
      })
    }))
})

describe("requests the run loop builds", { timeout: 30_000 }, () => {
  it("are not re-validated in their messages, but their settings are still checked", () => {
    const built = requestOf([Message.user("hi")], [], { maxTokens: 16, temperature: 0.2 })
    expect([built.maxTokens, built.temperature, built.messages.length]).toEqual([16, 0.2, 1])
    expect(() => requestOf([Message.user("hi")], [], { temperature: -1 })).toThrow(/temperature/)
    expect(() => requestOf([Message.user("hi")], [], { maxTokens: 1.5 })).toThrow(/maxTokens/)
  })

  it("check each setting every time it is invalid, whatever passed before (a value that passed is not checked again)", () => {
    const settings = { temperature: 0.3, topP: 0.5, stop: ["\n\n"], options: { mirostat: 2 } }
    for (let i = 0; i < 3; i++) expect(Request.make([Message.user("hi")], [], settings).topP).toBe(0.5)
    for (let i = 0; i < 3; i++) {
      expect(() => Request.make([], [], { ...settings, topP: 1.5 })).toThrow(/topP/)
      expect(() => Request.make([], [], { ...settings, stop: [] })).toThrow(/stop/)
      expect(() => Request.make([], [], { ...settings, seed: 0.5 })).toThrow(/seed/)
      // string and boolean fields by their type alone: a new session key every time is no new check
      expect(Request.make([], [], { ...settings, sessionKey: `s${i}`, logprobs: true }).sessionKey).toBe(`s${i}`)
      expect(() => Request.make([], [], { ...settings, sessionKey: 3 as never })).toThrow(/sessionKey/)
      expect(() => Request.make([], [], { ...settings, logprobs: "yes" as never })).toThrow(/logprobs/)
    }
  })

  it("an object setting that passed is checked again once another object passed for its field", () => {
    const good = ["\n\n"]
    const other = ["END"]
    expect(Request.make([], [], { stop: good }).stop).toBe(good)
    expect(Request.make([], [], { stop: other }).stop).toBe(other)
    // `good` is no longer the last stop list that passed: checked again, so a change to it is seen
    ;(good as Array<string>).length = 0
    expect(() => Request.make([], [], { stop: good })).toThrow(/stop/)
    // and an invalid object never passes, however often it comes
    const bad = [3]
    for (let i = 0; i < 2; i++) expect(() => Request.make([], [], { stop: bad as never })).toThrow(/stop/)
  })
})

const addTool = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})

/** A scripted model that asks for add(2,3), then answers "5"; the registry with `add` (a fresh script each time). */
const scriptedAdd = () =>
  Layer.merge(
    ScriptedEngine.layer([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]), ScriptedEngine.reply("5")]),
    Registry.layer([addTool])
  )

describe("the transcript a run sends", { timeout: 30_000 }, () => {
  it.effect("each message is turned into the engine's form once: the second request reuses the first one's messages", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make()
      yield* agent.chat("What is 2 + 3?")
      const [first, second] = yield* ScriptedEngine.requests
      expect(second!.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"])
      expect(second!.messages[0]).toBe(first!.messages[0])
      const transcript = yield* agent.messages
      expect(transcript[1]).toBe(second!.messages[1])
    }).pipe(Effect.provide(scriptedAdd())))
})

describe("message ids", { timeout: 30_000 }, () => {
  const usage = TokenUsage.make({ promptTokens: 10, outputTokens: 2 })
  const callReply = new InferenceResult({
    content: "",
    toolCalls: [new Message.ToolCall({ id: "call_1", name: "add", arguments: { a: 2, b: 3 } })],
    usage,
    finishReason: "tool_calls"
  })
  const answer = new InferenceResult({ content: "5", toolCalls: [], usage, finishReason: "stop" })
  const turn = RunLoop.run([Message.user("What is 2 + 3?")]).pipe(Effect.provide(scriptedAdd()))

  it.effect("a generator that draws at once (unsafeNext) names each message without an effect per id; one that cannot, through next: the same ids", () =>
    Effect.gen(function* () {
      const fast = yield* Effect.provide(turn, IdGenerator.Test)
      expect(fast.messages.map((m) => m.id)).toEqual(["msg_1", "msg_2", "msg_3", "msg_4"])
      // the same sequence, drawn only through `next`
      let n = 0
      const slow = yield* Effect.provideService(turn, IdGenerator, { next: (prefix) => Effect.sync(() => `${prefix}_${++n}`) })
      expect(slow.messages.map((m) => m.id)).toEqual(["msg_1", "msg_2", "msg_3", "msg_4"])
    }))

  it.live("an AgentLoop turn (tool call, tool, answer) answers with the tool's result", () =>
    Effect.gen(function* () {
      const engine = Layer.succeed(Engine, {
        infer: (request) => Effect.succeed(request.messages.at(-1)?.role === "tool" ? answer : callReply),
        stream: () => Stream.die("not streamed"),
        modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
      })
      const services = yield* Layer.build(Layer.merge(engine, Registry.layer([addTool])))
      const turn = Effect.flatMap(AgentLoop.make(), (agent) => agent.chat("What is 2 + 3?"))
      const turned = yield* turn.pipe(Effect.provide(services))
      expect([turned.content, turned.toolCalls.length]).toEqual(["5", 1])
    }).pipe(Effect.scoped))

  /** An engine that gives `reply` to every request (not streamed). */
  const answering = (reply: InferenceResult) =>
    Layer.succeed(Engine, {
      infer: () => Effect.succeed(reply),
      stream: () => Stream.die("not streamed"),
      modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
    })

  it.effect("Structured.run, valid JSON at the first reply, answers at the first attempt", () =>
    Effect.gen(function* () {
      const services = yield* Layer.build(Layer.merge(answering(new InferenceResult({ content: '{"answer": 5}', toolCalls: [], usage, finishReason: "stop" })), JsonConstraint.layer))
      const call = Structured.run([Message.user("What is 2 + 3?")], { schema: Schema.Struct({ answer: Schema.Number }) })
      const result = yield* call.pipe(Effect.provide(services))
      expect([result.value, result.attempts, result.content]).toEqual([{ answer: 5 }, 1, '{"answer":5}'])
    }).pipe(Effect.scoped))

  it.effect("RedundantLoop N=5 (valid JSON from every replica) agrees unanimously", () =>
    Effect.gen(function* () {
      const services = yield* Layer.build(Layer.merge(answering(new InferenceResult({ content: '{"answer": 5}', toolCalls: [], usage, finishReason: "stop" })), JsonConstraint.layer))
      const call = RedundantLoop.run("What is 2 + 3?", { schema: Schema.Struct({ answer: Schema.Number }), n: 5 })
      const result = yield* call.pipe(Effect.provide(services))
      expect([result.value, result.confidence, result.replicas.length]).toEqual([{ answer: 5 }, 1, 5])
    }).pipe(Effect.scoped))

  it.effect("a PlanExecutor plan of 3 chained infer steps completes every step", () =>
    Effect.gen(function* () {
      const services = yield* Layer.build(answering(answer))
      const executor = yield* PlanExecutor.make({ handlers: [PlanExecutor.infer()] }).pipe(Effect.provide(services))
      const chain = new Plan.ExecutionPlan({
        steps: [
          new Plan.Step({ name: "a", type: "infer", input: "one", dependsOn: [] }),
          new Plan.Step({ name: "b", type: "infer", input: "two", dependsOn: ["a"] }),
          new Plan.Step({ name: "c", type: "infer", input: "three", dependsOn: ["b"] })
        ]
      })
      const outcome = yield* executor.execute(chain).pipe(Effect.provide(services))
      expect([outcome._tag, PlanExecutor.completedSteps(outcome).length]).toEqual(["Completed", 3])
    }).pipe(Effect.scoped))

  it.live("a facade chat request answers with the model's reply", () =>
    Effect.gen(function* () {
      // streamed by callback, as the library's own engines stream (the facade's chat mode streams)
      const engine = Layer.succeed(Engine, {
        infer: () => Effect.succeed(answer),
        stream: () => streamFrom((emit) => Effect.zipRight(emit(StreamPart.textDelta("5")), emit(StreamPart.finish(answer)))),
        modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
      })
      const services = yield* Layer.build(Layer.merge(engine, JsonConstraint.layer))
      const system = yield* Facade.make().pipe(Effect.provide(services))
      const request = Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "ping" }] })
      // the second request: what every request costs once the facade's caches are warm
      const response = yield* system.run(request).pipe(Effect.provide(services))
      expect([response.error, response.content]).toEqual([undefined, "5"])
    }).pipe(Effect.scoped))

  it.live("a facade structured request (valid JSON at the first reply) answers with the decoded value", () =>
    Effect.gen(function* () {
      const json = new InferenceResult({ content: '{"answer": 5}', toolCalls: [], usage: answer.usage, finishReason: "stop" })
      const engine = Layer.succeed(Engine, {
        infer: () => Effect.succeed(json),
        stream: () => streamFrom((emit) => Effect.zipRight(emit(StreamPart.textDelta(json.content)), emit(StreamPart.finish(json)))),
        modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
      })
      const services = yield* Layer.build(Layer.merge(engine, JsonConstraint.layer))
      const system = yield* Facade.make().pipe(Effect.provide(services))
      const request = Schema.decodeUnknownSync(SystemRequest)({
        mode: "structured",
        messages: [{ role: "user", content: "2+3?" }],
        output: { schema: { type: "object", properties: { answer: { type: "number" } }, required: ["answer"] } }
      })
      const response = yield* system.run(request).pipe(Effect.provide(services))
      expect([response.error, response.structuredOutput]).toEqual([undefined, { answer: 5 }])
    }).pipe(Effect.scoped))

  it("IdGenerator.Test: next and unsafeNext count on the same counters, per prefix", () => {
    const ids = Effect.runSync(Effect.provide(IdGenerator, IdGenerator.Test))
    expect(ids.unsafeNext!("msg")).toBe("msg_1")
    expect(Effect.runSync(ids.next("msg"))).toBe("msg_2")
    expect(ids.unsafeNext!("call")).toBe("call_1")
  })

  it("a run message made from a domain message turns back into that same message for the engine", () => {
    const user = Message.user("hi")
    const run = RunLoop.RunMessage.buildFromDomain("msg_1", user)
    expect(run).toMatchObject({ id: "msg_1", role: "user", content: "hi" })
    expect(RunLoop.RunMessage.toDomain(run)).toBe(user)
  })

  it("a run message keeps its domain message to itself: a spread copy with other content is converted anew", () => {
    const run = RunLoop.RunMessage.buildFromDomain("msg_1", Message.user("hi"))
    const first = RunLoop.RunMessage.toDomain(run)
    // the kept message is no field: not enumerable, not copied
    expect(Object.keys(run)).not.toContain("domain")
    expect(Reflect.ownKeys(run).filter((k) => typeof k === "symbol" && Object.getOwnPropertyDescriptor(run, k)!.enumerable))
      .toEqual([])
    const edited = { ...run, content: "edited" } as RunLoop.RunMessage.RunMessage
    expect(RunLoop.RunMessage.toDomain(edited)).toMatchObject({ _tag: "UserMessage", content: "edited" })
    // converted once, then the same message each time it is sent
    const built = RunLoop.RunMessage.build("msg_2", "assistant", "ok")
    const converted = RunLoop.RunMessage.toDomain(built)
    expect(RunLoop.RunMessage.toDomain(built)).toBe(converted)
    expect(first).toMatchObject({ content: "hi" })
    // a message somebody froze is converted each time, not refused
    const frozen = Object.freeze(RunLoop.RunMessage.build("msg_3", "user", "cold"))
    expect(RunLoop.RunMessage.toDomain(frozen)).toMatchObject({ _tag: "UserMessage", content: "cold" })
  })

  it("the model name a lazyModelName read is known at once afterwards, per effect (no shared table)", () => {
    let asked = 0
    const info = Effect.sync(() => {
      asked++
      return { name: "m1" }
    })
    const model = Spans.lazyModelName(info)
    const other = Spans.lazyModelName(info)
    expect(Spans.modelNameNow(model)).toBeUndefined()
    expect(Effect.runSync(model)).toBe("m1")
    expect(Spans.modelNameNow(model)).toBe("m1")
    expect(Spans.modelNameNow(other)).toBeUndefined()
    expect(Effect.runSync(model)).toBe("m1")
    expect(asked).toBe(1)
    // an engine's model info given as a value is known before any read
    expect(Spans.modelNameNow(Spans.lazyModelName(Effect.succeed({ name: "m2" })))).toBe("m2")
    // any other effect has none
    expect(Spans.modelNameNow(Effect.succeed("x"))).toBeUndefined()
  })

  it.effect("an AgentLoop is a plain object of values: no accessors, no class (see AgentLoop.makeIn)", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ sessionId: "s" })
      expect(Object.getPrototypeOf(agent)).toBe(Object.prototype)
      const accessors = Object.entries(Object.getOwnPropertyDescriptors(agent))
        .filter(([, d]) => d.get !== undefined || d.set !== undefined)
        .map(([k]) => k)
      expect(accessors).toEqual([])
      // its views still read the session as it is when they run
      const messages = agent.messages
      yield* agent.state.set("k", 1)
      expect(yield* agent.state.snapshot).toEqual({ k: 1 })
      expect(yield* messages).toEqual([])
      // a caller may take a turn off the loop
      const { chat } = agent
      expect(typeof chat).toBe("function")
    }).pipe(Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("ok")]))))
})

describe("Telemetry.layerInMemory and OpenTelemetry's context", { timeout: 30_000 }, () => {
  /** The OpenTelemetry span id active inside an Effect span, and that span's id. */
  const activeInside = Effect.gen(function* () {
    const span = yield* Effect.currentSpan
    return [OtelApi.trace.getActiveSpan()?.spanContext().spanId, span.spanId] as const
  }).pipe(Effect.withSpan("inside"), Effect.orDie, Effect.provide(Telemetry.layerInMemory()))

  it.effect("with a context manager registered, code instrumented by OpenTelemetry sees the Effect span", () =>
    Effect.acquireUseRelease(
      Effect.sync(() => OtelApi.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())),
      () =>
        Effect.map(activeInside, ([active, effectSpan]) => {
          expect(active).toBe(effectSpan)
        }),
      () => Effect.sync(() => OtelApi.context.disable())
    ))

  it.effect("without one (OpenTelemetry's default), spans are still exported with their parents", () =>
    Effect.gen(function* () {
      const [active] = yield* activeInside
      expect(active).toBeUndefined()
      const spans = yield* Effect.flatMap(Telemetry.InMemorySpans, (s) => s.spans).pipe(
        Effect.zipLeft(Effect.void.pipe(Effect.withSpan("child"), Effect.withSpan("parent"))),
        Effect.zipRight(Effect.flatMap(Telemetry.InMemorySpans, (s) => s.spans)),
        Effect.provide(Telemetry.layerInMemory())
      )
      const byName = new Map(spans.map((s) => [s.name, s]))
      expect(byName.get("child")?.parentSpanContext?.spanId).toBe(byName.get("parent")?.spanContext().spanId)
    }))
})
