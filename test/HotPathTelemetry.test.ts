/**
 * An AgentLoop turn under Telemetry.layerInMemory (issue 13's telemetry row):
 * the spans it exports, the same whichever Effect tracer the layer installs over
 * the OpenTelemetry SDK (@effect/opentelemetry's when a context manager is
 * registered, its own `sdkTracer` otherwise).
 */
import { describe, expect, it } from "@effect/vitest"
import * as OtelApi from "@opentelemetry/api"
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks"
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Tracing from "../src/services/internal/Tracing.js"
import { Engine, InferenceResult } from "../src/services/Engine.js"
import * as Tool from "../src/services/ToolRegistry.js"

const usage = TokenUsage.make({ promptTokens: 10, outputTokens: 1 })
const callReply = new InferenceResult({
  content: "",
  toolCalls: [new Message.ToolCall({ id: "call_1", name: "add", arguments: { a: 2, b: 3 } })],
  usage,
  finishReason: "tool_calls"
})
const answer = new InferenceResult({ content: "5", toolCalls: [], usage, finishReason: "stop" })
const engine = Layer.succeed(Engine, {
  infer: (request) => Effect.succeed(request.messages.at(-1)?.role === "tool" ? answer : callReply),
  stream: () => Stream.die("not streamed"),
  modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
})
const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})
const turn = Effect.flatMap(AgentLoop.make({ sessionId: "s" }), (agent) => agent.chat("What is 2 + 3?"))

/** What a span says, ids and times left out: its parent and links by name, kind, status, attributes, events. */
const described = (spans: ReadonlyArray<ReadableSpan>) => {
  const nameOf = (spanId: string | undefined) => spans.find((s) => s.spanContext().spanId === spanId)?.name
  return spans.map((s) => ({
    name: s.name,
    parent: nameOf(s.parentSpanContext?.spanId),
    kind: s.kind,
    status: s.status,
    attributes: Object.fromEntries(
      Object.entries(s.attributes).map(([k, v]) => [k, k.endsWith("_id") || k.endsWith(".id") || k.endsWith("_ids") ? typeof v : v])
    ),
    links: s.links.map((l) => ({ to: nameOf(l.context.spanId), attributes: l.attributes, sampled: l.context.traceFlags })),
    events: s.events.map((e) => e.name),
    sameTrace: s.spanContext().traceId === spans[0]!.spanContext().traceId
  }))
}

/** The spans of one turn (after a first turn, reset), and the tracer the layer installed. */
const spansOfTurn = Effect.gen(function* () {
  const services = yield* Layer.build(Layer.mergeAll(engine, Registry.layer([add]), Telemetry.layerInMemory()))
  const memory = yield* Effect.provide(Telemetry.InMemorySpans, services)
  yield* Effect.provide(turn, services)
  yield* memory.reset
  const result = yield* Effect.provide(turn, services)
  expect(result.content).toBe("5")
  return [yield* memory.spans, yield* Effect.tracer] as const
}).pipe(Effect.scoped)

describe("an AgentLoop turn under Telemetry.layerInMemory", { timeout: 30_000 }, () => {
  it.live("four spans: the turn, two inferences and the tool call linked to the first, with their gen_ai attributes", () =>
    Effect.gen(function* () {
      const [spans] = yield* spansOfTurn
      const turnSpans = described(spans)
      expect(turnSpans.map((s) => [s.name, s.parent])).toEqual([
        ["chat instant", "AgentLoop.chat"],
        ["execute_tool add", "AgentLoop.chat"],
        ["chat instant", "AgentLoop.chat"],
        ["AgentLoop.chat", undefined]
      ])
      expect(turnSpans.every((s) => s.sameTrace && s.status.code === OtelApi.SpanStatusCode.OK)).toBe(true)
      expect(spans.map((s) => Object.keys(s.attributes).length)).toEqual([15, 10, 14, 2])
      expect(spans[0]!.kind).toBe(OtelApi.SpanKind.CLIENT)
      expect(spans[0]!.attributes).toMatchObject({
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "instant",
        "gen_ai.response.model": "instant",
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 1,
        "pagantic.tool_call_ids": ["call_1"],
        "pagantic.session_id": "s",
        "pagantic.request.message_count": 1,
        "pagantic.request.schema": false
      })
      expect(spans[1]!.attributes).toMatchObject({
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_1",
        "pagantic.tool_call_id": "call_1",
        "pagantic.caused_by": "call_1",
        "pagantic.attempt": 1
      })
      expect(spans[1]!.links.map((l) => l.context.spanId)).toEqual([spans[0]!.spanContext().spanId])
      expect(spans[3]!.attributes).toEqual({ sessionId: "s", "pagantic.session_id": "s" })
    }))

  it.live("the same spans whichever tracer the layer installs over the SDK (@effect/opentelemetry's with a context manager)", () =>
    Effect.gen(function* () {
      const [lean, leanTracer] = yield* spansOfTurn
      const [otel, otelTracer] = yield* Effect.acquireUseRelease(
        Effect.sync(() => OtelApi.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())),
        () => spansOfTurn,
        () => Effect.sync(() => OtelApi.context.disable())
      )
      expect(leanTracer).not.toBe(otelTracer)
      expect(described(lean)).toEqual(described(otel))
      expect(lean.map((s) => s.resource.attributes)).toEqual(otel.map((s) => s.resource.attributes))
    }))

  it.live("failures, interruptions, events and attributes of other types: as @effect/opentelemetry records them", () => {
    const run = Effect.gen(function* () {
      const services = yield* Layer.build(Telemetry.layerInMemory())
      const memory = yield* Effect.provide(Telemetry.InMemorySpans, services)
      const failing = Effect.fail(new Error("boom")).pipe(Tracing.withSpan("failing"), Effect.exit)
      const interrupted = Effect.interrupt.pipe(Tracing.withSpan("interrupted"), Effect.exit)
      const typed = Effect.gen(function* () {
        yield* Effect.annotateCurrentSpan({ n: 1, b: true, big: 2n, obj: { x: [1] }, list: ["a"], nothing: undefined })
        yield* Effect.logInfo("a log line")
        yield* Effect.currentSpan.pipe(Effect.flatMap((span) => Effect.sync(() => span.event("marked", 0n, { at: 1 }))))
      }).pipe(Tracing.withSpan("typed", { kind: "producer", attributes: { given: "yes" } }))
      yield* Effect.provide(Effect.all([failing, interrupted, typed]), services)
      return yield* memory.spans
    }).pipe(Effect.scoped)
    return Effect.gen(function* () {
      const lean = yield* run
      const otel = yield* Effect.acquireUseRelease(
        Effect.sync(() => OtelApi.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())),
        () => run,
        () => Effect.sync(() => OtelApi.context.disable())
      )
      const shape = (spans: ReadonlyArray<ReadableSpan>) =>
        spans.map((s) => ({
          name: s.name,
          kind: s.kind,
          status: s.status,
          attributes: s.attributes,
          events: s.events.map((e) => ({ name: e.name, attributes: { ...e.attributes, "exception.stacktrace": typeof e.attributes?.["exception.stacktrace"] } }))
        }))
      expect(shape(lean)).toEqual(shape(otel))
      expect(lean.map((s) => [s.name, s.status.code])).toEqual([
        ["failing", OtelApi.SpanStatusCode.ERROR],
        ["interrupted", OtelApi.SpanStatusCode.OK],
        ["typed", OtelApi.SpanStatusCode.OK]
      ])
      expect(lean[2]!.attributes).toMatchObject({ given: "yes", n: 1, b: true, big: "2", list: "[\n  \"a\"\n]", nothing: "undefined" })
    })
  })

  it.live("each AgentLoop turn with telemetry exports its own spans, as many as the turn before", () =>
    Effect.gen(function* () {
      const services = yield* Layer.build(Layer.mergeAll(engine, Registry.layer([add]), Telemetry.layerInMemory()))
      const memory = yield* Effect.provide(Telemetry.InMemorySpans, services)
      const once = Effect.provide(turn, services)
      expect(Exit.isSuccess(yield* Effect.exit(once))).toBe(true)
      const first = (yield* memory.spans).length
      expect(first).toBeGreaterThanOrEqual(4)
      expect(Exit.isSuccess(yield* Effect.exit(once))).toBe(true)
      expect((yield* memory.spans).length).toBe(2 * first)
    }).pipe(Effect.scoped))
})
