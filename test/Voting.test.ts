import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Example from "../examples/similarity-voting.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { canonical, MajorityVoting, UnanimityVoting } from "../src/programs/Voting.js"

const vote = (candidates: ReadonlyArray<string>) => Effect.runSync(MajorityVoting.vote(candidates))

/** Renders a JSON value with keys in reverse order and/or indented. */
const render = (value: unknown, reverse: boolean, indent: number): string => {
  const reorder = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(reorder)
    if (typeof v === "object" && v !== null) {
      const keys = Object.keys(v)
      if (reverse) keys.reverse()
      const out: Record<string, unknown> = {}
      for (const k of keys) out[k] = reorder((v as Record<string, unknown>)[k])
      return out
    }
    return v
  }
  return JSON.stringify(reorder(value), null, indent)
}

describe("MajorityVoting", () => {
  it.effect("the most frequent candidate wins; confidence is its share", () =>
    Effect.gen(function* () {
      const result = yield* MajorityVoting.vote(["positive", "positive", "negative"])
      expect(result).toEqual({ winner: 0, content: "positive", confidence: 2 / 3 })
    }))

  it.effect("ties break by first-seen", () =>
    Effect.gen(function* () {
      expect(yield* MajorityVoting.vote(["a", "b", "a", "b", "c"])).toEqual({ winner: 0, content: "a", confidence: 0.4 })
      expect(yield* MajorityVoting.vote(["b", "a", "a", "b", "c"])).toEqual({ winner: 0, content: "b", confidence: 0.4 })
      expect(yield* MajorityVoting.vote(["c", "a", "b", "a", "b"])).toMatchObject({ winner: 1, content: "a" })
    }))

  it.effect("key order and whitespace do not split votes; non-JSON is compared trimmed", () =>
    Effect.gen(function* () {
      const json = yield* MajorityVoting.vote(['{"x":{"b":[1,2],"a":true}}', '{"y":1}', '{ "x" : { "a": true, "b": [ 1, 2 ] } }'])
      expect(json).toEqual({ winner: 0, content: '{"x":{"b":[1,2],"a":true}}', confidence: 2 / 3 })
      const text = yield* MajorityVoting.vote(["no", " yes\n", "yes"])
      expect(text).toMatchObject({ winner: 1, confidence: 2 / 3 })
      // array order is meaning, not formatting
      expect(yield* MajorityVoting.vote(["[1,2]", "[2,1]"])).toMatchObject({ winner: 0, confidence: 0.5 })
      // a JSON string and bare text with the same letters are different answers
      expect(canonical('"yes"')).not.toBe(canonical("yes"))
    }))

  it.effect("no candidates: ORCHESTRATION_NO_CONSENSUS", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(MajorityVoting.vote([]))
      expect(failure._tag).toBe("OrchestrationFailure")
      expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
    }))

  const pooled = fc
    .array(fc.jsonValue({ maxDepth: 2 }), { minLength: 1, maxLength: 3 })
    .chain((pool) =>
      fc
        .array(fc.record({ i: fc.nat({ max: pool.length - 1 }), reverse: fc.boolean(), indent: fc.constantFrom(0, 2) }), {
          minLength: 1,
          maxLength: 7
        })
        .map((picks) => picks.map((p) => ({ value: pool[p.i], reverse: p.reverse, indent: p.indent })))
    )

  it("property: invariant to key order and whitespace", () => {
    fc.assert(
      fc.property(pooled, (picks) => {
        const plain = vote(picks.map((p) => JSON.stringify(p.value)))
        const varied = vote(picks.map((p) => render(p.value, p.reverse, p.indent)))
        expect(varied.winner).toBe(plain.winner)
        expect(varied.confidence).toBe(plain.confidence)
      }),
      { numRuns: 300 }
    )
  })

  it("property: deterministic, and a tie goes to the first-seen of the largest groups", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom("a", "b", "c", " a", '{"k":1}', '{ "k": 1 }'), { minLength: 1, maxLength: 9 }), (cs) => {
        const result = vote(cs)
        expect(vote(cs)).toEqual(result)
        const counts = cs.map((c) => cs.filter((d) => canonical(d) === canonical(c)).length)
        const max = Math.max(...counts)
        expect(result.winner).toBe(counts.indexOf(max))
        expect(result.confidence).toBe(max / cs.length)
      }),
      { numRuns: 300 }
    )
  })
})

describe("UnanimityVoting", () => {
  it.effect("all agreeing (up to formatting) wins with confidence 1", () =>
    Effect.gen(function* () {
      const result = yield* UnanimityVoting.vote(['{"a":1,"b":2}', '{"b":2,"a":1}', ' {"a": 1, "b": 2}'])
      expect(result).toEqual({ winner: 0, content: '{"a":1,"b":2}', confidence: 1 })
    }))

  it.effect("a differing candidate: ORCHESTRATION_NO_CONSENSUS naming its index", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(UnanimityVoting.vote(["positive", "positive", "negative", "neutral"]))
      expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(failure.message).toBe("unanimity voting: candidate 2 differs from candidate 0")
      expect(failure.details).toMatchObject({ candidate: 2 })
      expect((yield* Effect.flip(UnanimityVoting.vote([]))).code).toBe("ORCHESTRATION_NO_CONSENSUS")
    }))
})

describe("examples/similarity-voting.ts", () => {
  it.effect("SimilarityVoting picks the most central candidate; confidence is its mean similarity", () =>
    Effect.gen(function* () {
      const result = yield* Example.SimilarityVoting.vote([
        '{"tags":["a","b","c"],"x":1}',
        '{"tags":["a","b"],"x":1}',
        '{"tags":["z"],"x":2}'
      ])
      // sim(0,1) = 3/4, sim(0,2) = 0, sim(1,2) = 0: a tie at 3/8 goes to the first
      expect(result).toMatchObject({ winner: 0, confidence: 3 / 8 })
      expect((yield* Example.SimilarityVoting.vote(["only"])).confidence).toBe(1)
      expect((yield* Effect.flip(Example.SimilarityVoting.vote([]))).code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(Example.jaccard(new Set(["a", "b"]), new Set(["b", "c"]))).toBe(1 / 3)
    }))

  it.effect("the example program runs a RedundantLoop with SimilarityVoting", () =>
    Effect.gen(function* () {
      const result = yield* Example.program
      // no two replicas agree exactly; majority would give 1/3 to the first
      expect(result.winner).toBe(1)
      expect(result.value).toEqual({ topic: "rust", sentiment: "positive", tags: ["fast", "safe"] })
      // leaves: 3, 4 and 5; sim(0,1) = 3/4, sim(0,2) = 3/5, sim(1,2) = 4/5
      expect(result.confidence).toBeCloseTo((3 / 4 + 4 / 5) / 2)
      const requests = yield* ScriptedEngine.requests
      expect(requests).toHaveLength(3)
      expect(requests[0]!.temperature).toBe(0.7)
    }).pipe(
      Effect.provide(
        Example.MainLive(
          ScriptedEngine.layer([
            ScriptedEngine.reply('{"topic":"rust","sentiment":"positive","tags":["fast"]}'),
            ScriptedEngine.reply('{"topic":"rust","sentiment":"positive","tags":["fast","safe"]}'),
            ScriptedEngine.reply('{"topic":"rust","sentiment":"positive","tags":["fast","safe","reliable"]}')
          ])
        )
      )
    ))
})
