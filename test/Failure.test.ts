import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Failure from "../src/domain/Failure.js"
import { SystemError, toSystemError } from "../src/domain/System.js"

const sample = (code: Failure.FailureCode): Failure.Failure => {
  const common = { message: `failed with ${code}`, retryable: false, details: { at: "test" } }
  switch (Failure.categoryOfCode[code]) {
    case "InferenceFailure":
      return new Failure.InferenceFailure({ ...common, code: code as Failure.InferenceFailure["code"] })
    case "ToolFailure":
      return new Failure.ToolFailure({ ...common, code: code as Failure.ToolFailure["code"], tool: "calc" })
    case "ConstraintFailure":
      return new Failure.ConstraintFailure({ ...common, code: code as Failure.ConstraintFailure["code"], raw: "{bad" })
    case "ValidationFailure":
      return new Failure.ValidationFailure({ ...common, code: code as Failure.ValidationFailure["code"] })
    case "OrchestrationFailure":
      return new Failure.OrchestrationFailure({ ...common, code: code as Failure.OrchestrationFailure["code"] })
    case "ConfigurationFailure":
      return new Failure.ConfigurationFailure({ ...common, code: code as Failure.ConfigurationFailure["code"] })
    case "Cancellation":
      return new Failure.Cancellation({ ...common, code: code as Failure.Cancellation["code"] })
  }
}

describe("Failure taxonomy", () => {
  const allCodes = Failure.FailureCode.members.flatMap((m) => m.literals) as ReadonlyArray<Failure.FailureCode>

  it("has the 22 codes of seed 03, two labelled extensions, four of durable runs, one of query expressions and one of a server's capacity, each mapped to a category", () => {
    expect(allCodes).toHaveLength(30)
    expect(allCodes).toContain("ORCHESTRATION_CAPACITY_EXCEEDED")
    expect(allCodes).toContain("ORCHESTRATION_REPLAY_DIVERGED")
    expect(allCodes).toContain("ORCHESTRATION_STATE_UNAVAILABLE")
    expect(allCodes).toContain("ORCHESTRATION_SLOT_CLOSED")
    expect(allCodes).toContain("ORCHESTRATION_SLOT_FORBIDDEN")
    expect(allCodes).toContain("ORCHESTRATION_EXPRESSION_FAILED")
    expect(allCodes).toContain("CONFIG_INVALID_REQUEST")
    expect(allCodes).toContain("ORCHESTRATION_DEFECT")
    expect(Object.keys(Failure.categoryOfCode).sort()).toEqual([...allCodes].sort())
  })

  it("maps every code to a SystemError of the code's own category (exhaustive)", () => {
    for (const code of allCodes) {
      const failure = sample(code)
      // the class's tag is the category the table names for the code
      expect(failure._tag).toBe(Failure.categoryOfCode[code])
      const error = toSystemError(failure)
      expect(error).toBeInstanceOf(SystemError)
      expect(error.code).toBe(code)
      expect(error.category).toBe(failure._tag)
      expect(error.message).toBe(`failed with ${code}`)
      expect(error.details.at).toBe("test")
    }
  })

  it("each category accepts only its own codes", () => {
    const decode = Schema.decodeUnknownEither(Failure.Failure)
    expect(
      decode({ _tag: "ToolFailure", code: "INFERENCE_ENGINE_ERROR", tool: "x", message: "m", retryable: false })._tag
    ).toBe("Left")
    expect(decode({ _tag: "ToolFailure", code: "TOOL_TIMEOUT", tool: "x", message: "m", retryable: true })._tag).toBe(
      "Right"
    )
  })

  it.effect("failures round-trip through the Schema.Union (the HTTP boundary)", () =>
    Effect.gen(function* () {
      for (const code of allCodes) {
        const failure = sample(code)
        const encoded = yield* Schema.encode(Failure.Failure)(failure)
        const json = JSON.parse(JSON.stringify(encoded))
        const decoded = yield* Schema.decodeUnknown(Failure.Failure)(json)
        expect(decoded._tag).toBe(failure._tag)
        expect(decoded.code).toBe(code)
      }
    })
  )

  it("carries tool names, raw text and causes into the SystemError", () => {
    const tool = toSystemError(
      new Failure.ToolFailure({ code: "TOOL_TIMEOUT", tool: "search", toolCallId: "c1", retryable: true, message: "slow" })
    )
    expect(tool.details).toMatchObject({ tool: "search", toolCallId: "c1" })
    expect(tool.retryable).toBe(true)
    const constraint = toSystemError(
      new Failure.ConstraintFailure({
        code: "CONSTRAINT_SCHEMA_INVALID",
        raw: '{"a":1}',
        violations: ["a: expected string"],
        retryable: true,
        message: "bad"
      })
    )
    expect(constraint.details).toMatchObject({ raw: '{"a":1}', violations: ["a: expected string"] })
    const caused = toSystemError(Failure.InferenceFailure.engineError("down", {}, new Error("ECONNREFUSED")))
    expect(caused.causedBy).toEqual({ name: "Error", message: "ECONNREFUSED" })
  })

  it("isRetryable reads the flag and rejects non-failures", () => {
    expect(Failure.isRetryable(Failure.InferenceFailure.engineError("x"))).toBe(true)
    expect(Failure.isRetryable(Failure.InferenceFailure.contextExceeded("x"))).toBe(false)
    expect(Failure.isRetryable(new Error("x"))).toBe(false)
  })

  it("one constructor per code, each with the code's retryability from the table", () => {
    const F = Failure
    const built: ReadonlyArray<Failure.Failure> = [
      F.InferenceFailure.engineError("x"),
      F.InferenceFailure.modelUnavailable("x"),
      F.InferenceFailure.contextExceeded("x"),
      F.InferenceFailure.malformed("x"),
      F.ToolFailure.notFound("t", "x"),
      F.ToolFailure.executionFailed("t", "x", { retryable: false }),
      F.ToolFailure.timeout("t", "x", { retryable: true }),
      F.ToolFailure.unavailable("t", "x", { retryable: false }),
      F.ConstraintFailure.grammarRejected("x"),
      F.ConstraintFailure.schemaInvalid("x"),
      F.ConstraintFailure.jsonInvalid("x"),
      F.ConstraintFailure.enumUnrecognized("x"),
      F.ValidationFailure.ruleFailed("x"),
      F.ValidationFailure.semanticFailed("x"),
      F.OrchestrationFailure.stepMismatch("x"),
      F.OrchestrationFailure.iterationLimit("x"),
      F.OrchestrationFailure.noConsensus("x"),
      F.OrchestrationFailure.defect("x"),
      F.OrchestrationFailure.replayDiverged("x"),
      F.OrchestrationFailure.stateUnavailable("x"),
      F.OrchestrationFailure.slotClosed("x"),
      F.OrchestrationFailure.expressionFailed("x"),
      F.OrchestrationFailure.slotForbidden("x"),
      F.OrchestrationFailure.capacityExceeded("x"),
      F.ConfigurationFailure.noEngine("x"),
      F.ConfigurationFailure.schemaRequired("x"),
      F.ConfigurationFailure.grammarNotFound("x"),
      F.ConfigurationFailure.invalidRequest("x"),
      F.Cancellation.timeout("x"),
      F.Cancellation.signal("x")
    ]
    // every code has exactly one constructor
    expect(new Set(built.map((f) => f.code))).toEqual(new Set(Object.keys(F.categoryOfCode)))
    for (const failure of built) {
      const rule = F.retryabilityOfCode[failure.code]
      if (rule !== "caller") expect(failure.retryable, failure.code).toBe(rule === "always")
      expect(F.categoryOfCode[failure.code]).toBe(failure._tag)
    }
    // the caller decides where the table says so
    expect(F.ToolFailure.executionFailed("t", "x", { retryable: true }).retryable).toBe(true)
    expect(F.ToolFailure.executionFailed("t", "x", { retryable: false }).retryable).toBe(false)
    // pinned: the seeds' rule that a failure the model must fix is re-asked, a configuration never retried
    expect(F.retryabilityOfCode).toMatchObject({
      CONSTRAINT_GRAMMAR_REJECTED: "always",
      CONSTRAINT_JSON_INVALID: "always",
      TOOL_NOT_FOUND: "never",
      INFERENCE_CONTEXT_EXCEEDED: "never",
      CONFIG_INVALID_REQUEST: "never",
      CANCELLED_SIGNAL: "never",
      // a store that is down comes back: the run resumes; a diverged history or a closed slot never changes
      ORCHESTRATION_STATE_UNAVAILABLE: "always",
      ORCHESTRATION_REPLAY_DIVERGED: "never",
      ORCHESTRATION_SLOT_CLOSED: "never",
      // an expression fails the same way on the same recorded inputs
      ORCHESTRATION_EXPRESSION_FAILED: "never",
      // a wrong secret stays wrong
      ORCHESTRATION_SLOT_FORBIDDEN: "never",
      // a place is freed when a run ends
      ORCHESTRATION_CAPACITY_EXCEEDED: "always"
    })
  })
})
