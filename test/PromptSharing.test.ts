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
import { getLlama } from "node-llama-cpp"
import type { Token } from "node-llama-cpp"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as PromptSharing from "../src/layers/llama/PromptSharing.js"
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

  it.live("replicas of a short prompt started together evaluate it once; answers equal the unshared engine's", () =>
    both((shared, unshared) =>
      Effect.gen(function*() {
        const short = () => question("Name a colour.", { messages: [Message.user("Name a colour.")] })
        const replicas = (engine: Engine["Type"]) =>
          Effect.all(Array.from({ length: 4 }, () => engine.infer(short())), { concurrency: "unbounded" })
        const withSharing = yield* replicas(shared)
        const without = yield* replicas(unshared)
        expect(contents(withSharing)).toEqual(contents(without))
        const promptTokens = without[0]!.usage.promptTokens
        // Shorter than the copy threshold for a sequence at rest: only arriving together shares it.
        expect(promptTokens).toBeGreaterThan(2)
        expect(promptTokens).toBeLessThan(PromptSharing.DEFAULT_MIN_TOKENS)
        expect(without.every((r) => r.usage.promptTokens === promptTokens)).toBe(true)
        const evaluated = withSharing.map((r) => r.usage.promptTokens).sort((a, b) => b - a)
        expect(evaluated[0]).toBeGreaterThanOrEqual(promptTokens - 1)
        // The followers copied it: at most the last prompt token is theirs to evaluate.
        expect(evaluated.slice(1).every((n) => n <= 1)).toBe(true)
      })
    ), 60_000)
})

describe("PromptSharing on short prompts (bundled model's sequences)", () => {
  /** Three sequences of one context, and a sharing over them with the default threshold. */
  const sequences = Effect.gen(function*() {
    const llama = yield* Effect.acquireRelease(
      Effect.promise(() => getLlama({ gpu: false, build: "never", maxThreads: 1 })),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const model = yield* Effect.acquireRelease(
      Effect.promise(() => llama.loadModel({ modelPath: LlamaEngine.bundledModelPath(), gpuLayers: 0 })),
      (model) => Effect.promise(() => model.dispose())
    )
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => model.createContext({ sequences: 3, contextSize: 512, threads: 1 })),
      (context) => Effect.promise(() => context.dispose())
    )
    const all = [context.getSequence(), context.getSequence(), context.getSequence()]
    return { model, all, sharing: PromptSharing.make(all, { minTokens: PromptSharing.DEFAULT_MIN_TOKENS }) }
  })

  it.live("heldPrefix is the common prefix of the sequence's tokens and the prompt, whatever their lengths", () =>
    Effect.gen(function*() {
      const { all, model } = yield* sequences
      const tokens = model.tokenize("Name a colour, please, and then name a fruit.")
      const empty = all[1]!
      yield* Effect.promise(() => all[0]!.evaluateWithoutGeneratingNewTokens(tokens))
      const diverging = [...tokens.slice(0, 4), (tokens[4]! + 1) as Token, ...tokens.slice(5)]
      for (const sequence of [all[0]!, empty]) {
        for (const prompt of [tokens, tokens.slice(0, 3), [...tokens, ...tokens], diverging, []]) {
          expect(PromptSharing.heldPrefix(sequence, prompt)).toBe(PromptSharing.commonPrefixLength(sequence.contextTokens, prompt))
        }
      }
      expect(PromptSharing.heldPrefix(all[0]!, diverging)).toBe(4)
      expect(PromptSharing.heldPrefix(all[0]!, [...tokens, ...tokens])).toBe(tokens.length)
      expect(PromptSharing.heldPrefix(all[0]!, tokens.slice(0, 3))).toBe(3)
      expect(PromptSharing.heldPrefix(empty, tokens)).toBe(0)
    }).pipe(Effect.scoped), 60_000)

  it.live("a request alone leaves its short prompt to the generation (one decode, no leader)", () =>
    Effect.gen(function*() {
      const { all, model, sharing } = yield* sequences
      const prompt = model.tokenize("Name a colour, please.")
      const outcome = yield* sharing.prepare(all[0]!, prompt)
      expect(outcome).toEqual({ _tag: "Held", tokens: 0 })
      expect(all[0]!.contextTokens).toEqual([])
    }).pipe(Effect.scoped), 60_000)

  it.live("identical short prompts arriving together: one leads, the others wait and copy", () =>
    Effect.gen(function*() {
      const { all, model, sharing } = yield* sequences
      const prompt = model.tokenize("Name a colour, please.")
      const outcomes = yield* Effect.all(all.map((sequence) => sharing.prepare(sequence, prompt)), {
        concurrency: "unbounded"
      })
      const wanted = prompt.length - 1
      expect(outcomes).toEqual([
        { _tag: "Led", tokens: wanted },
        { _tag: "Copied", tokens: wanted, waited: true },
        { _tag: "Copied", tokens: wanted, waited: true }
      ])
      for (const sequence of all) expect(sequence.contextTokens).toEqual(prompt.slice(0, wanted))
    }).pipe(Effect.scoped), 60_000)

  it.live("different short prompts arriving together are each left to their generation", () =>
    Effect.gen(function*() {
      const { all, model, sharing } = yield* sequences
      const prompts = ["Name a colour.", "Name a fruit.", "Name a tree."].map((text) => model.tokenize(text))
      const outcomes = yield* Effect.all(all.map((sequence, i) => sharing.prepare(sequence, prompts[i]!)), {
        concurrency: "unbounded"
      })
      expect(outcomes.map((o) => o._tag)).toEqual(["Held", "Held", "Held"])
    }).pipe(Effect.scoped), 60_000)

  it.live("a follower interrupted while gathering neither strands the leader nor the other follower", () =>
    Effect.gen(function*() {
      const { all, model, sharing } = yield* sequences
      const prompt = model.tokenize("Name a colour, please.")
      const fibers = yield* Effect.forEach(all, (sequence) => Effect.fork(sharing.prepare(sequence, prompt)))
      yield* Fiber.interrupt(fibers[1]!)
      const [first, third] = yield* Effect.all([Fiber.join(fibers[0]!), Fiber.join(fibers[2]!)]).pipe(
        Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("a sharer waits in vain") })
      )
      expect(first._tag).toBe("Led")
      expect(third).toEqual({ _tag: "Copied", tokens: prompt.length - 1, waited: true })
    }).pipe(Effect.scoped), 60_000)
})
