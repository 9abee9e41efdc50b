/**
 * LlamaEngine.sampleMany on the bundled model: N samples of one request drawn as
 * a prefix tree. Samples are valid answers of the request's schema with their own
 * usage; a seed makes them reproducible (sample i seeded seed + i) and they are
 * not all the same at temperature 1; requests the tree does not serve (tools) are
 * drawn by independent infers; an interrupted draw gives every sequence back.
 * RedundantLoop on the bundled model: seeded replicas differ and replay exactly.
 * Each call is bounded by maxTokens, the file by vitest's timeout.
 */
import { expect, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Message from "../src/domain/Message.js"
import { ToolDefinition } from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import * as EngineModule from "../src/services/Engine.js"
import { IdGenerator } from "../src/services/IdGenerator.js"

const SENTIMENT = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
} as const
const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })

/** A review the bundled model is split on (about half positive, half negative at temperature 2). */
const SPLIT = "Hmm."

const ask = (review: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({
    messages: [Message.system("Classify the sentiment of the review."), Message.user(review)],
    schema: SENTIMENT as never,
    maxTokens: 24,
    ...fields
  })

const contents = (outcomes: ReadonlyArray<Either.Either<EngineModule.InferenceResult, unknown>>) =>
  outcomes.map((o) => (Either.isRight(o) ? o.right.content : `failed: ${String(o.left)}`))

layer(Layer.mergeAll(Layer.provideMerge(LlamaEngine.layer({ sequences: 6 }), IdGenerator.Test), ConstraintLive.layer), {
  excludeTestServices: true
})("LlamaEngine.sampleMany on the bundled model", (it) => {
  it.effect("N samples, each a valid answer of the schema with its own usage", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      expect(engine.sampleMany).toBeDefined()
      const outcomes = yield* EngineModule.sampleMany(engine, ask(SPLIT, { temperature: 1, seed: 7 }), 5)
      expect(outcomes).toHaveLength(5)
      for (const outcome of outcomes) {
        const result = Either.getOrThrow(outcome)
        expect(Schema.decodeUnknownSync(Sentiment)(JSON.parse(result.content))).toBeDefined()
        expect(result.finishReason).toBe("stop")
        expect(result.usage.outputTokens).toBeGreaterThan(0)
        expect(result.usage.calls).toBe(1)
      }
      // the prompt is evaluated once, for the first sample; the others share it
      const prompts = outcomes.map((o) => Either.getOrThrow(o).usage.promptTokens)
      expect(prompts.slice(1)).toEqual([0, 0, 0, 0])
    }), 60_000)

  it.effect("a seed reproduces the N samples; at temperature 1 they are not all the same; sample i is seed + i", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const first = contents(yield* EngineModule.sampleMany(engine, ask(SPLIT, { temperature: 1, seed: 11 }), 6))
      const again = contents(yield* EngineModule.sampleMany(engine, ask(SPLIT, { temperature: 1, seed: 11 }), 6))
      expect(again).toEqual(first)
      expect(new Set(first).size).toBeGreaterThan(1)
      // sample i is seeded seed + i: the draw at seed 12 is the first one moved by one
      const shifted = contents(yield* EngineModule.sampleMany(engine, ask(SPLIT, { temperature: 1, seed: 12 }), 5))
      expect(shifted).toEqual(first.slice(1))
    }), 60_000)

  it.effect("temperature 0: every sample is the greedy answer, which infer gives too, with the same output tokens", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const greedy = yield* engine.infer(ask(SPLIT, { temperature: 0 }))
      const drawn = yield* EngineModule.sampleMany(engine, ask(SPLIT, { temperature: 0 }), 4)
      expect(contents(drawn)).toEqual([greedy.content, greedy.content, greedy.content, greedy.content])
      // each sample's output tokens counted as infer counts them (the end token included)
      for (const o of drawn) expect(Either.getOrThrow(o).usage.outputTokens).toBe(greedy.usage.outputTokens)
    }), 60_000)

  it.effect("a request with tools is drawn by independent infers (same contract)", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const tools = [new ToolDefinition({ name: "lookup", description: "Look a word up.", parameters: { type: "object", properties: { word: { type: "string" } } } })]
      const outcomes = yield* EngineModule.sampleMany(
        engine,
        new InferenceRequest({ messages: [Message.user("Hello")], tools, maxTokens: 8, temperature: 1, seed: 3 }),
        2
      )
      expect(outcomes).toHaveLength(2)
      // independent infers report each their own prompt
      for (const o of outcomes) expect(Either.getOrThrow(o).usage.promptTokens).toBeGreaterThanOrEqual(0)
    }), 60_000)

  it.effect("interrupted mid-draw, every sequence comes back: six infers at once still run", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const long = new InferenceRequest({ messages: [Message.user("Tell me a story.")], maxTokens: 400, temperature: 1, seed: 1 })
      const fiber = yield* Effect.fork(EngineModule.sampleMany(engine, long, 6))
      yield* Effect.sleep("150 millis")
      yield* Fiber.interrupt(fiber)
      const after = yield* Effect.forEach(
        [0, 1, 2, 3, 4, 5],
        (i) => engine.infer(new InferenceRequest({ messages: [Message.user("Hi")], maxTokens: 4, seed: i })),
        { concurrency: "unbounded" }
      ).pipe(Effect.timeout("30 seconds"))
      expect(after).toHaveLength(6)
    }), 60_000)

  it.effect("RedundantLoop N=5 with a seed at temperature 1: replicas differ, drawn by the tree; re-running gives the same five", () =>
    Effect.gen(function*() {
      const vote = RedundantLoop.run(SPLIT, {
        schema: Sentiment,
        systemPrompt: "Classify the sentiment of the review.",
        n: 5,
        quorum: 1,
        temperature: 1,
        seed: 11
      })
      const first = yield* vote
      const again = yield* vote
      expect(first.sampling).toBe("tree")
      expect(first.replicas.map((r) => r._tag)).toEqual(["Valid", "Valid", "Valid", "Valid", "Valid"])
      expect(new Set(first.candidates).size).toBeGreaterThan(1)
      expect(again.candidates).toEqual(first.candidates)
      // one after another (independent calls), the same seeds give answers of the same request
      const sequential = yield* RedundantLoop.run(SPLIT, {
        schema: Sentiment,
        systemPrompt: "Classify the sentiment of the review.",
        n: 5,
        quorum: 1,
        temperature: 1,
        seed: 11,
        concurrency: 1
      })
      expect(sequential.sampling).toBe("independent")
      expect(new Set(sequential.candidates).size).toBeGreaterThan(1)
    }), 120_000)
})
