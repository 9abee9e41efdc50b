import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Cel from "../src/programs/Cel.js"

// CEL in its three kinds of place: compiled and type-checked once, typed failures at run time.

const compiled = <P extends Cel.Place>(place: P, source: string): Cel.Compiled<P> => {
  const c = Cel.compile(place, "the.field", source)
  if (Either.isLeft(c)) throw new Error(c.left.message)
  return c.right
}
const refusal = (place: Cel.Place, source: string) => {
  const c = Cel.compile(place, "the.field", source)
  if (Either.isRight(c)) throw new Error(`expected ${source} to be refused`)
  expect(c.left._tag).toBe("ConfigurationFailure")
  expect(c.left.code).toBe("CONFIG_INVALID_REQUEST")
  expect(c.left.details.field).toBe("the.field")
  return c.left
}

const fold = (confidence: number, value: unknown = { category: "news" }) =>
  new Cel.FoldView({ function: "consensus", answer: new Cel.AnswerView(value, confidence, "", "r0", "rec-0"), support: 2n, valid: 3n, total: 4n })
const response = (answer: unknown, confidence = 0.5) => new Cel.ResponseView(0n, "r0", "llm", 1n, 0n, "rec-0", answer, confidence, "")
const responder = new Cel.ResponderView("alice", "actor", "Alice", [], "", "did:example:alice", "compliance", ["legal"], { status: "available", typical_response_delay_s: 3600 }, { team: "risk" })

describe("compile: checked against the place's declaration", () => {
  it("the seed's expressions compile in their places", () => {
    expect(compiled("decision", "fold.answer.confidence >= 0.85").type).toBe("bool")
    expect(compiled("decision", "fold.answer.confidence < 0.7").type).toBe("bool")
    expect(compiled("audit", "audit.approved == true").type).toBe("bool")
    expect(compiled("weight", "response.confidence * 2.0").type).toBe("double")
    expect(compiled("predicate", "'legal' in responder.tags && responder.availability.status == 'available'").type).toBe("bool")
    expect(compiled("choice", "responses.size() - 1").type).toBe("int")
    expect(compiled("agreement", "responses.exists(r, r.kind == 'actor') ? 0.5 : 0.9").type).toBe("double")
  })

  const table: ReadonlyArray<readonly [string, Cel.Place, string, string, number]> = [
    ["a syntax error, at its position", "decision", "fold.answer.confidence >= ", "Unexpected token: EOF", 26],
    ["a misspelt field, at its position", "decision", "fold.answer.confidnce >= 0.85", "No such key: confidnce", 12],
    ["a variable of another place", "weight", "fold.answer.confidence", "Unknown variable: fold", 0],
    ["a type error", "predicate", "responder.id + 1 == 2", "no such overload: string + int", 0],
    ["a predicate that is not a bool", "predicate", "responder.id", "must yield a bool, yields string", 0],
    ["a weight that is not a number", "weight", "response.rationale", "must yield a number (double or int), yields string", 0],
    ["a regular expression (JavaScript's can backtrack without bound)", "predicate", "responder.id == 'a' || responder.description.matches('(a+)+$')", "matches() is not allowed: JavaScript regular expressions can backtrack without bound (use contains, startsWith, endsWith)", 23],
    ["comprehensions nested three deep", "choice", "responses.filter(a, responses.exists(b, responses.all(c, true))).size()", "comprehensions nested 3 deep (at most 2)", 40]
  ]
  for (const [name, place, source, problem, position] of table) {
    it(name, () => {
      const failure = refusal(place, source)
      expect(failure.details.problem).toBe(problem)
      expect(failure.details.position).toBe(position)
      expect(failure.message).toContain(`the.field: ${problem} at position ${position}`)
    })
  }

  it("line and column for multi-line expressions", () => {
    const failure = refusal("decision", "fold.answer.confidence >= 0.5 &&\n  fold.valid >= \"x\"")
    expect(failure.details.line).toBe(2)
    expect(failure.message).toContain("line 2")
  })

  it("an expression past the AST bound is refused", () => {
    const failure = refusal("decision", Array.from({ length: 200 }, () => "fold.valid > 1").join(" && "))
    expect(failure.message).toContain("the.field: ")
  })
})

describe("run: typed results, typed failures", () => {
  it("a decision over the fold", () => {
    const accept = compiled("decision", "fold.answer.confidence >= 0.85")
    expect(accept.run({ fold: fold(0.9) })).toEqual(Either.right(true))
    expect(accept.run({ fold: fold(0.5) })).toEqual(Either.right(false))
  })

  it("numbers in answers are doubles; ints become numbers", () => {
    expect(compiled("weight", "response.answer.score * 2.0").run({ response: response({ score: 1.5 }) })).toEqual(Either.right(3))
    expect(compiled("weight", "2").run({ response: response({}) })).toEqual(Either.right(2))
    expect(compiled("choice", "responses.size() - 1").run({ responses: [response(1), response(2)] })).toEqual(Either.right(1))
  })

  it("a predicate over the candidate's metadata", () => {
    expect(compiled("predicate", "responder.metadata.team == 'risk' && 'legal' in responder.tags").run({ responder })).toEqual(Either.right(true))
  })

  it("an evaluation error is an OrchestrationFailure naming the expression, the position and the inputs", () => {
    const weight = compiled("weight", "response.answer.score * 2.0")
    const result = weight.run({ response: response({ category: "news" }) })
    if (Either.isRight(result)) throw new Error("expected a failure")
    expect(result.left._tag).toBe("OrchestrationFailure")
    expect(result.left.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
    expect(result.left.retryable).toBe(false)
    expect(result.left.message).toBe('the.field: the CEL expression "response.answer.score * 2.0" failed: No such key: score')
    expect(result.left.details.expression).toBe("response.answer.score * 2.0")
    expect(result.left.details.position).toBe(16)
    expect(JSON.stringify(result.left.details.inputs)).toContain("news")
  })

  it("inputs in the failure are short excerpts", () => {
    const result = compiled("weight", "response.answer.score").run({ response: response({ text: "x".repeat(10_000) }) })
    if (Either.isRight(result)) throw new Error("expected a failure")
    expect(JSON.stringify(result.left.details).length).toBeLessThan(2_000)
  })

  it("a dyn result of the wrong type is caught at run time", () => {
    const weight = compiled("weight", "response.answer.score")
    const result = weight.run({ response: response({ score: "high" }) })
    if (Either.isRight(result)) throw new Error("expected a failure")
    expect(result.left.message).toContain('yielded "high", not a finite number')
  })

  it("division by zero is typed, not a crash", () => {
    const result = compiled("choice", "responses.size() / 0").run({ responses: [] })
    expect(Either.isLeft(result) && result.left.message).toContain("division by zero")
    expect(Either.isLeft(result) && result.left.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
  })
})
