/**
 * Prompt sharing between sequences, on the real bundled model: concurrent replicas
 * of one long prompt evaluate it once and copy it, a request copies the prefix a
 * busy sequence holds, and neither changes a single answer (greedy decoding with
 * and without sharing agree token for token).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type { InferenceResult } from "../src/services/Engine.js"

const SENTIMENT = {
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
} as const

/** A review of about 200 tokens: long enough that copying it beats evaluating it. */
const review = (key: string) =>
  `Classify the sentiment of the review: (${key}) ` +
  "The food was cold and the waiter was rude, but the view over the harbour was lovely. ".repeat(6) +
  "In the end I would not come back."

const ask = (key: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({
    messages: [Message.system("Classify the sentiment of the review."), Message.user(review(key))],
    temperature: 0,
    maxTokens: 24,
    ...fields
  })

/** Free text, greedy: the most sensitive check that the copied cells are the right ones. */
const freeText = (key: string) =>
  ask(key, {
    messages: [Message.system("You are a helpful assistant."), Message.user(`Describe the place. ${review(key)}`)],
    maxTokens: 32
  })
const json = (key: string) => ask(key, { schema: SENTIMENT })

/** Two engines on the same model file: one sharing prompts, one not. */
const both = <A, E>(
  use: (shared: Engine["Type"], unshared: Engine["Type"]) => Effect.Effect<A, E>
) =>
  Effect.gen(function*() {
    const build = (options: LlamaEngine.Options) => Effect.map(Layer.build(LlamaEngine.layer(options)), Context.get(Engine))
    const shared = yield* build({ sequences: 4, contextSize: 1024 })
    const unshared = yield* build({ sequences: 4, contextSize: 1024, shareMinTokens: 0 })
    return yield* use(shared, unshared)
  }).pipe(Effect.scoped)

const contents = (results: ReadonlyArray<InferenceResult>) => results.map((r) => r.content)

describe("LlamaEngine prompt sharing (bundled model)", () => {
  it.live("replicas of one long prompt evaluate it once; answers equal the unshared engine's", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        for (const make of [freeText, json]) {
          const replicas = (engine: Engine["Type"]) =>
            Effect.all(Array.from({ length: 4 }, () => engine.infer(make(`replicas ${make === json}`))), {
              concurrency: "unbounded"
            })
          const withSharing = yield* replicas(shared)
          const without = yield* replicas(unshared)
          expect(contents(withSharing)).toEqual(contents(without))
          const promptTokens = without[0]!.usage.promptTokens
          expect(promptTokens).toBeGreaterThan(150)
          // Without sharing every replica evaluates the whole prompt; with it, one does.
          expect(without.every((r) => r.usage.promptTokens === promptTokens)).toBe(true)
          const evaluated = withSharing.map((r) => r.usage.promptTokens).sort((a, b) => b - a)
          expect(evaluated[0]).toBeGreaterThanOrEqual(promptTokens - 1)
          expect(evaluated.slice(1).every((n) => n < 8)).toBe(true)
        }
      })
    ), 60_000)

  const system = Message.system(`You are a careful assistant. ${"Answer in one short sentence. ".repeat(20)}`)
  const question = (text: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
    new InferenceRequest({ messages: [system, Message.user(text)], temperature: 0, maxTokens: 24, ...fields })

  it.live("a request copies the prefix another sequence holds, and answers as if it had evaluated it", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        // Session "a" keeps its sequence, so session "b" lands on another one and
        // finds the shared system prompt in a's sequence.
        yield* shared.infer(question("Tell me a story.", { sessionKey: "a" }))
        const answer = yield* shared.infer(question("What is 2 plus 2?", { sessionKey: "b" }))
        const alone = yield* unshared.infer(question("What is 2 plus 2?"))
        expect(answer.content).toBe(alone.content)
        expect(alone.usage.promptTokens).toBeGreaterThan(100)
        expect(answer.usage.promptTokens).toBeLessThan(alone.usage.promptTokens - 32)
      })
    ), 60_000)

  it.live("requests that share a system prompt with a running generation answer as if alone", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        const busy = yield* Effect.fork(
          shared.infer(question("Tell me a story.", { grammar: "root ::= [a-z] root", maxTokens: 200, temperature: undefined }))
        )
        yield* Effect.sleep("20 millis")
        const answers = yield* Effect.all(
          ["What is 2 plus 2?", "Name a colour.", "Say hello."].map((text) => shared.infer(question(text))),
          { concurrency: "unbounded" }
        )
        yield* Fiber.join(busy)
        const alone = yield* Effect.forEach(["What is 2 plus 2?", "Name a colour.", "Say hello."], (text) =>
          unshared.infer(question(text)))
        expect(contents(answers)).toEqual(contents(alone))
      })
    ), 60_000)

  it.live("an interrupted leader does not strand its followers", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        const fibers = yield* Effect.forEach(
          Array.from({ length: 3 }, () => shared.infer(freeText("interrupted"))),
          (effect) => Effect.fork(effect)
        )
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(fibers[0]!)
        const rest = yield* Fiber.joinAll(fibers.slice(1))
        const expected = yield* unshared.infer(freeText("interrupted"))
        expect(contents(rest)).toEqual([expected.content, expected.content])
        // And the engine still serves: its sequences are all back in the pool.
        const again = yield* Effect.all(Array.from({ length: 4 }, () => shared.infer(json("after"))), {
          concurrency: "unbounded"
        })
        expect(again).toHaveLength(4)
      })
    ), 60_000)

  it.live("a mixed concurrent load gives the same greedy answers with and without sharing", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        // Long and short prompts over shared system prompts, free text and JSON, some
        // in sessions, all at once on 4 sequences: copies from busy, idle and leading
        // sequences interleave with ordinary prefix reuse.
        const systems = [
          "Classify the sentiment of the review.",
          `You are a careful assistant. ${"Answer in one short sentence. ".repeat(20)}`
        ]
        const requests = Array.from({ length: 16 }, (_, i) => {
          const system = Message.system(systems[i % 2]!)
          const text = i % 3 === 0 ? review(`mixed ${i % 4}`) : `Question ${i % 5}: what is ${i} plus ${i + 1}?`
          return new InferenceRequest({
            messages: [system, Message.user(text)],
            temperature: 0,
            maxTokens: 8 + (i % 4) * 8,
            ...(i % 4 === 1 ? { schema: SENTIMENT } : {}),
            ...(i % 5 === 2 ? { sessionKey: `session ${i % 3}` } : {})
          })
        })
        const run = (engine: Engine["Type"]) =>
          Effect.forEach(requests, (request) => engine.infer(request), { concurrency: "unbounded" })
        const withSharing = yield* run(shared)
        const without = yield* run(unshared)
        // Token totals depend on which sequence happens to be free when (timing), so
        // the savings are asserted in the controlled cases above; here, correctness.
        expect(contents(withSharing)).toEqual(contents(without))
      })
    ), 120_000)
})
