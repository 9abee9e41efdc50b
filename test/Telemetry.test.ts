import { describe, expect, it } from "@effect/vitest"
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Live from "../src/adapters/Live.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { SystemRequest } from "../src/domain/System.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import { PaganticSystem } from "../src/programs/Facade.js"
import * as Spans from "../src/programs/internal/Spans.js"
import { CostTracker } from "../src/services/CostTracker.js"
import { Metrics, type Snapshot } from "../src/services/Metrics.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as Loopback from "./support/loopback.js"
import { add } from "./support/tools.js"

// ---------------------------------------------------------------------------
// Fixture: the composed system on a scripted engine, spans into the real SDK
// ---------------------------------------------------------------------------

const model = "scripted-7b"
const prices = { [model]: { promptPerMillion: 1_000, outputPerMillion: 2_000 } }

const system = (script: ReadonlyArray<ScriptedEngine.Step>, tools: ReadonlyArray<Tool.Tool<any, any>> = [add]) => {
  const observe = Telemetry.layerObserve(prices)
  // one observe layer value: the facade and the test share its instances
  return Layer.mergeAll(
    Live.layer({ engine: ScriptedEngine.layer(script, { modelName: model }), tools, observe }),
    observe,
    Telemetry.layerInMemory({ serviceName: "pagantic-test" })
  )
}

const decode = Schema.decodeUnknownSync(SystemRequest)

const chatRequest = decode({
  mode: "chat",
  requestId: "req-tel-1",
  sessionId: "sess-tel-1",
  traceId: "trace-tel-1",
  messages: [{ role: "user", content: "What is 2+3?" }],
  hints: { temperature: 0.3, maxTokens: 256 }
})

// ---------------------------------------------------------------------------
// Rebuilding a request's tree from exported spans (parent ids only)
// ---------------------------------------------------------------------------

interface Node {
  readonly span: ReadableSpan
  readonly children: ReadonlyArray<Node>
}

const idOf = (s: ReadableSpan) => s.spanContext().spanId
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId
const attr = (s: ReadableSpan, key: string) => s.attributes[key]
const startNanos = (s: ReadableSpan) => BigInt(s.startTime[0]) * 1_000_000_000n + BigInt(s.startTime[1])
const endNanos = (s: ReadableSpan) => BigInt(s.endTime[0]) * 1_000_000_000n + BigInt(s.endTime[1])
const byStart = (a: ReadableSpan, b: ReadableSpan) => (startNanos(a) < startNanos(b) ? -1 : startNanos(a) > startNanos(b) ? 1 : 0)

/** The tree under the span of the request with this id, built from parent span ids. */
const requestTree = (spans: ReadonlyArray<ReadableSpan>, requestId: string): Node => {
  const roots = spans.filter((s) => s.name === "Facade.run" && attr(s, "pagantic.request_id") === requestId)
  expect(roots).toHaveLength(1)
  const root = roots[0]!
  const inTrace = spans.filter((s) => s.spanContext().traceId === root.spanContext().traceId)
  const build = (span: ReadableSpan): Node => ({
    span,
    children: inTrace.filter((s) => parentOf(s) === idOf(span)).sort(byStart).map(build)
  })
  return build(root)
}

const flatten = (node: Node): ReadonlyArray<ReadableSpan> => [node.span, ...node.children.flatMap(flatten)]

const render = (node: Node, depth = 0): ReadonlyArray<string> => [
  `${"  ".repeat(depth)}${node.span.name}`,
  ...node.children.flatMap((c) => render(c, depth + 1))
]

const counterValue = (metric: Metric.Metric.Counter<number>) => Effect.map(Metric.value(metric), (s) => s.count)

const snapshotNow = Effect.flatMap(Metrics, (m) => m.snapshot)

/**
 * What happened between two snapshots of Telemetry's Metrics: its counters and
 * token totals are Effect's registry, which is process-wide, so a test reads what
 * its request added (counters that did not move are left out).
 */
const added = (before: Snapshot, after: Snapshot) => ({
  counters: Object.fromEntries(
    Object.entries(after.counters).flatMap(([name, n]) => {
      const delta = n - (before.counters[name] ?? 0)
      return delta === 0 ? [] : [[name, delta]]
    })
  ),
  tokens: [after.promptTokens - before.promptTokens, after.outputTokens - before.outputTokens]
})

// ---------------------------------------------------------------------------

describe("Telemetry", () => {
  it.live("a chat request with a tool call: one trace, rooted at the request, lifecycle states, gen_ai inferences, tool span linked to its inference", () =>
    Effect.gen(function* () {
      const before = yield* snapshotNow
      const totalBefore = yield* Effect.flatMap(CostTracker, (c) => c.totalCost)
      const toolCallsBefore = yield* counterValue(Telemetry.counter("tool_calls"))
      const costBefore = yield* counterValue(Metric.tagged(Telemetry.cost, "gen_ai.request.model", model))
      const inputBefore = yield* counterValue(Metric.tagged(Telemetry.tokenUsage, "gen_ai.token.type", "input"))

      const response = yield* Effect.flatMap(PaganticSystem, (s) => s.run(chatRequest))
      expect(response.error).toBeUndefined()
      expect(response.content).toBe("2 + 3 is 5.")
      const callId = response.toolCallsMade[0]!.id

      const spans = yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans)
      const tree = requestTree(spans, "req-tel-1")
      const all = flatten(tree)
      expect(render(tree)).toEqual([
        "Facade.run",
        "  lifecycle INIT",
        "  lifecycle PREPARE",
        "  lifecycle EXECUTE",
        "  AgentLoop.chat",
        `    chat ${model}`,
        "    execute_tool add",
        `    chat ${model}`,
        "  lifecycle COMPLETE"
      ])

      // the request span is the root of the whole request: its parent is the remote span of the trace its
      // trace id names (not exported here), every span of the trace under it
      expect(tree.span.spanContext().traceId).toBe(Spans.w3cTraceId("trace-tel-1"))
      expect(spans.some((s) => idOf(s) === parentOf(tree.span))).toBe(false)
      expect(spans.filter((s) => s.spanContext().traceId === tree.span.spanContext().traceId)).toHaveLength(all.length)
      expect(tree.span.attributes).toMatchObject({
        "pagantic.request_id": "req-tel-1",
        "pagantic.session_id": "sess-tel-1",
        "pagantic.trace_id": "trace-tel-1",
        "pagantic.mode": "chat",
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 6,
        "pagantic.tool_calls": 1,
        "pagantic.stop_reason": "finish"
      })

      // a span per lifecycle state, children of the request span, in order, each ending where the next starts
      const states = tree.children.filter((c) => c.span.name.startsWith("lifecycle ")).map((c) => c.span)
      expect(states.map((s) => s.name)).toEqual([
        "lifecycle INIT",
        "lifecycle PREPARE",
        "lifecycle EXECUTE",
        "lifecycle COMPLETE"
      ])
      expect(states.map((s) => attr(s, "pagantic.lifecycle.from"))).toEqual([undefined, "INIT", "PREPARE", "EXECUTE"])
      for (let i = 0; i + 1 < states.length; i++) expect(endNanos(states[i]!)).toBeLessThanOrEqual(startNanos(states[i + 1]!))
      expect(states.every((s) => attr(s, "pagantic.request_id") === "req-tel-1")).toBe(true)

      // every span of the request carries its correlation ids (the loop's own span: its session)
      expect(all).toHaveLength(9)
      for (const s of all) {
        expect(s.attributes["pagantic.session_id"]).toBe("sess-tel-1")
        if (s.name !== "AgentLoop.chat") {
          expect(s.attributes).toMatchObject({ "pagantic.request_id": "req-tel-1", "pagantic.trace_id": "trace-tel-1" })
        }
      }

      // two inferences with the gen_ai conventions
      const inferences = all.filter((s) => s.name === `chat ${model}`).sort(byStart)
      expect(inferences).toHaveLength(2)
      for (const s of inferences) {
        expect(s.attributes).toMatchObject({
          "gen_ai.operation.name": "chat",
          "gen_ai.request.model": model,
          "gen_ai.response.model": model,
          "gen_ai.request.temperature": 0.3,
          "gen_ai.request.max_tokens": 256,
          "gen_ai.usage.input_tokens": 10,
          "pagantic.request_id": "req-tel-1",
          "pagantic.session_id": "sess-tel-1",
          "pagantic.trace_id": "trace-tel-1"
        })
      }
      expect(inferences.map((s) => attr(s, "gen_ai.response.finish_reasons"))).toEqual([["tool_calls"], ["stop"]])
      expect(inferences.map((s) => attr(s, "gen_ai.usage.output_tokens"))).toEqual([1, 5])
      expect(attr(inferences[0]!, "pagantic.tool_call_ids")).toEqual([callId])

      // the tool span: found by its tool_call_id, linked to the inference that asked for it
      const tools = all.filter((s) => attr(s, "gen_ai.tool.call.id") === callId && s.name.startsWith("execute_tool"))
      expect(tools).toHaveLength(1)
      const tool = tools[0]!
      expect(tool.name).toBe("execute_tool add")
      expect(tool.attributes).toMatchObject({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "pagantic.tool_call_id": callId,
        "pagantic.request_id": "req-tel-1",
        "pagantic.session_id": "sess-tel-1"
      })
      expect(tool.links.map((l) => l.context.spanId)).toEqual([idOf(inferences[0]!)])
      expect(tool.links[0]!.attributes).toMatchObject({ "gen_ai.tool.call.id": callId })
      // ... and it ran after that inference ended and before the next one started
      expect(startNanos(tool)).toBeGreaterThanOrEqual(endNanos(inferences[0]!))
      expect(endNanos(tool)).toBeLessThanOrEqual(startNanos(inferences[1]!))
      // the inference spans and the tool span hang under the request (through the loop's span)
      const loop = tree.children.find((c) => c.span.name === "AgentLoop.chat")!
      expect(loop.children.map((c) => c.span.name)).toEqual([`chat ${model}`, "execute_tool add", `chat ${model}`])

      // metrics: the Metrics service and Effect's Metric registry
      const snapshot = yield* snapshotNow
      const request = added(before, snapshot)
      expect(request.counters["tool_calls"]).toBe(1)
      expect(request.counters["requests"]).toBe(1)
      expect(request.counters["request_errors"]).toBeUndefined()
      expect(snapshot.latencies["request"]).toHaveLength(1)
      expect(snapshot.latencies["inference"]).toHaveLength(2)
      expect(snapshot.latencies["tool"]).toHaveLength(1)
      expect(request.tokens).toEqual([20, 6])
      expect((yield* counterValue(Telemetry.counter("tool_calls"))) - toolCallsBefore).toBe(1)
      expect(
        (yield* counterValue(Metric.tagged(Telemetry.tokenUsage, "gen_ai.token.type", "input"))) - inputBefore
      ).toBe(20)
      const latency = yield* Metric.value(Metric.tagged(Telemetry.latency, "layer", "inference"))
      expect(latency.count).toBeGreaterThanOrEqual(2)

      // cost from the price table: (20 * 1000 + 6 * 2000) / 1e6
      const total = yield* Effect.flatMap(CostTracker, (c) => c.totalCost)
      expect(total - totalBefore).toBeCloseTo(0.032, 10)
      expect(
        (yield* counterValue(Metric.tagged(Telemetry.cost, "gen_ai.request.model", model))) - costBefore
      ).toBeCloseTo(0.032, 10)
    }).pipe(
      Effect.provide(
        system([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]),
          ScriptedEngine.reply("2 + 3 is 5.")
        ])
      )
    )
  )

  it.live("a plan request: a span per step under the request, the step's inference and tool spans inside it", () =>
    Effect.gen(function* () {
      const response = yield* Effect.flatMap(PaganticSystem, (s) =>
        s.run(
          decode({
            mode: "plan",
            requestId: "req-plan-1",
            messages: [],
            plan: {
              steps: [
                { name: "sum", type: "tool", input: { name: "add", arguments: { a: 2, b: 3 } } },
                { name: "explain", type: "infer", input: "Explain 5" }
              ]
            }
          })
        )
      )
      expect(response.error).toBeUndefined()
      const tree = requestTree(yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans), "req-plan-1")
      expect(render(tree)).toEqual([
        "Facade.run",
        "  lifecycle INIT",
        "  lifecycle PLAN",
        "  lifecycle PREPARE",
        "  lifecycle EXECUTE",
        "  PlanExecutor.execute",
        "    PlanExecutor.step",
        "      execute_tool add",
        "    PlanExecutor.step",
        `      chat ${model}`,
        "  lifecycle VALIDATE",
        "  lifecycle COMPLETE"
      ])
      const all = flatten(tree)

      const states = tree.children.filter((c) => c.span.name.startsWith("lifecycle ")).map((c) => c.span.name)
      expect(states).toEqual([
        "lifecycle INIT",
        "lifecycle PLAN",
        "lifecycle PREPARE",
        "lifecycle EXECUTE",
        "lifecycle VALIDATE",
        "lifecycle COMPLETE"
      ])

      const steps = all.filter((s) => s.name === "PlanExecutor.step").sort(byStart)
      expect(steps.map((s) => attr(s, "pagantic.step_name"))).toEqual(["sum", "explain"])
      expect(steps.map((s) => attr(s, "pagantic.step_type"))).toEqual(["tool", "infer"])
      expect(steps.every((s) => attr(s, "pagantic.request_id") === "req-plan-1")).toBe(true)

      const under = (step: ReadableSpan): ReadonlyArray<ReadableSpan> => {
        const find = (n: Node): Node | undefined =>
          idOf(n.span) === idOf(step) ? n : n.children.map(find).find((x) => x !== undefined)
        return flatten(find(tree)!).slice(1)
      }
      const toolSpan = under(steps[0]!).find((s) => s.name === "execute_tool add")!
      expect(toolSpan.attributes).toMatchObject({ "gen_ai.tool.name": "add", "pagantic.step_name": "sum" })
      const inference = under(steps[1]!).find((s) => s.name === `chat ${model}`)!
      expect(inference.attributes).toMatchObject({
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 10,
        "pagantic.step_name": "explain",
        "pagantic.request_id": "req-plan-1"
      })
      expect(yield* Effect.flatMap(CostTracker, (c) => c.totalCost)).toBeGreaterThan(0)
      const snapshot = yield* Effect.flatMap(Metrics, (m) => m.snapshot)
      expect(snapshot.latencies["plan_step"]).toHaveLength(2)
      expect(snapshot.latencies["inference"]).toHaveLength(1)
    }).pipe(Effect.provide(system([ScriptedEngine.reply("Five is 2 + 3.")])))
  )

  it.live("a redundant request: one inference span per replica under the request, the vote on the request span and in the metrics", () =>
    Effect.gen(function* () {
      const before = yield* snapshotNow
      const votesBefore = yield* counterValue(Telemetry.counter("votes"))
      const response = yield* Effect.flatMap(PaganticSystem, (s) =>
        s.run(
          decode({
            mode: "redundant",
            requestId: "req-vote-1",
            messages: [{ role: "user", content: "I love it" }],
            output: {
              schema: {
                type: "object",
                properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
                required: ["sentiment"]
              }
            },
            redundancy: { n: 3 }
          })
        )
      )
      expect(response.error).toBeUndefined()
      expect(response.confidence).toBeCloseTo(2 / 3)
      const tree = requestTree(yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans), "req-vote-1")
      expect(render(tree).filter((line) => !line.includes("lifecycle"))).toEqual([
        "Facade.run",
        "  RedundantLoop.run",
        ...Array.from({ length: 3 }, () => ["    Structured.run", `      chat ${model}`, "      Constraint.enforce"]).flat(),
        "    MajorityVoting.vote"
      ])
      const inferences = flatten(tree).filter((s) => s.name === `chat ${model}`)
      expect(inferences).toHaveLength(3)
      expect(inferences.every((s) => attr(s, "pagantic.request_id") === "req-vote-1" && attr(s, "pagantic.request.schema") === true)).toBe(true)
      expect(tree.span.attributes).toMatchObject({
        "pagantic.vote.candidates": 3,
        "pagantic.vote.replicas": 3,
        "gen_ai.usage.input_tokens": 30
      })
      expect(attr(tree.span, "pagantic.vote.confidence")).toBeCloseTo(2 / 3)
      const snapshot = yield* snapshotNow
      expect(added(before, snapshot).counters).toMatchObject({ votes: 1, vote_candidates: 3 })
      expect(snapshot.latencies["inference"]).toHaveLength(3)
      expect((yield* counterValue(Telemetry.counter("votes"))) - votesBefore).toBe(1)
      expect(yield* Effect.flatMap(CostTracker, (c) => c.totalCost)).toBeGreaterThan(0)
    }).pipe(
      Effect.provide(
        system([
          ScriptedEngine.reply('{"sentiment":"positive"}'),
          ScriptedEngine.reply('{"sentiment":"negative"}'),
          ScriptedEngine.reply('{ "sentiment" : "positive" }')
        ])
      )
    )
  )

  it.live("a retried idempotent tool: a span per attempt, each linked to the inference that asked for the call", () => {
    const calls = Ref.unsafeMake(0)
    const flaky = Tool.make({
      name: "flaky",
      description: "Fails the first time",
      parameters: Schema.Struct({}),
      idempotent: true,
      handler: () => Effect.flatMap(Ref.updateAndGet(calls, (n) => n + 1), (n) => (n === 1 ? Effect.fail("busy") : Effect.succeed("ok")))
    })
    return Effect.gen(function* () {
      const before = yield* snapshotNow
      const response = yield* Effect.flatMap(PaganticSystem, (s) =>
        s.run(decode({ mode: "chat", requestId: "req-retry-1", messages: [{ role: "user", content: "go" }] }))
      )
      expect(response.error).toBeUndefined()
      expect(response.toolCallsMade[0]).toMatchObject({ name: "flaky", result: "ok", isError: false })
      const callId = response.toolCallsMade[0]!.id
      const all = flatten(requestTree(yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans), "req-retry-1"))
      const asking = all.find((s) => s.name === `chat ${model}` && attr(s, "gen_ai.response.finish_reasons")?.toString() === "tool_calls")!
      const attempts = all.filter((s) => attr(s, "gen_ai.tool.call.id") === callId).sort(byStart)
      expect(attempts.map((s) => [s.name, attr(s, "pagantic.attempt"), s.status.code])).toEqual([
        ["execute_tool flaky", 1, 2], // ERROR
        ["execute_tool flaky", 2, 1] // OK
      ])
      for (const s of attempts) expect(s.links.map((l) => l.context.spanId)).toEqual([idOf(asking)])
      expect(added(before, yield* snapshotNow).counters).toMatchObject({ tool_retries: 1, tool_errors: 1, tool_calls: 1 })
    }).pipe(
      Effect.provide(
        system([ScriptedEngine.toolCalls([{ name: "flaky", arguments: {} }]), ScriptedEngine.reply("done")], [flaky])
      )
    )
  })

  it.live("a failed request: the inference span records the error, the lifecycle ends in an ERROR span with its code", () =>
    Effect.gen(function* () {
      const response = yield* Effect.flatMap(PaganticSystem, (s) =>
        s.run(decode({ mode: "chat", requestId: "req-err-1", messages: [{ role: "user", content: "hi" }] }))
      )
      expect(response.error?.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
      const tree = requestTree(yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans), "req-err-1")
      const states = tree.children.filter((c) => c.span.name.startsWith("lifecycle ")).map((c) => c.span)
      expect(states.map((s) => s.name).at(-1)).toBe("lifecycle ERROR")
      expect(attr(states.at(-1)!, "pagantic.error.code")).toBe("INFERENCE_CONTEXT_EXCEEDED")
      expect(attr(tree.span, "pagantic.error.code")).toBe("INFERENCE_CONTEXT_EXCEEDED")
      const inference = flatten(tree).find((s) => s.name === `chat ${model}`)!
      expect(inference.status.code).toBe(2) // SpanStatusCode.ERROR
      expect(attr(inference, "gen_ai.usage.input_tokens")).toBeUndefined()
    }).pipe(
      Effect.provide(
        system([ScriptedEngine.fail(new InferenceFailure({ code: "INFERENCE_CONTEXT_EXCEEDED", retryable: false, message: "too long" }))])
      )
    )
  )

  it.effect("an interrupted request still exports its open state's span, marked interrupted", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(
        Effect.flatMap(PaganticSystem, (s) =>
          s.run(decode({ mode: "chat", requestId: "req-int-1", messages: [{ role: "user", content: "slow" }] }))
        )
      )
      yield* TestClock.adjust("1 second")
      yield* Fiber.interrupt(fiber)
      const tree = requestTree(yield* Effect.flatMap(Telemetry.InMemorySpans, (m) => m.spans), "req-int-1")
      expect(render(tree)).toEqual([
        "Facade.run",
        "  lifecycle INIT",
        "  lifecycle PREPARE",
        "  lifecycle EXECUTE",
        "  AgentLoop.chat",
        `    chat ${model}`
      ])
      const execute = tree.children.find((c) => c.span.name === "lifecycle EXECUTE")!.span
      expect(attr(execute, "pagantic.lifecycle.interrupted")).toBe(true)
      expect(attr(tree.span, "status.interrupted")).toBe(true)
    }).pipe(Effect.provide(system([ScriptedEngine.reply("late", { delay: "10 seconds" })])))
  )

  it.scopedLive("layerConfig: with PAGANTIC_OTLP_ENDPOINT set, spans and metrics reach an OTLP/HTTP collector", () =>
    Effect.gen(function* () {
      const collector = yield* Loopback.make((_, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end("{}")
      })
      const otlp = Telemetry.layerConfig().pipe(
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["PAGANTIC_OTLP_ENDPOINT", collector.url]]))))
      )
      const observe = Telemetry.layerObserve(prices)
      const app = Layer.mergeAll(
        Live.layer({
          engine: ScriptedEngine.layer(
            [ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }]), ScriptedEngine.reply("2")],
            { modelName: model }
          ),
          tools: [add],
          observe
        }),
        otlp
      )
      // the layer's scope closes after the request, which flushes what is buffered
      yield* Effect.scoped(
        Effect.flatMap(Layer.build(app), (ctx) =>
          Effect.flatMap(PaganticSystem, (s) => s.run(decode({ mode: "chat", requestId: "req-otlp-1", messages: [{ role: "user", content: "1+1?" }] }))).pipe(
            Effect.provide(ctx)
          )
        )
      )
      const traces = collector.requests.filter((r) => r.url === "/v1/traces")
      expect(traces.length).toBeGreaterThan(0)
      const exported = traces.flatMap((r) =>
        (r.json as { resourceSpans: ReadonlyArray<{ scopeSpans: ReadonlyArray<{ spans: ReadonlyArray<{ name: string; attributes: ReadonlyArray<{ key: string; value: Record<string, unknown> }> }> }> }> }).resourceSpans
          .flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans))
      )
      const names = exported.map((s) => s.name)
      expect(names).toContain("Facade.run")
      expect(names).toContain(`chat ${model}`)
      expect(names).toContain("execute_tool add")
      expect(names).toContain("lifecycle COMPLETE")
      const request = exported.find((s) => s.name === "Facade.run")!
      expect(request.attributes).toContainEqual({ key: "pagantic.request_id", value: { stringValue: "req-otlp-1" } })
      const metrics = collector.requests.filter((r) => r.url === "/v1/metrics")
      expect(metrics.length).toBeGreaterThan(0)
      expect(metrics.map((r) => r.body).join("\n")).toContain("pagantic.tool_calls")
    })
  )

  it.effect("layerConfig: without an endpoint nothing is exported and nothing is required", () =>
    Effect.gen(function* () {
      const withEnv = (env: ReadonlyArray<readonly [string, string]>) =>
        Telemetry.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(env)))))
      const outside = yield* Effect.tracer
      // no endpoint: the tracer stays Effect's own, nothing is exported
      expect(yield* Effect.tracer.pipe(Effect.provide(withEnv([])))).toBe(outside)
      // (with an endpoint the OpenTelemetry tracer is installed: the collector test above)
    })
  )
})
