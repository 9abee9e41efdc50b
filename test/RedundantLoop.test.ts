import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as Lifecycle from "../src/programs/Lifecycle.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import type { VotingStrategy } from "../src/programs/Voting.js"
import { UnanimityVoting } from "../src/programs/Voting.js"
import { ContextProvider } from "../src/services/ContextProvider.js"
import { EventLog } from "../src/services/EventLog.js"
import { Engine, InferenceRequest, InferenceResult } from "../src/services/Engine.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as Stream from "effect/Stream"

const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), ConstraintLive.layer, Observe.eventLogMemory)

const reply = (sentiment: string, options: ScriptedEngine.StepOptions = {}) =>
  ScriptedEngine.reply(`{"sentiment":"${sentiment}"}`, options)

describe("RedundantLoop", () => {
  it.effect("runs 3 replicas by default and the majority wins, with the typed value and combined usage", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", { schema: Sentiment, systemPrompt: "Classify." })
      expect(result.value).toEqual({ sentiment: "positive" })
      expect(result.content).toBe('{"sentiment":"positive"}')
      expect(result.confidence).toBe(2 / 3)
      expect(result.winner).toBe(0)
      expect(result.candidates).toEqual(['{"sentiment":"positive"}', '{"sentiment":"negative"}', '{"sentiment":"positive"}'])
      expect(result.replicas.map((r) => r._tag)).toEqual(["Valid", "Valid", "Valid"])
      expect(result.usage.calls).toBe(3)
      expect(result.usage.outputTokens).toBe(3)
      expect(result.usage.contextWindow).toBe(8192)
      expect(result.usage.tokensPerSecond).toBe(20)
      expect(result.validation).toMatchObject({ passed: 3, failed: 0, repairAttempts: 0 })
      const requests = yield* ScriptedEngine.requests
      expect(requests).toHaveLength(3)
      for (const r of requests) expect(r.messages).toEqual([Message.system("Classify."), Message.user("I love it")])
    }).pipe(
      Effect.provide(
        env([
          reply("positive", { usage: { outputTokens: 1, tokensPerSecond: 10 } }),
          reply("NEGATIVE", { usage: { outputTokens: 1, tokensPerSecond: 20, contextWindow: 8192 } }),
          reply("positive", { usage: { outputTokens: 1, tokensPerSecond: 30 } })
        ])
      )
    ))

  it.effect("key order and whitespace do not split the vote", () =>
    Effect.gen(function* () {
      const schema = JsonSchema.object({ a: JsonSchema.number(), b: JsonSchema.number() })
      const result = yield* RedundantLoop.run("x", { schema })
      expect(result.confidence).toBe(2 / 3)
      expect(result.value).toEqual({ a: 1, b: 2 })
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply('{"a":2,"b":2}'),
          ScriptedEngine.reply('{ "b": 2, "a": 1 }'),
          ScriptedEngine.reply('{"a":1,\n "b":2}')
        ])
      )
    ))

  it.effect("replicas run concurrently: N replicas finish in one period, not N", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(RedundantLoop.run("x", { schema: Sentiment, n: 5 }))
      yield* TestClock.adjust("1 second")
      // done after one period (a sequential run would still be waiting for four more)
      expect(Option.isSome(yield* Fiber.poll(fiber))).toBe(true)
      const result = yield* Fiber.join(fiber)
      expect(result.replicas).toHaveLength(5)
      expect(result.confidence).toBe(1)
    }).pipe(Effect.provide(env(Array.from({ length: 5 }, () => reply("neutral", { delay: "1 second" }))))))

  it.effect("concurrency bounds the replicas running at once; 1 runs them one after another", () =>
    Effect.gen(function* () {
      const running = yield* Ref.make(0)
      const peak = yield* Ref.make(0)
      const slow = ScriptedEngine.respond(() =>
        Effect.gen(function* () {
          const now = yield* Ref.updateAndGet(running, (k) => k + 1)
          yield* Ref.update(peak, (p) => Math.max(p, now))
          yield* Effect.sleep("1 second")
          yield* Ref.update(running, (k) => k - 1)
          return new InferenceResult({
            content: '{"sentiment":"neutral"}',
            toolCalls: [],
            usage: TokenUsage.make({ outputTokens: 1 }),
            finishReason: "stop"
          })
        })
      )
      const runWith = (concurrency: number, seconds: number) =>
        Effect.gen(function* () {
          yield* Ref.set(peak, 0)
          const fiber = yield* Effect.fork(RedundantLoop.run("x", { schema: Sentiment, n: 4, concurrency }))
          yield* TestClock.adjust(`${seconds - 1} seconds`)
          expect(fiber.unsafePoll()).toBeNull()
          yield* TestClock.adjust("1 second")
          yield* Fiber.join(fiber)
          return yield* Ref.get(peak)
        }).pipe(Effect.provide(env([slow, slow, slow, slow])))
      expect(yield* runWith(2, 2)).toBe(2)
      expect(yield* runWith(1, 4)).toBe(1)
    }))

  it.effect("context is retrieved once from the prompt and shared by every replica", () =>
    Effect.gen(function* () {
      const calls = yield* Ref.make(0)
      const provider = Layer.succeed(ContextProvider, {
        build: (q) => Effect.as(Ref.update(calls, (k) => k + 1), [Message.system(`ctx ${q}`)])
      })
      yield* RedundantLoop.run("q", { schema: Sentiment }).pipe(Effect.provide(provider))
      expect(yield* Ref.get(calls)).toBe(1)
      for (const r of yield* ScriptedEngine.requests) {
        expect(r.messages).toEqual([Message.system("ctx q"), Message.user("q")])
      }
    }).pipe(Effect.provide(env([reply("positive"), reply("positive"), reply("positive")]))))

  it.effect("a failed replica does not sink the vote while the quorum remains", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("x", { schema: Sentiment })
      expect(result.value).toEqual({ sentiment: "negative" })
      // confidence is over the valid candidates
      expect(result.confidence).toBe(1)
      expect(result.candidates).toHaveLength(2)
      expect(result.winner).toBe(1)
      expect(result.replicas[0]).toMatchObject({ _tag: "Failed", replica: 0, failure: { code: "INFERENCE_MODEL_UNAVAILABLE" } })
      expect(result.validation).toMatchObject({ passed: 2, failed: 1 })
    }).pipe(
      Effect.provide(
        env([ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone")), reply("negative"), reply("negative")])
      )
    ))

  it.effect("usage counts every reply, also those of replicas whose output was rejected", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("x", { schema: Sentiment })
      expect(result.replicas.map((r) => r._tag)).toEqual(["Valid", "Failed", "Valid"])
      expect(result.usage.calls).toBe(3)
      expect(result.usage.outputTokens).toBe(1 + 50 + 1)
    }).pipe(
      Effect.provide(
        env([
          reply("neutral", { usage: { outputTokens: 1 } }),
          reply("furious", { usage: { outputTokens: 50 } }),
          reply("neutral", { usage: { outputTokens: 1 } })
        ])
      )
    ))

  it.effect("below the quorum: ORCHESTRATION_NO_CONSENSUS naming each failure; a lower quorum accepts", () =>
    Effect.gen(function* () {
      const script = [
        ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone")),
        ScriptedEngine.reply("{{"),
        reply("neutral")
      ]
      const failure = yield* Effect.flip(RedundantLoop.run("x", { schema: Sentiment })).pipe(Effect.provide(env(script)))
      expect(failure._tag).toBe("OrchestrationFailure")
      expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(failure.details).toMatchObject({
        valid: 1,
        quorum: 2,
        failures: [
          { replica: 0, code: "INFERENCE_MODEL_UNAVAILABLE" },
          { replica: 1, code: "CONSTRAINT_JSON_INVALID" }
        ]
      })
      const accepted = yield* RedundantLoop.run("x", { schema: Sentiment, quorum: 1 }).pipe(Effect.provide(env(script)))
      expect(accepted.value).toEqual({ sentiment: "neutral" })
      expect(accepted.confidence).toBe(1)
    }))

  it.effect("no valid replica: the replicas' own InferenceFailure", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(RedundantLoop.run("x", { schema: Sentiment, inferenceRetry: RetryPolicy.none }))
      expect(failure).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_ENGINE_ERROR" })
    }).pipe(
      Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.fail(InferenceFailure.engineError("down")))))
    ))

  it.effect("no valid replica: the replicas' own ConstraintFailure, with the raw text", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(RedundantLoop.run("x", { schema: Sentiment }))
      expect(failure).toMatchObject({
        _tag: "ConstraintFailure",
        code: "CONSTRAINT_ENUM_UNRECOGNIZED",
        raw: '{"sentiment":"happy"}'
      })
    }).pipe(Effect.provide(env([reply("happy"), reply("glad"), reply("meh")]))))

  it.effect("repair happens per replica and is counted, for rejected replicas too", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("x", { schema: Sentiment, n: 4 })
      expect(result.confidence).toBe(1)
      expect(result.validation.repairAttempts).toBe(3)
      expect(result.validation.violations).toEqual([
        'replica 3: $.sentiment: Expected "positive" | "negative" | "neutral", actual "ecstatic"'
      ])
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply("{'sentiment': 'positive'"),
          reply("positive"),
          ScriptedEngine.reply("{sentiment: positive}"),
          ScriptedEngine.reply("{'sentiment': 'ecstatic'")
        ])
      )
    ))

  it.effect("a strategy that names a candidate that does not exist is a defect, not a wrong answer", () =>
    Effect.gen(function* () {
      const broken: VotingStrategy = { name: "broken", vote: () => Effect.succeed({ winner: 7, content: "", confidence: 1 }) }
      const exit = yield* Effect.exit(RedundantLoop.run("x", { schema: Sentiment, n: 1, voting: broken }))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
    }).pipe(Effect.provide(env([reply("positive")]))))

  it.effect("UnanimityVoting refuses a split vote: ORCHESTRATION_NO_CONSENSUS naming the candidate", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(RedundantLoop.run("x", { schema: Sentiment, voting: UnanimityVoting }))
      expect(failure).toMatchObject({ code: "ORCHESTRATION_NO_CONSENSUS", details: { candidate: 2 } })
    }).pipe(Effect.provide(env([reply("positive"), reply("positive"), reply("negative")]))))

  it.effect("a replica that dies is the run's defect, never a failed replica, whether or not replies are gathered", () =>
    Effect.gen(function* () {
      const ok = new InferenceResult({ content: '{"sentiment":"positive"}', toolCalls: [], usage: TokenUsage.empty, finishReason: "stop" })
      let calls = 0
      const infer = () => Effect.suspend(() => (++calls === 2 ? Effect.dieMessage("engine bug") : Effect.succeed(ok)))
      const modelInfo = Effect.succeed(new ModelInfo({ name: "m", contextWindow: 4096, supportsGrammar: false, supportsTools: false }))
      const alone = { infer, stream: () => Stream.die("not streamed"), modelInfo }
      // without sampleMany each replica calls the engine; with it (and all replicas at once) the first replies are gathered
      const gathering = {
        ...alone,
        sampleMany: (_request: unknown, n: number) => Effect.dieMessage(`engine bug in sampleMany of ${n}`)
      }
      for (const [engine, message] of [[alone, "engine bug"], [gathering, "engine bug in sampleMany of 3"]] as const) {
        calls = 0
        const exit = yield* Effect.exit(
          RedundantLoop.run("x", { schema: Sentiment }).pipe(Effect.provideService(Engine, engine))
        )
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
        if (Exit.isFailure(exit)) expect(Cause.pretty(exit.cause)).toContain(message)
      }
    }).pipe(Effect.provide(Layer.merge(ConstraintLive.layer, Observe.eventLogMemory))))

  it.effect("a seed moves by the replica's index when replicas each call the engine", () =>
    Effect.gen(function* () {
      const seeds: Array<number | undefined> = []
      const ok = new InferenceResult({ content: '{"sentiment":"positive"}', toolCalls: [], usage: TokenUsage.empty, finishReason: "stop" })
      const engine = {
        infer: (request: InferenceRequest) => Effect.sync(() => (seeds.push(request.seed), ok)),
        stream: () => Stream.die("not streamed"),
        modelInfo: Effect.succeed(new ModelInfo({ name: "m", contextWindow: 4096, supportsGrammar: false, supportsTools: false }))
      }
      yield* RedundantLoop.run("x", { schema: Sentiment, seed: 40 }).pipe(Effect.provideService(Engine, engine))
      expect([...seeds].sort()).toEqual([40, 41, 42])
      seeds.length = 0
      yield* RedundantLoop.run("x", { schema: Sentiment }).pipe(Effect.provideService(Engine, engine))
      expect(seeds).toEqual([undefined, undefined, undefined])
    }).pipe(Effect.provide(Layer.merge(ConstraintLive.layer, Observe.eventLogMemory))))

  it.effect("timeout: CANCELLED_TIMEOUT, every replica interrupted", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(RedundantLoop.run("x", { schema: Sentiment, timeout: "2 seconds" })))
      yield* TestClock.adjust("2 seconds")
      expect(yield* Fiber.join(fiber)).toMatchObject({ _tag: "Cancellation", code: "CANCELLED_TIMEOUT" })
    }).pipe(Effect.provide(env(Array.from({ length: 3 }, () => reply("positive", { delay: "1 minute" }))))))

  it.effect("make fixes options and services; each run is independent", () =>
    Effect.gen(function* () {
      const loop = yield* RedundantLoop.make({ schema: Sentiment, n: 1 })
      expect((yield* loop.run("a")).value.sentiment).toBe("positive")
      expect((yield* loop.run("b")).value.sentiment).toBe("negative")
    }).pipe(Effect.provide(env([reply("positive"), reply("negative")]))))

  it.effect("inside a tracked request the loop moves EXECUTE -> VALIDATE once; replicas' retries stay events", () =>
    Effect.gen(function* () {
      const tracker = yield* Lifecycle.makeTracker
      yield* tracker.transition("PREPARE", "request received")
      const fiber = yield* Effect.fork(
        RedundantLoop.run("x", { schema: Sentiment, retry: RetryPolicy.exponential({ times: 1 }) }).pipe(Lifecycle.tracked(tracker))
      )
      yield* TestClock.adjust("1 minute")
      expect((yield* Fiber.join(fiber)).confidence).toBe(1)
      expect((yield* tracker.history).map((h) => `${h.from}->${h.to}`)).toEqual([
        "INIT->PREPARE",
        "PREPARE->EXECUTE",
        "EXECUTE->VALIDATE"
      ])
      expect((yield* tracker.state).attempt).toBe(1)
      const events = yield* (yield* EventLog).events
      expect(events.some((e) => e._tag === "LifecycleTransition" && e.fromState === "VALIDATE" && e.toState === "EXECUTE")).toBe(true)
    }).pipe(Effect.provide(env([ScriptedEngine.reply("nope"), reply("positive"), reply("positive"), reply("positive")]))))
})
