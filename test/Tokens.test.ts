/**
 * The engine's memoized tokenizer (layers/llama/Tokens.ts) on the bundled model's
 * own tokenizer: the same tokens as the model's for every prompt, whether the runs
 * were seen before or not; repeated runs are not tokenized again; the cache is
 * bounded; runs too long to keep are tokenized every time.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { getLlama, LlamaText, SpecialTokensText } from "node-llama-cpp"
import type { Token, Tokenizer } from "node-llama-cpp"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as Tokens from "../src/layers/llama/Tokens.js"

const loaded = Effect.gen(function*() {
  const llama = yield* Effect.acquireRelease(
    Effect.promise(() => getLlama({ gpu: false, build: "never", maxThreads: 1 })),
    (llama) => Effect.promise(() => llama.dispose())
  )
  return yield* Effect.acquireRelease(
    Effect.promise(() => llama.loadModel({ modelPath: LlamaEngine.bundledModelPath(), gpuLayers: 0 })),
    (model) => Effect.promise(() => model.dispose())
  )
})

/** `tokenizer`, counting the calls that reach it. */
const counting = (tokenizer: Tokenizer) => {
  const counter = { calls: 0 }
  const call = tokenizer as (...args: Array<unknown>) => Array<Token>
  const wrapped = Object.assign((...args: Array<unknown>) => {
    counter.calls++
    return call(...args)
  }, { detokenize: tokenizer.detokenize, isSpecialToken: tokenizer.isSpecialToken, isEogToken: tokenizer.isEogToken })
  return { tokenizer: wrapped as unknown as Tokenizer, counter }
}

const prompt = (system: string, user: string) =>
  LlamaText([
    new SpecialTokensText("<|im_start|>system\n"),
    system,
    new SpecialTokensText("<|im_end|>\n<|im_start|>user\n"),
    user,
    new SpecialTokensText("<|im_end|>\n<|im_start|>assistant\n")
  ])

describe("memoized tokenizer (bundled model)", () => {
  it.scoped("gives the model's tokens, and tokenizes a repeated run once", () =>
    Effect.gen(function*() {
      const model = yield* loaded
      const { counter, tokenizer } = counting(model.tokenizer)
      const memo = Tokens.memoized(tokenizer)
      const texts = [
        prompt("You are a helpful assistant.", "What is 2 plus 2?"),
        prompt("You are a helpful assistant.", "Name a colour."),
        prompt("You are a helpful assistant.", " leading space, trailing space "),
        prompt("Classify the sentiment of the review.", "The soup was cold.")
      ]
      for (const text of texts) expect(text.tokenize(memo)).toEqual(text.tokenize(model.tokenizer))
      const first = counter.calls
      // Every run of the four prompts is known now: tokenizing them again reaches the model not once.
      for (const text of texts) expect(text.tokenize(memo)).toEqual(text.tokenize(model.tokenizer))
      expect(counter.calls).toBe(first)
      // A new user message: only its run is tokenized.
      prompt("You are a helpful assistant.", "Something new.").tokenize(memo)
      expect(counter.calls).toBe(first + 1)
      // Special tokens and modes are part of the key.
      expect(memo("<|im_end|>", true)).toEqual(model.tokenizer("<|im_end|>", true))
      expect(memo("<|im_end|>", false)).toEqual(model.tokenizer("<|im_end|>", false))
      expect(memo(" hi", false, "trimLeadingSpace")).toEqual(model.tokenizer(" hi", false, "trimLeadingSpace"))
      expect(memo(" hi", false)).toEqual(model.tokenizer(" hi", false))
    }), 60_000)

  it.scoped("is bounded: past its capacity the stalest run is tokenized again; long runs are never kept", () =>
    Effect.gen(function*() {
      const model = yield* loaded
      const { counter, tokenizer } = counting(model.tokenizer)
      const memo = Tokens.memoized(tokenizer, { capacity: 2, maxLength: 10 })
      memo("one", false)
      memo("two", false)
      memo("three", false)
      expect(counter.calls).toBe(3)
      memo("three", false)
      memo("two", false)
      expect(counter.calls).toBe(3)
      memo("one", false) // dropped when "three" came in
      expect(counter.calls).toBe(4)
      const long = "a much longer run of text"
      memo(long, false)
      memo(long, false)
      expect(counter.calls).toBe(6)
      // What a caller does to the tokens it got leaves the cache alone.
      const tokens = memo("two", false)
      tokens.push(0 as Token)
      expect(memo("two", false)).toEqual(model.tokenizer("two", false))
    }), 60_000)
})
