import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ModelReranker from "../src/layers/ModelReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Candidate, Reranker as RerankerTag, RerankInput } from "../src/services/Reranker.js"

const candidate = (content: string, source: string, score = 0) => new Candidate({ content, source, score })

const input = new RerankInput({
  query: "effect schema decoding",
  candidates: [
    candidate("Cooking pasta takes nine minutes.", "cookbook", 0.9),
    candidate("Schema decoding turns unknown input into typed values.", "docs", 0.1),
    candidate("Effect schema decoding with Effect Schema: decoding, encoding, schema classes.", "guide", 0.2)
  ]
})

describe("Reranker", () => {
  describe("lexical (default)", () => {
    it.effect("orders by BM25 overlap with the query and replaces the scores", () =>
      Effect.gen(function* () {
        const reranker = yield* RerankerTag
        const ranked = yield* reranker.rerank(input)
        expect(ranked.map((c) => c.source)).toEqual(["guide", "docs", "cookbook"])
        expect(ranked[2]!.score).toBe(0)
        expect(ranked[0]!.score).toBeGreaterThan(ranked[1]!.score)
      }).pipe(Effect.provide(LexicalReranker.layer())))

    it.effect("keeps topK, and ties keep the original order", () =>
      Effect.gen(function* () {
        const reranker = yield* RerankerTag
        const top = yield* reranker.rerank(new RerankInput({ ...input, topK: 1 }))
        expect(top.map((c) => c.source)).toEqual(["guide"])
        const ties = yield* reranker.rerank(
          new RerankInput({ query: "x", candidates: [candidate("a", "1"), candidate("b", "2"), candidate("c", "3")] })
        )
        expect(ties.map((c) => c.source)).toEqual(["1", "2", "3"])
      }).pipe(Effect.provide(LexicalReranker.layer())))

    it("bm25 is case-insensitive and saturates repeated terms", () => {
      const [once, many, none] = LexicalReranker.bm25("Cat", ["the cat sat", "cat cat cat cat cat cat", "a dog"])
      expect(none).toBe(0)
      expect(many!).toBeGreaterThan(once!)
      expect(many! / once!).toBeLessThan(3)
    })
  })

  describe("model-based", () => {
    it.effect("asks the engine to score each candidate with a {score} schema and orders by the answers", () =>
      Effect.gen(function* () {
        const reranker = yield* Effect.flatMap(ModelReranker.make(), (r) => Effect.succeed(r))
        const ranked = yield* reranker.rerank(input)
        expect(ranked.map((c) => [c.source, c.score])).toEqual([["docs", 0.8], ["guide", 0.7], ["cookbook", 0]])
        const requests = yield* ScriptedEngine.requests
        expect(requests).toHaveLength(3)
        expect(requests[0]!.schema).toEqual(ModelReranker.scoreJsonSchema)
        expect(requests[1]!.messages.at(-1)!.content).toBe(
          "Query: effect schema decoding\n\nPassage (docs): Schema decoding turns unknown input into typed values."
        )
      }).pipe(
        Effect.provide(
          ScriptedEngine.layer([
            ScriptedEngine.reply("{\"score\": 0}"),
            ScriptedEngine.reply("{\"score\": 0.8}"),
            ScriptedEngine.reply("{\"score\": 0.7}")
          ])
        )
      ))

    it.effect("clamps scores to [0, 1]", () =>
      Effect.gen(function* () {
        const reranker = yield* RerankerTag
        const ranked = yield* reranker.rerank(new RerankInput({ query: "q", candidates: [candidate("a", "a"), candidate("b", "b")] }))
        expect(ranked.map((c) => [c.source, c.score])).toEqual([["b", 1], ["a", 0]])
      }).pipe(
        Effect.provide(ModelReranker.layer()),
        Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("{\"score\": -3}"), ScriptedEngine.reply("{\"score\": 7}")]))
      ))

    it.effect("a reply that is not JSON, or not {score: number}, is a ConstraintFailure keeping the raw text", () =>
      Effect.gen(function* () {
        const reranker = yield* RerankerTag
        const one = new RerankInput({ query: "q", candidates: [candidate("a", "a")] })
        const notJson = yield* Effect.flip(reranker.rerank(one))
        expect(notJson._tag).toBe("ConstraintFailure")
        expect(notJson.code).toBe("CONSTRAINT_JSON_INVALID")
        const wrongShape = yield* Effect.flip(reranker.rerank(one))
        expect(wrongShape.code).toBe("CONSTRAINT_SCHEMA_INVALID")
        if (wrongShape._tag === "ConstraintFailure") {
          expect(wrongShape.raw).toBe("{\"relevance\": 1}")
          expect(wrongShape.violations[0]).toContain("score")
        }
      }).pipe(
        Effect.provide(ModelReranker.layer()),
        Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("very relevant"), ScriptedEngine.reply("{\"relevance\": 1}")]))
      ))
  })
})
