import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type * as Event from "../src/domain/Event.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as Memory from "../src/layers/InMemoryMemory.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Lifecycle from "../src/programs/Lifecycle.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import * as SpecializedLoop from "../src/programs/SpecializedLoop.js"
import { ContextProvider } from "../src/services/ContextProvider.js"
import { ConversationStore } from "../src/services/ConversationStore.js"
import { EventLog } from "../src/services/EventLog.js"
import { add } from "./support/tools.js"

const Sum = Schema.Struct({ sum: Schema.Number })
const Label = Schema.Struct({ label: Schema.Literal("spam", "ham") })

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), ConstraintLive.layer, Observe.eventLogMemory)

/** A ContextProvider that records the queries it was asked. */
const recordingContext = (queries: Ref.Ref<ReadonlyArray<string>>) =>
  Layer.succeed(ContextProvider, {
    build: (query) =>
      Effect.as(Ref.update(queries, (qs) => [...qs, query]), [Message.system(`Context for: ${query}`)])
  })

const transitionsOf = (events: ReadonlyArray<Event.Event>) =>
  events.flatMap((e) => (e._tag === "LifecycleTransition" ? [`${e.fromState}->${e.toState}`] : []))

describe("SpecializedLoop", () => {
  it.effect("is stateless: every call starts fresh from system prompt and prompt", () =>
    Effect.gen(function* () {
      const loop = yield* SpecializedLoop.make({ schema: Label, systemPrompt: "Classify." })
      const first = yield* loop.call("WIN A PRIZE")
      const second = yield* loop.call("lunch at noon?")
      expect(first.value.label).toBe("spam")
      expect(second.value.label).toBe("ham")
      const requests = yield* ScriptedEngine.requests
      expect(requests[1]!.messages).toEqual([Message.system("Classify."), Message.user("lunch at noon?")])
      expect(transitionsOf(yield* (yield* EventLog).events)).toEqual([
        "PREPARE->EXECUTE",
        "EXECUTE->VALIDATE",
        "PREPARE->EXECUTE",
        "EXECUTE->VALIDATE"
      ])
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"label":"SPAM"}'), ScriptedEngine.reply('{"label":"ham"}')]))))

  it.effect("injects context retrieved with the original prompt, just before it", () =>
    Effect.gen(function* () {
      const queries = yield* Ref.make<ReadonlyArray<string>>([])
      const result = yield* SpecializedLoop.call("is this spam?", { schema: Label, systemPrompt: "Classify." }).pipe(
        Effect.provide(recordingContext(queries))
      )
      expect(result.value.label).toBe("ham")
      expect(yield* Ref.get(queries)).toEqual(["is this spam?"])
      const [request] = yield* ScriptedEngine.requests
      expect(request!.messages).toEqual([
        Message.system("Classify."),
        Message.system("Context for: is this spam?"),
        Message.user("is this spam?")
      ])
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"label":"ham"}')]))))

  it.effect("a failing ContextProvider degrades to no context and is recorded", () =>
    Effect.gen(function* () {
      const failing = Layer.succeed(ContextProvider, {
        build: () => Effect.fail(InferenceFailure.engineError("index offline"))
      })
      const result = yield* SpecializedLoop.call("x", { schema: Label }).pipe(Effect.provide(failing))
      expect(result.value.label).toBe("ham")
      expect((yield* ScriptedEngine.requests)[0]!.messages).toEqual([Message.user("x")])
      const retrieved = (yield* (yield* EventLog).events).find((e) => e._tag === "ContextRetrieved")
      expect(retrieved).toMatchObject({ error: "INFERENCE_ENGINE_ERROR: index offline" })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"label":"ham"}')]))))

  it.effect("with tools: a tool phase, then the structured phase with the transcript, context and schema", () =>
    Effect.gen(function* () {
      const queries = yield* Ref.make<ReadonlyArray<string>>([])
      const result = yield* Effect.gen(function* () {
        const result = yield* SpecializedLoop.call("What is 2+2?", { schema: Sum, systemPrompt: "Use tools." })
        // the application's ConversationStore is never written by a stateless call
        expect(yield* (yield* ConversationStore).sessions).toEqual([])
        return result
      }).pipe(Effect.provide(Layer.mergeAll(recordingContext(queries), Registry.layer([add]), Memory.conversationStoreMemory)))
      expect(result.value).toEqual({ sum: 4 })
      expect(result.toolCalls.map((r) => [r.name, r.result])).toEqual([["add", "4"]])
      expect(result.toolPhase).toBe("finish")
      expect(result.usage.calls).toBe(3)
      expect(yield* Ref.get(queries)).toEqual(["What is 2+2?"])
      const requests = yield* ScriptedEngine.requests
      expect(requests).toHaveLength(3)
      // tool phase: tools offered, no schema
      expect(requests[0]!.tools.map((t) => t.name)).toEqual(["add"])
      expect(requests[0]!.schema).toBeUndefined()
      expect(requests[0]!.messages.map((m) => m.content)).toEqual(["Use tools.", "Context for: What is 2+2?", "What is 2+2?"])
      // structured phase: schema on, the whole transcript in view, context kept before the prompt
      const last = requests[2]!
      expect(last.schema?.properties?.sum).toEqual({ type: "number" })
      expect(last.messages.map((m) => m.role)).toEqual(["system", "system", "user", "assistant", "tool", "assistant", "user"])
      expect(last.messages[1]!.content).toBe("Context for: What is 2+2?")
      expect(last.messages.at(-1)).toEqual(Message.user(SpecializedLoop.structuredPhasePrompt))
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 2 } }]),
          ScriptedEngine.reply("The sum is 4."),
          ScriptedEngine.reply('{"sum":4}')
        ])
      )
    ))

  it.effect("useTools: false skips the tool phase even when tools are registered", () =>
    Effect.gen(function* () {
      const result = yield* SpecializedLoop.call("2+2", { schema: Sum, useTools: false }).pipe(
        Effect.provide(Registry.layer([add]))
      )
      expect(result.value).toEqual({ sum: 4 })
      expect(result.toolPhase).toBeUndefined()
      expect((yield* ScriptedEngine.requests)[0]!.tools).toEqual([])
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sum":4}')]))))

  it.effect("timeout: CANCELLED_TIMEOUT", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(SpecializedLoop.call("slow", { schema: Sum, timeout: "5 seconds" })))
      yield* TestClock.adjust("5 seconds")
      const failure = yield* Fiber.join(fiber)
      expect(failure).toMatchObject({ _tag: "Cancellation", code: "CANCELLED_TIMEOUT" })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sum":4}', { delay: "10 seconds" })]))))

  it.effect("a rejected output: ConstraintFailure with the raw text", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(SpecializedLoop.call("x", { schema: Sum, retry: RetryPolicy.none }))
      expect(failure).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_SCHEMA_INVALID", raw: '{"total":4}' })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"total":4}')]))))

  it.effect("an engine failure: InferenceFailure", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(SpecializedLoop.call("x", { schema: Sum }))
      expect(failure).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_CONTEXT_EXCEEDED" })
    }).pipe(Effect.provide(env([ScriptedEngine.fail(InferenceFailure.contextExceeded("too long"))]))))

  it.effect("inside a tracked request, a retry moves the request's lifecycle and counts the attempt", () =>
    Effect.gen(function* () {
      const tracker = yield* Lifecycle.makeTracker
      yield* tracker.transition("PREPARE", "request received")
      const fiber = yield* Effect.fork(SpecializedLoop.call("x", { schema: Sum }).pipe(Lifecycle.tracked(tracker)))
      yield* TestClock.adjust("1 minute")
      expect((yield* Fiber.join(fiber)).value).toEqual({ sum: 4 })
      const state = yield* tracker.state
      expect(state.current).toBe("VALIDATE")
      expect(state.attempt).toBe(2)
      expect((yield* tracker.history).map((h) => `${h.from}->${h.to}`)).toEqual([
        "INIT->PREPARE",
        "PREPARE->EXECUTE",
        "EXECUTE->VALIDATE",
        "VALIDATE->EXECUTE",
        "EXECUTE->VALIDATE"
      ])
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sum":"four"}'), ScriptedEngine.reply('{"sum":4}')]))))
})
