/**
 * The sampling controls on the real bundled model (models/pagantic-tiny.gguf)
 * through the LlamaEngine layer: stop texts cut the answer, a seed makes a
 * temperature-1 answer reproducible, presence and frequency penalties change what
 * is generated, and logprobs are real: one per generated token, finite, at most 0,
 * the alternatives sorted, and at temperature 0 the chosen token is the most
 * likely one. Every call is bounded by maxTokens and the file by vitest's timeout.
 *
 * The prompts are ones the tiny model answers at length and with some spread
 * ("What is 2+2?" comes back as a tool call written out and then repeated, which
 * is what the penalties act on); the assertions hold whatever the exact words.
 */
import { expect, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import type { StreamPart } from "../src/services/Engine.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import { IdGenerator } from "../src/services/IdGenerator.js"

const ask = (prompt: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({ messages: [Message.user(prompt)], ...fields })

/** Answered greedily as a written-out tool call, then " is ..." repeated until maxTokens. */
const ARITHMETIC = "What is 2+2?"
/** Answered at temperature 1 with one of several texts, depending on the draw. */
const STORY = "Tell me a story."

const finishOf = (parts: ReadonlyArray<StreamPart>) => {
  const last = parts.at(-1)
  if (last?._tag !== "Finish") throw new Error("the stream did not end with Finish")
  return last.result
}

layer(Layer.provideMerge(LlamaEngine.layer({ sequences: 3 }), IdGenerator.Test), { excludeTestServices: true })(
  "sampling controls on the bundled model",
  (it) => {
    it.effect("stop: the answer ends before the first stop text, which never appears; finish reason stop", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const whole = yield* engine.infer(ask(ARITHMETIC, { temperature: 0, maxTokens: 40 }))
        // the greedy answer holds " is" after the written-out call
        const at = whole.content.indexOf(" is")
        expect(at).toBeGreaterThan(0)

        const cut = yield* engine.infer(ask(ARITHMETIC, { temperature: 0, maxTokens: 40, stop: [" is", "never there"] }))
        expect(cut.content).toBe(whole.content.slice(0, at))
        expect(cut.content).not.toContain(" is")
        expect(cut.finishReason).toBe("stop")

        // streamed: no delta carries the stop text or anything after it
        const parts = Chunk.toReadonlyArray(
          yield* Stream.runCollect(engine.stream(ask(ARITHMETIC, { temperature: 0, maxTokens: 40, stop: ["tool_call>"] })))
        )
        const streamed = parts.flatMap((part) => (part._tag === "TextDelta" ? [part.text] : [])).join("")
        expect(streamed).toBe("<")
        expect(finishOf(parts)).toMatchObject({ content: "<", finishReason: "stop" })
      }))

    it.effect("seed: the same seed at temperature 1 gives the same text, also at once; different seeds differ", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const sample = (seed: number) =>
          Effect.map(engine.infer(ask(STORY, { temperature: 1, seed, maxTokens: 30 })), (r) => r.content)
        const seeds = [1, 2, 3, 4, 5, 6, 7, 8]
        const first = yield* Effect.forEach(seeds, sample)
        const again = yield* Effect.forEach(seeds, sample)
        expect(again).toEqual(first)
        // three at once on parallel sequences, decoded in shared batches
        const together = yield* Effect.all(seeds.slice(0, 3).map(sample), { concurrency: "unbounded" })
        expect(together).toEqual(first.slice(0, 3))
        expect(new Set(first).size).toBeGreaterThan(1)
      }))

    it.effect("any integer seed is reproducible: -1 and 2^32 - 1 (llama.cpp's 'random seed') too", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const sample = (seed: number) =>
          Effect.map(engine.infer(ask(STORY, { temperature: 1, seed, maxTokens: 30 })), (r) => r.content)
        for (const seed of [-1, 2 ** 32 - 1, -(2 ** 40), Number.MAX_SAFE_INTEGER]) {
          const draws = yield* Effect.forEach([1, 2, 3, 4, 5, 6], () => sample(seed))
          expect(new Set(draws).size).toBe(1)
        }
      }))

    it.effect("penalties reach llama.cpp: positive and negative ones each change the greedy answer", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const answer = (fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]>) =>
          Effect.map(engine.infer(ask(ARITHMETIC, { temperature: 0, maxTokens: 60, ...fields })), (r) => r.content)
        const plain = yield* answer({})
        expect(yield* answer({})).toBe(plain)
        const discouraged = yield* answer({ presencePenalty: 2, frequencyPenalty: 2 })
        const encouraged = yield* answer({ presencePenalty: -2, frequencyPenalty: -2 })
        const presenceOnly = yield* answer({ presencePenalty: 2 })
        const frequencyOnly = yield* answer({ frequencyPenalty: 2 })
        for (const changed of [discouraged, encouraged, presenceOnly, frequencyOnly]) expect(changed).not.toBe(plain)
        // a penalty of 0 is no penalty
        expect(yield* answer({ presencePenalty: 0, frequencyPenalty: 0 })).toBe(plain)
      }))

    it.effect("logprobs: one per generated token, finite and <= 0, alternatives sorted; greedy picks the most likely", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const result = yield* engine.infer(ask(ARITHMETIC, { temperature: 0, maxTokens: 16, logprobs: true, topLogprobs: 5 }))
        expect(result.finishReason).toBe("length")
        const logprobs = result.logprobs ?? []
        // cut at maxTokens: every generated token is content
        expect(logprobs).toHaveLength(16)
        expect(logprobs.map((entry) => entry.token).join("")).toBe(result.content)
        for (const entry of logprobs) {
          expect(Number.isFinite(entry.logprob)).toBe(true)
          expect(entry.logprob).toBeLessThanOrEqual(0)
          expect(entry.topLogprobs).toHaveLength(5)
          const values = entry.topLogprobs.map((alternative) => alternative.logprob)
          expect(values).toEqual([...values].sort((a, b) => b - a))
          for (const value of values) {
            expect(Number.isFinite(value)).toBe(true)
            expect(value).toBeLessThanOrEqual(0)
          }
          // greedy decoding chose the most likely token at each position
          expect(entry.topLogprobs[0]!.token).toBe(entry.token)
          expect(entry.topLogprobs[0]!.logprob).toBeCloseTo(entry.logprob, 6)
        }
        // the alternatives of a position are a distribution's top: their probabilities sum to at most 1
        for (const entry of logprobs) {
          expect(entry.topLogprobs.reduce((sum, alternative) => sum + Math.exp(alternative.logprob), 0)).toBeLessThanOrEqual(1 + 1e-6)
        }
      }))

    it.effect("logprobs at temperature 1 follow the sampled tokens, with no alternatives by default; absent unless asked", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const sampled = yield* engine.infer(ask(STORY, { temperature: 1, seed: 3, maxTokens: 12, logprobs: true }))
        const logprobs = sampled.logprobs ?? []
        expect(logprobs.length).toBeGreaterThan(0)
        expect(logprobs.map((entry) => entry.token).join("")).toBe(sampled.content)
        for (const entry of logprobs) {
          expect(entry.topLogprobs).toEqual([])
          expect(Number.isFinite(entry.logprob) && entry.logprob <= 0).toBe(true)
        }
        // the same seed without logprobs: the same text (measuring changes nothing), and no logprobs
        const plain = yield* engine.infer(ask(STORY, { temperature: 1, seed: 3, maxTokens: 12 }))
        expect(plain.content).toBe(sampled.content)
        expect(plain.logprobs).toBeUndefined()
      }))

    it.effect("logprobs of a streamed answer come on its Finish; a stop text's tokens are not among them", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const parts = Chunk.toReadonlyArray(
          yield* Stream.runCollect(
            engine.stream(ask(ARITHMETIC, { temperature: 0, maxTokens: 40, stop: [" is"], logprobs: true, topLogprobs: 1 }))
          )
        )
        const result = finishOf(parts)
        expect(result.finishReason).toBe("stop")
        const logprobs = result.logprobs ?? []
        expect(logprobs.length).toBeGreaterThan(0)
        expect(logprobs.map((entry) => entry.token).join("")).toBe(result.content)
        expect(parts.filter((part) => part._tag === "TextDelta").map((part) => part.text).join("")).toBe(result.content)
      }))

    it.effect("a session turn after a measured answer still reuses its evaluated prefix and answers the same", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const first = yield* engine.infer(ask(ARITHMETIC, { temperature: 0, maxTokens: 12, logprobs: true, sessionKey: "lp-session" }))
        const turn = new InferenceRequest({
          messages: [Message.user(ARITHMETIC), Message.assistant(first.content), Message.user("Hello")],
          temperature: 0,
          maxTokens: 12,
          sessionKey: "lp-session"
        })
        const next = yield* engine.infer(turn)
        // the second turn evaluated only its new tokens, not the whole history again
        expect(next.usage.promptTokens).toBeLessThan(next.usage.contextTokens - next.usage.outputTokens)
        const fresh = yield* engine.infer(new InferenceRequest({ ...turn, sessionKey: "lp-elsewhere" }))
        expect(next.content).toBe(fresh.content)
      }))
  }
)

layer(LlamaEngine.layer({ sequences: 1, contextSize: 256 }), { excludeTestServices: true })(
  "sampling controls on the bundled model (256-token context)",
  (it) => {
    it.effect("logprobs of an answer that fills the context: one per token, measured within the context", () =>
      Effect.gen(function*() {
        const engine = yield* Engine
        const result = yield* engine.infer(
          ask("Tell me a story.", { grammar: "root ::= [a-z] root", maxTokens: 10_000, logprobs: true, topLogprobs: 2 })
        )
        expect(result.finishReason).toBe("length")
        expect(result.usage.contextTokens).toBeLessThanOrEqual(256)
        const logprobs = result.logprobs ?? []
        expect(logprobs.length).toBe(result.usage.outputTokens)
        expect(logprobs.map((entry) => entry.token).join("")).toBe(result.content)
        for (const entry of logprobs) expect(Number.isFinite(entry.logprob) && entry.logprob <= 0).toBe(true)
      }))
  }
)
