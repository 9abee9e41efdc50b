/**
 * Which sampling path a llama.cpp generation takes, on the bundled model: the
 * grammar-first path (exact constrained distribution, a confidence per token) only
 * when it samples under a grammar or the function-call syntax; greedy decoding and
 * unconstrained sampling, which draw the same tokens either way, take
 * node-llama-cpp's own. The distribution itself is test/SampleManyDistribution's.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { LlamaContextSequence } from "node-llama-cpp"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as Generation from "../src/layers/llama/Generation.js"
import * as Grammars from "../src/layers/llama/Grammars.js"
import * as Resources from "../src/layers/llama/Resources.js"
import { InferenceRequest } from "../src/services/Engine.js"

const SENTIMENT = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
} as const

const loaded = Resources.acquire({ modelPath: LlamaEngine.bundledModelPath(), threads: 1, sequences: 1, gpu: false, contextSize: 512 })

const ask = (fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]>) =>
  new InferenceRequest({
    messages: [Message.system("Classify the sentiment of the review."), Message.user("The soup was cold.")],
    maxTokens: 12,
    ...fields
  })

const add = new Message.ToolDefinition({
  name: "add",
  description: "Adds two numbers",
  parameters: { type: "object", properties: { a: { type: "number" } }, required: ["a"] }
})

/** How many times the sequence was asked for tokens with their confidence (the grammar-first path). */
const countingMetadata = (sequence: LlamaContextSequence) => {
  const counter = { calls: 0 }
  const original = sequence.evaluateWithMetadata.bind(sequence)
  Object.defineProperty(sequence, "evaluateWithMetadata", {
    value: (...args: Parameters<LlamaContextSequence["evaluateWithMetadata"]>) => {
      if (args[1]?.confidence === true) counter.calls++
      return original(...args)
    },
    configurable: true,
    writable: true
  })
  return counter
}

describe("grammar sampling path (bundled model)", () => {
  it.scoped("a plan is constrained only when it samples under a grammar or tools", () =>
    Effect.gen(function*() {
      const resources = yield* loaded
      const grammars = Grammars.make(resources.llama)
      const constrained = (request: InferenceRequest) =>
        Effect.map(Generation.plan(resources, grammars, request), (planned) =>
          "constrained" in planned ? planned.constrained : "answered")
      expect(yield* constrained(ask({ schema: SENTIMENT, temperature: 0.8 }))).toBe(true)
      expect(yield* constrained(ask({ grammar: 'root ::= "yes" | "no"', temperature: 1 }))).toBe(true)
      expect(yield* constrained(ask({ tools: [add], temperature: 0.5 }))).toBe(true)
      expect(yield* constrained(ask({ schema: SENTIMENT, temperature: 0 }))).toBe(false)
      expect(yield* constrained(ask({ schema: SENTIMENT }))).toBe(false)
      expect(yield* constrained(ask({ temperature: 0.8 }))).toBe(false)
    }), 60_000)

  it.scoped("a seed: the request's, else one drawn per call that samples; greedy decoding draws none", () =>
    Effect.gen(function*() {
      const resources = yield* loaded
      const grammars = Grammars.make(resources.llama)
      const seedOf = (request: InferenceRequest) =>
        Effect.map(Generation.plan(resources, grammars, request), (planned) =>
          "options" in planned ? planned.options.seed : "answered")
      expect(yield* seedOf(ask({}))).toBeUndefined()
      expect(yield* seedOf(ask({ temperature: 0 }))).toBeUndefined()
      expect(yield* seedOf(ask({ seed: 7 }))).toBe(7)
      expect(yield* seedOf(ask({ temperature: 0.8, seed: -1 }))).toBe(Generation.samplerSeed(-1))
      const drawn = yield* seedOf(ask({ temperature: 0.8 }))
      expect(typeof drawn).toBe("number")
      // each sampling call its own seed (two equal draws of 2^31 are a 1 in 2 billion chance)
      expect(yield* seedOf(ask({ temperature: 0.8 }))).not.toBe(drawn)
    }), 60_000)

  it.scoped("the generation takes the grammar-first path exactly when its plan is constrained; greedy answers agree", () =>
    Effect.gen(function*() {
      const resources = yield* loaded
      const grammars = Grammars.make(resources.llama)
      const metadata = yield* resources.pool.withSlot(undefined, () => 0, (slot) =>
        Effect.succeed(countingMetadata(slot.value.sequence)))
      const run = (request: InferenceRequest) =>
        Generation.run(resources, grammars, Effect.succeed("call"), request, undefined)

      const sampled = yield* run(ask({ schema: SENTIMENT, temperature: 0.8, seed: 3 }))
      expect(Schema.decodeUnknownSync(Schema.parseJson())(sampled.content)).toHaveProperty("sentiment")
      const afterSampled = metadata.calls
      expect(afterSampled).toBeGreaterThan(0)

      const greedy = yield* run(ask({ schema: SENTIMENT, temperature: 0 }))
      const free = yield* run(ask({ temperature: 0.8, seed: 3 }))
      expect(metadata.calls).toBe(afterSampled)

      // Greedy under the schema draws what the grammar-first path draws.
      const slot = yield* resources.pool.withSlot(undefined, () => 0, (s) => Effect.succeed(s.value))
      slot.sampling.constrained = true
      const forced = Resources.sampleGrammarFirst(slot.sequence, () => true)
      expect(forced).toBe(slot.sequence)
      const greedyExact = yield* Effect.promise(() =>
        slot.chat.generateResponse([
          { type: "system", text: "Classify the sentiment of the review." },
          { type: "user", text: "The soup was cold." },
          { type: "model", response: [] }
        ], { maxTokens: 12, grammar: Effect.runSync(grammars.schema(SENTIMENT)) })
      )
      expect(metadata.calls).toBeGreaterThan(afterSampled)
      expect(greedyExact.response).toBe(greedy.content)
      expect(free.content.length).toBeGreaterThan(0)
    }), 60_000)
})
