/**
 * CONSTRAINT_GRAMMAR_REJECTED: the GBNF checker on llama.cpp's grammar engine, and a
 * structured call that checks its reply against the grammar it was given: the
 * real engine's grammar-constrained answers pass, an answer cut off by maxTokens
 * and an engine that ignores the grammar do not.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { ConstraintFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as GrammarCheckerLive from "../src/layers/LlamaGrammarChecker.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Structured from "../src/programs/Structured.js"
import { GrammarChecker } from "../src/services/GrammarChecker.js"

const SENTIMENT_GBNF = [
  'root ::= "{\\"sentiment\\": \\"" label "\\"}"',
  'label ::= "positive" | "negative" | "neutral"'
].join("\n")

const sentiment = JsonSchema.object({ sentiment: JsonSchema.enumOf(["positive", "negative", "neutral"]) })

const ask = (review: string) => [Message.system("Classify the sentiment of the review."), Message.user(review)]

// Plain describes come first: @effect/vitest's layer() assigns its runtime to the
// shared \`it.effect\`, so a top-level it.effect after a layer() block runs inside it.
describe("Structured.run with a grammar, an engine that ignores it", () => {
  const scripted = (replies: ReadonlyArray<string>) =>
    Layer.mergeAll(ScriptedEngine.layer(replies.map((r) => ScriptedEngine.reply(r))), ConstraintLive.layer, GrammarCheckerLive.layer)

  it.effect("a reply outside the grammar is rejected and re-asked; the next one passes", () =>
    Effect.gen(function*() {
      const result = yield* Structured.run(ask("Loved it."), {
        schema: sentiment,
        grammar: SENTIMENT_GBNF,
        retry: Schedule.recurs(2)
      })
      expect(result.value).toEqual({ sentiment: "positive" })
      expect(result.attempts).toBe(2)
      const requests = yield* ScriptedEngine.requests
      expect(requests[1]!.messages.at(-1)!.content).toMatch(/CONSTRAINT_GRAMMAR_REJECTED/)
    }).pipe(
      // Valid JSON for the schema, but not the grammar's spelling (no space after the colon).
      Effect.provide(scripted(['{"sentiment":"positive"}', '{"sentiment": "positive"}']))
    ), 30_000)

  it.effect("without a checker, the reply is trusted to the decoder (the old behaviour)", () =>
    Effect.gen(function*() {
      expect(yield* Effect.serviceOption(GrammarChecker)).toEqual(Option.none())
      const result = yield* Structured.run(ask("Loved it."), { schema: sentiment, grammar: SENTIMENT_GBNF })
      expect(result.attempts).toBe(1)
    }).pipe(
      Effect.provide(Layer.mergeAll(ScriptedEngine.layer([ScriptedEngine.reply('{"sentiment":"positive"}')]), ConstraintLive.layer))
    ))
})

layer(GrammarCheckerLive.layer)("GrammarChecker (llama.cpp's grammar engine)", (it) => {
  it.effect("a complete sentence matches; a prefix, an extra character or another text does not", () =>
    Effect.gen(function*() {
      const checker = yield* GrammarChecker
      expect(yield* checker.matches('{"sentiment": "positive"}', SENTIMENT_GBNF)).toBe(true)
      expect(yield* checker.matches('{"sentiment": "neutral"}', SENTIMENT_GBNF)).toBe(true)
      expect(yield* checker.matches('{"sentiment": "pos', SENTIMENT_GBNF)).toBe(false)
      expect(yield* checker.matches('{"sentiment": "positive"}}', SENTIMENT_GBNF)).toBe(false)
      expect(yield* checker.matches('{"sentiment": "great"}', SENTIMENT_GBNF)).toBe(false)
      expect(yield* checker.matches("", SENTIMENT_GBNF)).toBe(false)
      expect(yield* checker.matches("héllo wörld", 'root ::= [a-zé ö]+')).toBe(true)
    }))

  it.effect("a grammar that does not parse is CONSTRAINT_GRAMMAR_REJECTED, not retryable", () =>
    Effect.gen(function*() {
      const checker = yield* GrammarChecker
      const failure = yield* Effect.flip(checker.matches("x", "root ::= (unclosed"))
      expect(failure).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: false })
      expect(failure.message).toMatch(/cannot be used: the grammar leaves a parenthesis open/)
      const recursive = yield* Effect.flip(checker.matches("a", 'root ::= root "a"'))
      expect(recursive).toMatchObject({ code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: false, details: { kind: "grammar_invalid" } })
      expect(recursive.message).toMatch(/left-recursive/)
      // Past the pre-check, refused by llama.cpp itself: the same failure.
      const token = yield* Effect.flip(checker.matches("a", "root ::= <no-such-token>"))
      expect(token).toMatchObject({ code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: false, details: { kind: "grammar_invalid" } })
      expect(token.message).toMatch(/llama\.cpp cannot parse the grammar/)
    }))

  it.effect("parentheses nested 20,000 deep are refused before llama.cpp; the process lives", () =>
    Effect.gen(function*() {
      const checker = yield* GrammarChecker
      const grammar = "root ::= " + "(".repeat(20_000) + '"a"' + ")".repeat(20_000)
      const failure = yield* Effect.flip(checker.matches("a", grammar))
      expect(failure).toMatchObject({ code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: false })
      expect(failure.message).toMatch(/nests parentheses more than 64 deep/)
      expect(yield* checker.matches("a", "root ::= " + "(".repeat(64) + '"a"' + ")".repeat(64))).toBe(true)
    }))

  it.effect("a 10 MB grammar is refused without being echoed: the failure is the problem and the size", () =>
    Effect.gen(function*() {
      const checker = yield* GrammarChecker
      const grammar = 'root ::= "' + "a".repeat(10 * 1024 * 1024) + '"'
      const failure = yield* Effect.flip(checker.matches("a", grammar))
      expect(failure.details).toEqual({
        kind: "grammar_invalid",
        problem: "the grammar is larger than 64.0 KiB (10.0 MiB or more)",
        bytes: grammar.length
      })
      expect(JSON.stringify(Schema.encodeSync(ConstraintFailure)(failure)).length).toBeLessThan(1_000)
    }))
})

const real = Layer.mergeAll(LlamaEngine.layer({ sequences: 1 }), ConstraintLive.layer, GrammarCheckerLive.layer)

layer(real, { excludeTestServices: true })("Structured.run with a grammar, bundled model", (it) => {
  it.effect("the engine's grammar-constrained answers pass the check (no false rejections)", () =>
    Effect.gen(function*() {
      for (const review of ["The food was cold and the waiter was rude.", "Absolutely loved the staff.", "It was fine."]) {
        const result = yield* Structured.run(ask(review), { schema: sentiment, grammar: SENTIMENT_GBNF, temperature: 0 })
        expect(result.attempts).toBe(1)
        expect(["positive", "negative", "neutral"]).toContain((result.value as { sentiment: string }).sentiment)
      }
    }), 30_000)

  it.effect("an answer cut off by maxTokens before the grammar completes is CONSTRAINT_GRAMMAR_REJECTED", () =>
    Effect.gen(function*() {
      const failure = yield* Effect.flip(
        Structured.run(ask("The food was cold."), {
          schema: sentiment,
          grammar: SENTIMENT_GBNF,
          maxTokens: 3,
          retry: Schedule.recurs(0)
        })
      )
      expect(failure).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: true })
      expect(failure.message).toMatch(/cut off by maxTokens/)
      // The raw text is kept: the start of a sentence of the grammar.
      expect(failure._tag === "ConstraintFailure" ? failure.raw : undefined).toMatch(/^\{/)
    }), 30_000)
})

