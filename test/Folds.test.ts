import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as fc from "fast-check"
import * as AnswerShape from "../src/domain/AnswerShape.js"
import type { OrchestrationFailure } from "../src/domain/Failure.js"
import * as Cel from "../src/programs/Cel.js"
import * as Folds from "../src/programs/Folds.js"

// Seed 05's fold functions, each with a worked example table.

const right = <A>(e: Either.Either<A, OrchestrationFailure>): A => {
  if (Either.isLeft(e)) throw new Error(`expected an answer, got ${e.left.code}: ${e.left.message}`)
  return e.right
}
const left = <A>(e: Either.Either<A, OrchestrationFailure>): OrchestrationFailure => {
  if (Either.isRight(e)) throw new Error("expected a failure")
  return e.left
}

/** Responses from bodies: responder i answers bodies[i]; a string is a failure. */
const rs = (
  bodies: ReadonlyArray<unknown>,
  extra: { readonly kind?: Folds.Response["kind"] | undefined; readonly stage?: ((i: number) => number) | undefined } = {}
): ReadonlyArray<Folds.Response> =>
  bodies.map((body, i) =>
    body instanceof Error
      ? Folds.failed({ responder: `r${i}`, responderIndex: i, recordId: `rec-${i}`, problem: body.message, kind: extra.kind })
      : Folds.answered({ responder: `r${i}`, responderIndex: i, recordId: `rec-${i}`, body, kind: extra.kind, stage: extra.stage?.(i) })
  )

const classification = AnswerShape.checker({ kind: "core.classification.v1", labels: ["research", "news", "spam"] })
const cat = (category: string, extra: Record<string, unknown> = {}) => ({ category, ...extra })

const compile = <P extends Cel.Place>(place: P, source: string): Cel.Compiled<P> => {
  const c = Cel.compile(place, "test", source)
  if (Either.isLeft(c)) throw new Error(c.left.message)
  return c.right
}

describe("consensus", () => {
  const table: ReadonlyArray<{
    readonly name: string
    readonly bodies: ReadonlyArray<unknown>
    readonly options?: Folds.Options
    readonly winner: number
    readonly confidence: number
    readonly support: number
  }> = [
    { name: "a clear majority", bodies: [cat("news"), cat("research"), cat("research")], winner: 1, confidence: 2 / 3, support: 2 },
    { name: "a tie goes to the earliest group", bodies: [cat("spam"), cat("news"), cat("news"), cat("spam")], winner: 0, confidence: 0.5, support: 2 },
    {
      name: "_confidence and _rationale do not split a group",
      bodies: [cat("news", { _confidence: 0.2 }), cat("news", { _rationale: "x" }), cat("spam")],
      winner: 0,
      confidence: 2 / 3,
      support: 2
    },
    {
      name: "failed and invalid answers are not valid: confidence is over the valid",
      bodies: [new Error("timeout"), cat("weather"), cat("spam"), cat("spam"), cat("news")],
      winner: 2,
      confidence: 2 / 3,
      support: 2
    },
    {
      name: "key order does not split a JSON answer",
      bodies: [{ a: 1, b: [1, 2] }, { b: [1, 2], a: 1 }, { a: 2 }],
      options: { shape: AnswerShape.anyAnswer },
      winner: 0,
      confidence: 2 / 3,
      support: 2
    },
    {
      name: "text similarity groups near-identical summaries (Jaccard >= 0.8)",
      bodies: [
        { summary: "Prices rose sharply in March" },
        { summary: "The cat sat on the mat" },
        { summary: "prices rose sharply in march." },
        { summary: "In March, prices rose sharply" }
      ],
      options: { shape: AnswerShape.checker({ kind: "core.summary.v1" }), similarity: "text" },
      winner: 0,
      confidence: 3 / 4,
      support: 3
    },
    {
      name: "structural similarity keeps those summaries apart",
      bodies: [{ summary: "Prices rose sharply in March" }, { summary: "The cat sat" }, { summary: "prices rose sharply in march." }],
      options: { shape: AnswerShape.checker({ kind: "core.summary.v1" }) },
      winner: 0,
      confidence: 1 / 3,
      support: 1
    },
    {
      name: "a semantic similarity the application provides",
      bodies: [{ text: "yes" }, { text: "affirmative" }, { text: "no" }],
      options: {
        shape: AnswerShape.checker({ kind: "core.text.v1" }),
        similarity: "semantic",
        semantic: (a, b) => {
          const yes = (u: unknown) => ["yes", "affirmative"].includes((u as { text: string }).text)
          return yes(a) === yes(b) ? 1 : 0
        }
      },
      winner: 0,
      confidence: 2 / 3,
      support: 2
    }
  ]
  for (const row of table) {
    it(row.name, () => {
      const out = right(Folds.consensus(rs(row.bodies), { shape: classification, ...row.options }))
      expect(out.chosen.responderIndex).toBe(row.winner)
      expect(out.confidence).toBeCloseTo(row.confidence, 10)
      expect(out.support.length).toBe(row.support)
      expect(out.function).toBe("consensus")
    })
  }

  it("no valid answer: ORCHESTRATION_NO_CONSENSUS naming each rejected response", () => {
    const failure = left(Folds.consensus(rs([new Error("engine down"), cat("weather")]), { shape: classification }))
    expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
    const rejected = failure.details.rejected as ReadonlyArray<{ responder: string; problem: string }>
    expect(rejected.map((r) => r.responder)).toEqual(["r0", "r1"])
    expect(rejected[0]!.problem).toBe("engine down")
    expect(rejected[1]!.problem).toContain("none of the labels")
  })

  it("semantic similarity without a provider is refused", () => {
    const failure = left(Folds.consensus(rs([cat("news")]), { shape: classification, similarity: "semantic" }))
    expect(failure.message).toContain("semantic")
  })
})

describe("best_of", () => {
  const table: ReadonlyArray<{ readonly name: string; readonly bodies: ReadonlyArray<unknown>; readonly kind?: Folds.Response["kind"]; readonly winner: number; readonly confidence: number }> = [
    { name: "_confidence first", bodies: [cat("news", { _confidence: 0.4 }), cat("spam", { _confidence: 0.9, confidence: 0.1 })], winner: 1, confidence: 0.9 },
    { name: "then the shape's own confidence", bodies: [cat("news", { confidence: 0.7 }), cat("spam", { confidence: 0.75 })], winner: 1, confidence: 0.75 },
    { name: "then the kind's default (llm 0.6)", bodies: [cat("news"), cat("spam", { confidence: 0.59 })], winner: 0, confidence: 0.6 },
    { name: "a human's default is 0.9", bodies: [cat("news"), cat("spam")], kind: "actor", winner: 0, confidence: 0.9 },
    { name: "ties to the earliest", bodies: [cat("news", { _confidence: 0.8 }), cat("spam", { _confidence: 0.8 })], winner: 0, confidence: 0.8 },
    { name: "a _confidence outside [0, 1] is ignored", bodies: [cat("news", { _confidence: 7 }), cat("spam", { _confidence: 0.7 })], winner: 1, confidence: 0.7 }
  ]
  for (const row of table) {
    it(row.name, () => {
      const out = right(Folds.bestOf(rs(row.bodies, { kind: row.kind }), { shape: classification }))
      expect(out.chosen.responderIndex).toBe(row.winner)
      expect(out.confidence).toBe(row.confidence)
    })
  }
})

describe("waterfall_first", () => {
  const accept = compile("decision", "fold.answer.confidence >= 0.85")
  const options: Folds.Options = { shape: classification, accept: (candidate) => accept.run({ fold: Folds.view(candidate) }) }
  const table: ReadonlyArray<{ readonly name: string; readonly bodies: ReadonlyArray<unknown>; readonly stages: ReadonlyArray<number>; readonly winner: number | undefined }> = [
    { name: "the first accepted in stage order", bodies: [cat("news", { _confidence: 0.9 }), cat("spam", { _confidence: 0.95 })], stages: [1, 0], winner: 1 },
    { name: "an unaccepted early stage is passed over", bodies: [cat("news", { _confidence: 0.5 }), cat("spam", { _confidence: 0.9 })], stages: [0, 1], winner: 1 },
    { name: "an invalid answer is passed over", bodies: [cat("weather", { _confidence: 1 }), cat("spam", { _confidence: 0.86 })], stages: [0, 0], winner: 1 },
    { name: "nothing accepted: no consensus", bodies: [cat("news", { _confidence: 0.5 }), new Error("down")], stages: [0, 1], winner: undefined }
  ]
  for (const row of table) {
    it(row.name, () => {
      const result = Folds.waterfallFirst(rs(row.bodies, { stage: (i) => row.stages[i]! }), options)
      if (row.winner === undefined) {
        const failure = left(result)
        expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
        expect((failure.details.rejected as ReadonlyArray<{ problem: string }>).map((r) => r.problem)).toEqual(["not accepted", "down"])
      } else expect(right(result).chosen.responderIndex).toBe(row.winner)
    })
  }

  it("without an acceptance, the first valid answer", () => {
    expect(right(Folds.waterfallFirst(rs([new Error("x"), cat("news")]), { shape: classification })).chosen.responderIndex).toBe(1)
  })
})

describe("ensemble_weighted", () => {
  const table: ReadonlyArray<{ readonly name: string; readonly bodies: ReadonlyArray<unknown>; readonly weight?: string; readonly winner: number; readonly confidence: number }> = [
    { name: "default weight 1 is consensus", bodies: [cat("news"), cat("spam"), cat("spam")], winner: 1, confidence: 2 / 3 },
    {
      name: "weights by stated confidence: one sure answer outweighs two unsure ones",
      bodies: [cat("news", { _confidence: 0.3 }), cat("news", { _confidence: 0.3 }), cat("spam", { _confidence: 0.9 })],
      weight: "response.confidence",
      winner: 2,
      confidence: 0.9 / 1.5
    },
    {
      name: "weights by responder",
      bodies: [cat("news"), cat("spam"), cat("spam")],
      weight: "response.responder == 'r0' ? 5.0 : 1.0",
      winner: 0,
      confidence: 5 / 7
    },
    { name: "ties to the earliest group", bodies: [cat("spam"), cat("news")], weight: "1", winner: 0, confidence: 0.5 }
  ]
  for (const row of table) {
    it(row.name, () => {
      const weight = row.weight === undefined ? undefined : compile("weight", row.weight)
      const out = right(Folds.ensembleWeighted(rs(row.bodies), { shape: classification, weight }))
      expect(out.chosen.responderIndex).toBe(row.winner)
      expect(out.confidence).toBeCloseTo(row.confidence, 10)
    })
  }

  it("a negative weight and an all-zero total are typed failures", () => {
    const negative = left(Folds.ensembleWeighted(rs([cat("news")]), { shape: classification, weight: compile("weight", "-1.0") }))
    expect(negative.message).toContain("never negative")
    expect(negative.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
    const zero = left(Folds.ensembleWeighted(rs([cat("news")]), { shape: classification, weight: compile("weight", "0") }))
    expect(zero.code).toBe("ORCHESTRATION_NO_CONSENSUS")
  })

  it("a weight that fails to evaluate is a typed failure naming the expression", () => {
    const failure = left(
      Folds.ensembleWeighted(rs([cat("news")]), { shape: classification, weight: compile("weight", "double(response.answer.score)") })
    )
    expect(failure._tag).toBe("OrchestrationFailure")
    expect(failure.details.expression).toBe("double(response.answer.score)")
    expect(failure.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
    expect(failure.message).toContain("score")
  })
})

describe("expression", () => {
  const table: ReadonlyArray<{ readonly name: string; readonly expression: string; readonly bodies: ReadonlyArray<unknown>; readonly winner: number }> = [
    { name: "the last valid response", expression: "responses.size() - 1", bodies: [cat("news"), cat("spam"), new Error("x")], winner: 1 },
    {
      name: "the first response from a human, else the first",
      expression: "responses.exists(r, r.kind == 'actor') ? responses.filter(r, r.kind == 'actor')[0].index : 0",
      bodies: [cat("news"), cat("spam")],
      winner: 0
    },
    { name: "indexes count valid responses only", expression: "1", bodies: [new Error("x"), cat("news"), cat("spam")], winner: 2 }
  ]
  for (const row of table) {
    it(row.name, () => {
      const out = right(Folds.expression(rs(row.bodies), { shape: classification, choice: compile("choice", row.expression) }))
      expect(out.chosen.responderIndex).toBe(row.winner)
    })
  }

  it("an index out of range is a typed failure naming the expression", () => {
    const failure = left(Folds.expression(rs([cat("news")]), { shape: classification, choice: compile("choice", "3") }))
    expect(failure.message).toContain("chose response 3; there are 1")
    expect(failure.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
    expect(failure.details.field).toBe("test")
  })
})

describe("canonical order", () => {
  const pool = [cat("news", { _confidence: 0.7 }), cat("spam", { _confidence: 0.7 }), cat("research", { confidence: 0.8 }), new Error("x")]
  const responses = fc
    .array(
      fc.record({ body: fc.nat({ max: pool.length - 1 }), stage: fc.nat({ max: 2 }), attempt: fc.integer({ min: 1, max: 3 }) }),
      { minLength: 1, maxLength: 12 }
    )
    .map((picks) =>
      picks.map((p, i) => {
        const body = pool[p.body]
        const base = { responder: `r${i % 4}`, responderIndex: i % 4, recordId: `rec-${i}`, stage: p.stage, attempt: p.attempt, kind: "llm" as const }
        return body instanceof Error ? Folds.failed({ ...base, problem: body.message }) : Folds.answered({ ...base, body })
      })
    )
  const weight = compile("weight", "response.confidence")
  const choice = compile("choice", "responses.size() / 2")
  const specs: ReadonlyArray<Folds.Spec> = [
    { function: "consensus", options: { shape: classification } },
    { function: "consensus", options: { shape: classification, similarity: "text", threshold: 0.5 } },
    { function: "best_of", options: { shape: classification } },
    { function: "waterfall_first", options: { shape: classification } },
    { function: "ensemble_weighted", options: { shape: classification, weight } },
    { function: "expression", options: { shape: classification, choice } }
  ]
  const summary = (e: Either.Either<Folds.Output, OrchestrationFailure>) =>
    Either.isLeft(e) ? e.left.code : { record: e.right.chosen.recordId, confidence: e.right.confidence, support: e.right.support.map((r) => r.recordId) }

  it("property: permuting arrival order never changes a fold", () => {
    fc.assert(
      fc.property(responses, fc.func(fc.integer()), (list, order) => {
        const shuffled = list.map((r, i) => ({ r, k: order(i) })).sort((a, b) => a.k - b.k).map((x) => x.r)
        for (const spec of specs) expect(summary(Folds.run(spec, shuffled))).toEqual(summary(Folds.run(spec, list)))
      }),
      { numRuns: 300 }
    )
  })
})

describe("similarity (verify's agreement)", () => {
  it("structural, text and semantic", () => {
    expect(Folds.similarity({ a: 1, b: 2 }, { b: 2, a: 1 })).toEqual(Either.right(1))
    expect(Folds.similarity({ a: 1 }, { a: 2 })).toEqual(Either.right(0))
    const summary = AnswerShape.checker({ kind: "core.summary.v1" })
    expect(Folds.similarity({ summary: "prices rose in March" }, { summary: "In March prices fell" }, { shape: summary, similarity: "text" }))
      .toEqual(Either.right(3 / 5))
    expect(Folds.similarity(1, 2, { similarity: "semantic", semantic: () => 0.25 })).toEqual(Either.right(0.25))
    expect(Either.isLeft(Folds.similarity(1, 2, { similarity: "semantic" }))).toBe(true)
  })
})
