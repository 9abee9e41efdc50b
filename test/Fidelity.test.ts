/**
 * Seeds 01-03 to the letter (issue #12): one test per contract gap closed outside
 * the facade. Each names the behaviour of the seed it checks.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Event from "../src/domain/Event.js"
import { ValidationFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Structured from "../src/programs/Structured.js"
import { EventLog } from "../src/services/EventLog.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"

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
})
