/**
 * RedundantLoop's seeds per replica and its sampling choice, on the scripted engine:
 * replica i's requests carry seed + i; replicas started together with identical
 * requests are drawn by one Engine.sampleMany call ("tree"), otherwise each makes
 * its own calls ("independent"); the choice is on the result and the vote event.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type * as Event from "../src/domain/Event.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as ReplicaSampling from "../src/programs/internal/ReplicaSampling.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as Engine from "../src/services/Engine.js"
import { EventLog } from "../src/services/EventLog.js"

const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })

const reply = (sentiment: string) => ScriptedEngine.reply(`{"sentiment":"${sentiment}"}`)

const env = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script, { whenExhausted: "repeat-last" }), ConstraintLive.layer, Observe.eventLogMemory)

/** The scripted engine with a native sampleMany that counts its calls (and draws by the fallback). */
const withNativeSampleMany = (calls: Array<number>) =>
  Layer.effect(
    Engine.Engine,
    Effect.map(Engine.Engine, (inner): Engine.Service => ({
      ...inner,
      sampleMany: (request, n) => {
        calls.push(n)
        return Engine.independentSamples(inner, request, n)
      }
    }))
  )

const seedsSent = Effect.map(ScriptedEngine.requests, (requests) => requests.map((r) => r.seed))

const voteEvent = Effect.flatMap(EventLog, (log) => log.events).pipe(
  Effect.map((events) => events.find((e): e is Event.Custom => e._tag === "Custom" && e.action === "vote"))
)

describe("TreeVote: seeds per replica", () => {
  it.effect("with a seed, replica i asks with seed + i; the replicas' requests differ only there", () =>
    Effect.gen(function* () {
      yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 3, seed: 41 })
      expect([...(yield* seedsSent)].sort()).toEqual([41, 42, 43])
    }).pipe(Effect.provide(env([reply("positive")]))))

  it.effect("without a seed, no replica gets one (the engine draws its own)", () =>
    Effect.gen(function* () {
      yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 3 })
      expect(yield* seedsSent).toEqual([undefined, undefined, undefined])
    }).pipe(Effect.provide(env([reply("positive")]))))

  it.effect("replicas run one after another are seeded the same way, in replica order", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 3, seed: -5, concurrency: 1 })
      expect(yield* seedsSent).toEqual([-5, -4, -3])
      expect(result.sampling).toBe("independent")
    }).pipe(Effect.provide(env([reply("positive")]))))

  it.effect("a replica's retry keeps its own seed", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", {
        schema: Sentiment,
        n: 2,
        seed: 10,
        concurrency: 1,
        retry: Schedule.recurs(1)
      })
      expect(result.replicas.map((r) => r._tag)).toEqual(["Valid", "Valid"])
      expect(yield* seedsSent).toEqual([10, 10, 11])
    }).pipe(Effect.provide(env([reply("furious"), reply("positive")]))))
})

describe("TreeVote: Engine.sampleMany", () => {
  it.effect("an engine without its own (the scripted one): n concurrent infers, sample i seeded seed + i, one outcome each", () =>
    Effect.gen(function* () {
      const engine = yield* Engine.Engine
      expect(engine.sampleMany).toBeUndefined()
      const outcomes = yield* Engine.sampleMany(engine, new Engine.InferenceRequest({ messages: [], seed: 5 }), 3)
      expect(outcomes.map((o) => o._tag)).toEqual(["Right", "Left", "Right"])
      expect([...(yield* seedsSent)].sort()).toEqual([5, 6, 7])
      const unseeded = yield* Engine.sampleMany(engine, new Engine.InferenceRequest({ messages: [] }), 2)
      expect(unseeded).toHaveLength(2)
      expect((yield* seedsSent).slice(3)).toEqual([undefined, undefined])
    }).pipe(
      Effect.provide(
        env([reply("positive"), ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone")), reply("negative")])
      )
    ))
})

describe("TreeVote: sampling choice", () => {
  it.effect("replicas started together with identical requests: one sampleMany call of N, 'tree' on the result and the vote event", () => {
    const calls: Array<number> = []
    return Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 5, seed: 3 })
      expect(calls).toEqual([5])
      expect(result.sampling).toBe("tree")
      expect([...(yield* seedsSent)].sort()).toEqual([3, 4, 5, 6, 7])
      expect((yield* voteEvent)?.data["sampling"]).toBe("tree")
    }).pipe(Effect.provide(Layer.provideMerge(withNativeSampleMany(calls), env([reply("positive")]))))
  })

  it.effect("replicas not started together (concurrency < N): each its own calls, 'independent', no sampleMany", () => {
    const calls: Array<number> = []
    return Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 4, concurrency: 2 })
      expect(calls).toEqual([])
      expect(result.sampling).toBe("independent")
      expect((yield* voteEvent)?.data["sampling"]).toBe("independent")
    }).pipe(Effect.provide(Layer.provideMerge(withNativeSampleMany(calls), env([reply("positive")]))))
  })

  it.effect("an engine without its own sampleMany: replicas call it independently, 'independent'", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", { schema: Sentiment, n: 3, seed: 0 })
      expect(result.sampling).toBe("independent")
      expect(result.candidates).toEqual(['{"sentiment":"positive"}', '{"sentiment":"negative"}', '{"sentiment":"positive"}'])
      expect([...(yield* seedsSent)].sort()).toEqual([0, 1, 2])
    }).pipe(Effect.provide(env([reply("positive"), reply("negative"), reply("positive")]))))

  it.effect("a failed sample fails only its replica; a retry after a tree draw is the replica's own call", () => {
    const calls: Array<number> = []
    return Effect.gen(function* () {
      const result = yield* RedundantLoop.run("I love it", {
        schema: Sentiment,
        n: 3,
        seed: 20,
        retry: Schedule.recurs(1)
      })
      expect(calls).toEqual([3])
      expect(result.sampling).toBe("tree")
      expect(result.replicas.map((r) => r._tag)).toEqual(["Valid", "Failed", "Valid"])
      // three first requests, then replica 2's retry alone, with its own seed
      const seeds = yield* seedsSent
      expect(seeds).toHaveLength(4)
      expect(seeds[3]).toBe(22)
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          withNativeSampleMany(calls),
          env([
            reply("positive"),
            ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone")),
            reply("furious"),
            reply("positive")
          ])
        )
      )
    )
  })

  it.effect("a timeout during a tree draw: CANCELLED_TIMEOUT, the draw interrupted, no replica left waiting", () => {
    const calls: Array<number> = []
    return Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(RedundantLoop.run("x", { schema: Sentiment, n: 3, timeout: "2 seconds" })))
      yield* TestClock.adjust("2 seconds")
      const failure = yield* Fiber.join(fiber)
      expect([failure._tag, failure.code]).toEqual(["Cancellation", "CANCELLED_TIMEOUT"])
      expect(calls).toEqual([3])
    }).pipe(
      Effect.provide(Layer.provideMerge(withNativeSampleMany(calls), env([ScriptedEngine.reply(`{"sentiment":"positive"}`, { delay: "1 minute" })])))
    )
  })

  it.effect("a tree draw that fails as a whole fails each replica with its failure", () =>
    Effect.gen(function* () {
      const failing = Layer.effect(
        Engine.Engine,
        Effect.map(Engine.Engine, (inner): Engine.Service => ({
          ...inner,
          sampleMany: () => InferenceFailure.modelUnavailable("no model")
        }))
      )
      const failure = yield* Effect.flip(
        RedundantLoop.run("x", { schema: Sentiment, n: 3 }).pipe(Effect.provide(Layer.provideMerge(failing, env([reply("positive")]))))
      )
      expect(failure).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_MODEL_UNAVAILABLE" })
    }))

  it.effect("first requests that differ beyond the seed are not drawn together", () =>
    Effect.gen(function* () {
      const calls: Array<number> = []
      const inner = yield* Engine.Engine
      const engine: Engine.Service = {
        ...inner,
        sampleMany: (request, n) => {
          calls.push(n)
          return Engine.independentSamples(inner, request, n)
        }
      }
      const draw = yield* ReplicaSampling.make(engine, 2, 7, true)
      const ask = (index: number, temperature: number) =>
        draw.engineFor(index).infer(new Engine.InferenceRequest({ messages: [], temperature }))
      yield* Effect.all([ask(0, 0.5), ask(1, 0.9)], { concurrency: "unbounded" })
      expect(calls).toEqual([])
      expect(yield* draw.sampling).toBe("independent")
      expect((yield* ScriptedEngine.requests).map((r) => [r.temperature, r.seed]).sort()).toEqual([[0.5, 7], [0.9, 8]])
    }).pipe(Effect.provide(env([reply("positive")]))))

  it.effect("a replica that ends without asking does not keep the others waiting", () =>
    Effect.gen(function* () {
      const inner = yield* Engine.Engine
      const engine: Engine.Service = { ...inner, sampleMany: (request, n) => Engine.independentSamples(inner, request, n) }
      const draw = yield* ReplicaSampling.make(engine, 3, undefined, true)
      const ask = (index: number) => draw.engineFor(index).infer(new Engine.InferenceRequest({ messages: [] }))
      const results = yield* Effect.all([ask(0), ask(1), draw.ended(2)], { concurrency: "unbounded" })
      expect(results[0].content).toBe('{"sentiment":"positive"}')
      expect(yield* draw.sampling).toBe("independent")
    }).pipe(Effect.provide(env([reply("positive")])), Effect.timeout("5 seconds")))
})
