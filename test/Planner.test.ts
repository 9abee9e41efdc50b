import { describe, expect, it } from "@effect/vitest"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Plan from "../src/domain/Plan.js"
import { SystemRequest } from "../src/domain/System.js"
import * as ModelPlanner from "../src/layers/ModelPlanner.js"
import * as StaticPlanner from "../src/layers/StaticPlanner.js"
import * as Retriever from "../src/layers/MiniSearchRetriever.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import type { InferenceResult } from "../src/services/Engine.js"
import { Planner } from "../src/services/Planner.js"

const request = (text: string) =>
  Schema.decodeUnknownSync(SystemRequest)({ mode: "plan", messages: [{ role: "user", content: text }] })

const ragRoute: StaticPlanner.Route = {
  name: "rag",
  when: (r) => StaticPlanner.lastUserContent(r).endsWith("?"),
  rationale: "questions are answered from the documents",
  steps: (r) => [
    new Plan.Step({ name: "retrieve", type: "retrieve", input: StaticPlanner.lastUserContent(r) }),
    new Plan.Step({ name: "answer", type: "infer" })
  ]
}

const planJson = (draft: unknown) => ScriptedEngine.reply(JSON.stringify(draft))

describe("Planner", () => {
  describe("static", () => {
    it.effect("looks the request up in its table and traces the plan", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.UTC(2026, 0, 2))
        const planner = yield* Planner
        const plan = yield* planner.createPlan(request("How do interfaces work?"))
        expect(plan.steps.map((s) => [s.name, s.type, s.input])).toEqual([
          ["retrieve", "retrieve", "How do interfaces work?"],
          ["answer", "infer", undefined]
        ])
        expect(plan.trace).toMatchObject({
          plannerId: "docs",
          rationale: "questions are answered from the documents",
          stepCount: 2
        })
        expect(DateTime.formatIso(plan.trace!.createdAt)).toBe("2026-01-02T00:00:00.000Z")
      }).pipe(Effect.provide(StaticPlanner.layer({ id: "docs", routes: [ragRoute] }))))

    it.effect("no matching route is an OrchestrationFailure (rule noPlan)", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const error = yield* Effect.flip(planner.createPlan(request("Do something.")))
        expect(error._tag).toBe("OrchestrationFailure")
        expect(error.details).toMatchObject({ rule: "noPlan", planner: "docs" })
      }).pipe(Effect.provide(StaticPlanner.layer({ id: "docs", routes: [ragRoute] }))))

    it.effect("a route's plan is checked against the policy", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const error = yield* Effect.flip(planner.createPlan(request("Why?")))
        expect(error.details).toMatchObject({ rule: "allowedStepTypes", step: "answer" })
      }).pipe(
        Effect.provide(
          StaticPlanner.layer({
            routes: [ragRoute],
            policy: new Plan.PlanPolicy({ allowedStepTypes: ["retrieve"] })
          })
        )
      ))
  })

  describe("model-based", () => {
    it.effect("asks the engine for a plan constrained to the plan schema and traces its rationale", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const plan = yield* planner.createPlan(request("Summarize the Q4 report"))
        expect(plan.steps.map((s) => [s.name, s.type, s.input, s.dependsOn])).toEqual([
          ["find", "retrieve", "Q4 report", undefined],
          ["write", "infer", undefined, undefined]
        ])
        expect(plan.trace).toMatchObject({ plannerId: "llm", rationale: "find it, then summarize", stepCount: 2 })
        const [sent] = yield* ScriptedEngine.requests
        expect(sent!.schema).toEqual(Plan.draftJsonSchema(["retrieve", "infer"]))
        expect(sent!.messages.at(-1)!.content).toBe("Summarize the Q4 report")
        expect(sent!.messages[0]!.content).toContain("Step types: retrieve, infer.")
        expect(sent!.messages[0]!.content).toContain("at most 3 steps")
      }).pipe(
        Effect.provide(
          ModelPlanner.layer({
            id: "llm",
            policy: new Plan.PlanPolicy({ maxSteps: 3, allowedStepTypes: ["retrieve", "infer"] })
          })
        ),
        Effect.provide(
          ScriptedEngine.layer([
            planJson({
              rationale: "find it, then summarize",
              steps: [{ name: "find", type: "retrieve", input: "Q4 report" }, { name: "write", type: "infer" }]
            })
          ])
        )
      ))

    it.effect("a reply that is not a plan is retried on the Schedule; then a good plan is accepted", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const fiber = yield* Effect.fork(planner.createPlan(request("plan it")))
        yield* TestClock.adjust("10 seconds")
        const plan = yield* Fiber.join(fiber)
        expect(plan.steps.map((s) => s.name)).toEqual(["only"])
        expect(yield* ScriptedEngine.requests).toHaveLength(3)
      }).pipe(
        Effect.provide(ModelPlanner.layer()),
        Effect.provide(
          ScriptedEngine.layer([
            ScriptedEngine.reply("Sure! Here is a plan: retrieve then infer"),
            planJson({ rationale: "r", steps: [{ name: "", type: "infer" }] }),
            planJson({ rationale: "r", steps: [{ name: "only", type: "infer", input: "go" }] })
          ])
        )
      ))

    it.effect("after the retries the ConstraintFailure names the violations", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const fiber = yield* Effect.fork(planner.createPlan(request("plan it")))
        yield* TestClock.adjust("10 seconds")
        const error = yield* Effect.flip(Fiber.join(fiber))
        expect(error._tag).toBe("ConstraintFailure")
        expect(error.code).toBe("CONSTRAINT_SCHEMA_INVALID")
        if (error._tag === "ConstraintFailure") expect(error.violations).toContain("$.rationale: is missing")
      }).pipe(
        Effect.provide(ModelPlanner.layer()),
        Effect.provide(
          ScriptedEngine.layer([planJson({ steps: [] })], { whenExhausted: "repeat-last" })
        )
      ))

    it.effect("the model's plan is validated against the policy and the dependency rules", () =>
      Effect.gen(function* () {
        const planner = yield* Planner
        const tooLong = yield* Effect.flip(planner.createPlan(request("a")))
        expect(tooLong.code).toBe("ORCHESTRATION_ITERATION_LIMIT")
        const forbidden = yield* Effect.flip(planner.createPlan(request("b")))
        expect(forbidden.details).toMatchObject({ rule: "allowedStepTypes", type: "tool" })
        const cyclic = yield* Effect.flip(planner.createPlan(request("c")))
        expect(cyclic.details).toMatchObject({ rule: "cycle" })
      }).pipe(
        Effect.provide(
          ModelPlanner.layer({ policy: new Plan.PlanPolicy({ maxSteps: 2, allowedStepTypes: ["infer", "retrieve"] }) })
        ),
        Effect.provide(
          ScriptedEngine.layer([
            planJson({ rationale: "", steps: ["a", "b", "c"].map((name) => ({ name, type: "infer" })) }),
            planJson({ rationale: "", steps: [{ name: "t", type: "tool" }] }),
            planJson({
              rationale: "",
              steps: [{ name: "x", type: "infer", dependsOn: ["y"] }, { name: "y", type: "infer", dependsOn: ["x"] }]
            })
          ])
        )
      ))
  })

  it.effect("a planned plan runs on the PlanExecutor (plan -> execute)", () =>
    Effect.gen(function* () {
      const planner = yield* Planner
      const plan = yield* planner.createPlan(request("Which language has implicit interfaces?"))
      const executor = yield* PlanExecutor.make({ handlers: [PlanExecutor.retrieve(), PlanExecutor.infer()] })
      const outcome = yield* executor.execute(plan)
      expect(outcome._tag).toBe("Completed")
      if (outcome._tag === "Completed") {
        expect((outcome.output as InferenceResult).content).toBe("Go.")
        expect(outcome.trace.plannerId).toBe("static")
      }
      const [sent] = yield* ScriptedEngine.requests
      expect(sent!.messages[0]!.content).toBe("Relevant context:\n\n[1] (go-spec): Go interfaces are implicit.")
    }).pipe(
      Effect.provide(
        Layer.mergeAll(
          StaticPlanner.layer({ routes: [ragRoute] }),
          Retriever.layer([{ id: "1", source: "go-spec", content: "Go interfaces are implicit." }]),
          ScriptedEngine.layer([ScriptedEngine.reply("Go.")])
        )
      )
    ))
})

describe("Plan domain", () => {
  it.effect("plans, policies and traces decode from JSON (durations in ms, dates in ISO)", () =>
    Effect.gen(function* () {
      const policy = yield* Schema.decodeUnknown(Plan.PlanPolicy)({ maxSteps: 4, timeoutPerStep: 1500 })
      expect(policy.requireLinear).toBe(false)
      const plan = yield* Schema.decodeUnknown(Plan.ExecutionPlan)({
        steps: [{ name: "a", type: "infer", input: { any: "thing" }, dependsOn: [] }],
        trace: { plannerId: "p", rationale: "r", createdAt: "2026-01-01T00:00:00.000Z", stepCount: 1 }
      })
      expect(plan.steps[0]!.dependsOn).toEqual([])
      expect(yield* Schema.encode(Plan.ExecutionPlan)(plan)).toMatchObject({ trace: { createdAt: "2026-01-01T00:00:00.000Z" } })
      const bad = yield* Effect.flip(Schema.decodeUnknown(Plan.ExecutionPlan)({ steps: [{ name: "", type: "infer" }] }))
      expect(bad._tag).toBe("ParseError")
    }))
})
