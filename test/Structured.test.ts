import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Event from "../src/domain/Event.js"
import { InferenceFailure, ValidationFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import * as Structured from "../src/programs/Structured.js"
import { EventLog } from "../src/services/EventLog.js"

const sentiment = JsonSchema.object({
  sentiment: JsonSchema.enumOf(["positive", "negative", "neutral"]),
  confidence: JsonSchema.number()
})
const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral"), confidence: Schema.Number })

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), ConstraintLive.layer, Observe.eventLogMemory)

const ask = [Message.system("Classify sentiment."), Message.user("I love it")]

describe("Structured.run (ChatStructured)", () => {
  it.effect("sends schema, grammar and a low temperature; a valid reply is accepted at once", () =>
    Effect.gen(function* () {
      const grammar = 'root ::= "{" [^}]* "}"'
      const result = yield* Structured.run(ask, { schema: sentiment, grammar })
      expect(result.value).toEqual({ sentiment: "positive", confidence: 0.9 })
      expect(result.attempts).toBe(1)
      expect(result.repairAttempts).toBe(0)
      expect(result.validation).toMatchObject({ passed: 1, failed: 0, repairAttempts: 0, violations: [] })
      expect(result.usage.calls).toBe(1)
      const [request] = yield* ScriptedEngine.requests
      expect(request!.schema).toEqual(sentiment)
      expect(request!.grammar).toBe(grammar)
      expect(request!.temperature).toBe(Structured.defaultTemperature)
      expect(request!.maxTokens).toBe(Structured.defaultMaxTokens)
      expect(request!.messages).toEqual(ask)
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"positive","confidence":0.9}')]))))

  it.effect("the typed path: an Effect Schema gives its Type back, and its JSON schema goes to the engine", () =>
    Effect.gen(function* () {
      const result = yield* Structured.run(ask, { schema: Sentiment, temperature: 0 })
      const label: "positive" | "negative" | "neutral" = result.value.sentiment
      expect(label).toBe("negative")
      const [request] = yield* ScriptedEngine.requests
      expect(request!.schema?.properties?.sentiment?.enum).toEqual(["positive", "negative", "neutral"])
      expect(request!.temperature).toBe(0)
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"Negative","confidence":0.1}')]))))

  it.effect("invalid JSON is repaired, normalized and validated in the same attempt", () =>
    Effect.gen(function* () {
      const result = yield* Structured.run(ask, { schema: sentiment })
      expect(result.value).toEqual({ sentiment: "neutral", confidence: 0.5 })
      expect(result.attempts).toBe(1)
      expect(result.repaired).toBe(true)
      expect(result.repairAttempts).toBe(1)
      expect(result.raw).toBe("{'sentiment': 'NEUTRAL', 'confidence': 0.5")
    }).pipe(Effect.provide(env([ScriptedEngine.reply("{'sentiment': 'NEUTRAL', 'confidence': 0.5")]))))

  it.effect("VALIDATE -> EXECUTE: a rejected reply is re-prompted on the Schedule with what was wrong", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Structured.run(ask, { schema: sentiment }))
      yield* TestClock.adjust("10 millis")
      // the retry waits for the schedule: only one request so far
      expect((yield* ScriptedEngine.requests).length).toBe(1)
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(fiber)
      expect(result.value).toEqual({ sentiment: "positive", confidence: 1 })
      expect(result.attempts).toBe(2)
      expect(result.validation).toMatchObject({ passed: 1, failed: 1 })
      expect(result.usage.calls).toBe(2)
      const requests = yield* ScriptedEngine.requests
      const second = requests[1]!.messages
      expect(second.slice(0, 2)).toEqual(ask)
      expect(second[2]).toEqual(Message.assistant('{"sentiment":"positive"}'))
      expect(second[3]!.role).toBe("user")
      expect(second[3]!.content).toContain("CONSTRAINT_SCHEMA_INVALID")
      expect(second[3]!.content).toContain("$.confidence: is missing")
      const transitions = (yield* (yield* EventLog).events).filter(
        (e): e is Event.LifecycleTransition => e._tag === "LifecycleTransition"
      )
      expect(transitions.map((t) => [t.fromState, t.toState, t.attempt])).toEqual([
        ["EXECUTE", "VALIDATE", 1],
        ["VALIDATE", "EXECUTE", 2],
        ["EXECUTE", "VALIDATE", 2]
      ])
    }).pipe(
      Effect.provide(
        env([ScriptedEngine.reply('{"sentiment":"positive"}'), ScriptedEngine.reply('{"sentiment":"positive","confidence":1}')])
      )
    ))

  it.effect("when the schedule gives up: CONSTRAINT_SCHEMA_INVALID with the last raw text, after 3 attempts", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(Structured.run(ask, { schema: sentiment })))
      yield* TestClock.adjust("1 minute")
      const failure = yield* Fiber.join(fiber)
      expect(failure._tag).toBe("ConstraintFailure")
      if (failure._tag !== "ConstraintFailure") return
      expect(failure.code).toBe("CONSTRAINT_SCHEMA_INVALID")
      expect(failure.raw).toBe('{"sentiment":"positive","confidence":"3"}')
      expect(failure.violations).toEqual(['$.confidence: Expected number, actual "3"'])
      expect((yield* ScriptedEngine.requests).length).toBe(3)
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply('{"sentiment":"positive","confidence":"1"}'),
          ScriptedEngine.reply('{"sentiment":"positive","confidence":"2"}'),
          ScriptedEngine.reply('{"sentiment":"positive","confidence":"3"}')
        ])
      )
    ))

  it.effect("repair not allowed: CONSTRAINT_JSON_INVALID carrying the raw text", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(
        Structured.run(ask, { schema: sentiment, repairAllowed: false, retry: RetryPolicy.none })
      )
      expect(failure).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_JSON_INVALID", raw: '{"sentiment":"positive"' })
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sentiment":"positive"')]))))

  it.effect("an unknown enum member: CONSTRAINT_ENUM_UNRECOGNIZED; a failed repair counts as a repair attempt", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(Structured.run(ask, { schema: sentiment, retry: RetryPolicy.exponential({ times: 1 }) })))
      yield* TestClock.adjust("1 minute")
      const failure = yield* Fiber.join(fiber)
      expect(failure).toMatchObject({ code: "CONSTRAINT_ENUM_UNRECOGNIZED", raw: '{"sentiment":"great","confidence":1}' })
      const second = (yield* ScriptedEngine.requests)[1]!.messages
      expect(second.at(-1)!.content).toContain("CONSTRAINT_JSON_INVALID")
    }).pipe(
      Effect.provide(env([ScriptedEngine.reply(""), ScriptedEngine.reply('{"sentiment":"great","confidence":1}')]))
    ))

  it.effect("a non-retryable InferenceFailure ends the call at once, without re-prompting", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(Structured.run(ask, { schema: sentiment }))
      expect(failure).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_MODEL_UNAVAILABLE" })
      expect((yield* ScriptedEngine.requests).length).toBe(1)
    }).pipe(Effect.provide(env([ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model"))]))))

  it.effect("a retryable InferenceFailure is retried on the inference policy", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Structured.run(ask, { schema: sentiment }))
      yield* TestClock.adjust("1 minute")
      const result = yield* Fiber.join(fiber)
      expect(result.attempts).toBe(1)
      expect((yield* ScriptedEngine.requests).length).toBe(2)
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.fail(InferenceFailure.engineError("503")),
          ScriptedEngine.reply('{"sentiment":"positive","confidence":1}')
        ])
      )
    ))

  it.effect("a rule check's ValidationFailure is retried, and is the failure when the schedule gives up", () =>
    Effect.gen(function* () {
      const confident = (value: { readonly confidence: number }) =>
        value.confidence >= 0.5
          ? Effect.void
          : Effect.fail(
              new ValidationFailure({
                code: "VALIDATION_RULE_FAILED",
                retryable: true,
                message: "not confident enough",
                failedRules: ["confidence >= 0.5"]
              })
            )
      const fiber = yield* Effect.fork(
        Effect.flip(Structured.run(ask, { schema: Sentiment, validate: confident, retry: RetryPolicy.exponential({ times: 1 }) }))
      )
      yield* TestClock.adjust("1 minute")
      const failure = yield* Fiber.join(fiber)
      expect(failure).toMatchObject({ _tag: "ValidationFailure", code: "VALIDATION_RULE_FAILED" })
      const second = (yield* ScriptedEngine.requests)[1]!.messages
      expect(second.at(-1)!.content).toContain("- confidence >= 0.5")
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply('{"sentiment":"positive","confidence":0.1}'),
          ScriptedEngine.reply('{"sentiment":"positive","confidence":0.2}')
        ])
      )
    ))
})
