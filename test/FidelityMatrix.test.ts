/**
 * Seeds 01-03 to the letter (issue #12): the pattern-failure matrix of seed 03,
 * row by row.
 *
 *   Pattern          Can emit                                                   Can recover from
 *   AgentLoop        Inference, Tool, Cancellation                              Tool (the error fed back)
 *   SpecializedLoop  Inference, Constraint, Validation, Cancellation            Constraint (repair), Validation (retry)
 *   PlanExecutor     all categories                                             Constraint, Validation (per step), Tool
 *   RedundantLoop    Inference, Constraint, Orchestration, Cancellation         Inference (other replicas), Constraint (repair)
 *
 * Each row twice: the loop's error channel is exactly the union the row lists
 * (checked by the type checker, `npx tsc`), and each category is raised by a
 * real fault (an engine that fails, a tool that breaks, a reply that is not
 * valid, a deadline); the recoveries are shown the same way.
 */
import { describe, expect, expectTypeOf, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type {
  Cancellation,
  ConfigurationFailure,
  ConstraintFailure,
  Failure,
  OrchestrationFailure,
  ToolFailure,
  ValidationFailure
} from "../src/domain/Failure.js"
import { InferenceFailure, ValidationFailure as ValidationFailureClass } from "../src/domain/Failure.js"
import * as Plan from "../src/domain/Plan.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as ModelReranker from "../src/layers/ModelReranker.js"
import * as RuleValidator from "../src/layers/RuleValidator.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Facade from "../src/programs/Facade.js"
import type * as PlanExecutor from "../src/programs/PlanExecutor.js"
import * as PlanExecutorProgram from "../src/programs/PlanExecutor.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as SpecializedLoop from "../src/programs/SpecializedLoop.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as Validator from "../src/services/Validator.js"
import { add, failing } from "./support/tools.js"

const bound = 20_000

const env = (script: ReadonlyArray<ScriptedEngine.Step>, options: ScriptedEngine.Options = {}) =>
  Layer.mergeAll(ScriptedEngine.layer(script, options), Constraint.layer, Registry.layer([add, failing]))

const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative") })
const down = () => ScriptedEngine.fail(InferenceFailure.modelUnavailable("the model is not loaded"))
const slow = () => ScriptedEngine.reply('{"sentiment":"positive"}', { delay: "10 seconds" })
const notInEnum = () => ScriptedEngine.reply('{"sentiment":"great"}')
const good = () => ScriptedEngine.reply('{"sentiment":"positive"}')

/** The failure `effect` ends with, the TestClock moved on (retries and deadlines wait on it). */
const failureOf = <E, R>(effect: Effect.Effect<unknown, E, R>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(Effect.flip(effect))
    yield* TestClock.adjust("1 minute")
    return yield* Fiber.join(fiber)
  })
const valueOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(effect)
    yield* TestClock.adjust("1 minute")
    return yield* Fiber.join(fiber)
  })

describe("the pattern-failure matrix, row by row", { timeout: bound }, () => {
  it("each loop's error channel is exactly its row's categories (a type-level check: npx tsc)", () => {
    type ChatError = Effect.Effect.Error<ReturnType<AgentLoop.AgentLoop["chat"]>>
    expectTypeOf<ChatError>().toEqualTypeOf<InferenceFailure | ToolFailure | Cancellation>()
    type StructuredTurnError = Effect.Effect.Error<ReturnType<typeof SpecializedLoop.call<unknown, ValidationFailure>>>
    expectTypeOf<StructuredTurnError>().toEqualTypeOf<InferenceFailure | ConstraintFailure | ValidationFailure | Cancellation>()
    type VoteError = Effect.Effect.Error<ReturnType<typeof RedundantLoop.run<unknown>>>
    expectTypeOf<VoteError>().toEqualTypeOf<InferenceFailure | ConstraintFailure | OrchestrationFailure | Cancellation>()
    // a plan's step may fail with any category; the plan itself is refused with an OrchestrationFailure
    type StepError = Extract<PlanExecutor.PlanOutcome, { readonly _tag: "Failed" }>["error"]
    expectTypeOf<StepError>().toEqualTypeOf<Failure>()
    expectTypeOf<Failure>().toEqualTypeOf<
      InferenceFailure | ToolFailure | ConstraintFailure | ValidationFailure | OrchestrationFailure | ConfigurationFailure | Cancellation
    >()
  })

  describe("AgentLoop: emits Inference, Tool, Cancellation; recovers from Tool", () => {
    const turn = (options: AgentLoop.Options = {}) => Effect.flatMap(AgentLoop.make(options), (agent) => agent.chat("2+2?"))

    it.effect("InferenceFailure: the engine has no model", () =>
      Effect.map(failureOf(turn()), (f) => expect(f).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_MODEL_UNAVAILABLE" })).pipe(
        Effect.provide(env([down()]))
      ))

    it.effect("ToolFailure: a tool breaks and the loop is told to fail", () =>
      Effect.map(failureOf(turn({ toolErrorMode: "fail" })), (f) => expect(f).toMatchObject({ _tag: "ToolFailure", code: "TOOL_EXECUTION_FAILED" })).pipe(
        Effect.provide(env([ScriptedEngine.toolCalls([{ name: "failing", arguments: {} }]), ScriptedEngine.reply("never")]))
      ))

    it.effect("Cancellation: the turn's deadline passes", () =>
      Effect.map(failureOf(turn({ turnTimeout: "1 second" })), (f) => expect(f).toMatchObject({ _tag: "Cancellation", code: "CANCELLED_TIMEOUT" })).pipe(
        Effect.provide(env([slow()]))
      ))

    it.effect("recovers from a ToolFailure: the error is fed back and the model answers", () =>
      Effect.gen(function* () {
        const result = yield* valueOf(turn())
        expect(result.content).toBe("The tool broke.")
        expect(result.toolCalls[0]).toMatchObject({ name: "failing", isError: true })
      }).pipe(Effect.provide(env([ScriptedEngine.toolCalls([{ name: "failing", arguments: {} }]), ScriptedEngine.reply("The tool broke.")]))))
  })

  describe("SpecializedLoop: emits Inference, Constraint, Validation, Cancellation; recovers from Constraint and Validation", () => {
    const positive = (value: { readonly sentiment: string }) =>
      value.sentiment === "positive" ? Effect.void : Effect.fail(ValidationFailureClass.ruleFailed("not positive", { failedRules: ["positive"] }))
    const call = (options: Partial<SpecializedLoop.Options<typeof Sentiment.Type, ValidationFailure>> = {}) =>
      SpecializedLoop.call("I love it", { schema: Sentiment, useTools: false, ...options })

    it.effect("InferenceFailure: the engine has no model", () =>
      Effect.map(failureOf(call()), (f) => expect(f._tag).toBe("InferenceFailure")).pipe(Effect.provide(env([down()]))))

    it.effect("ConstraintFailure: every reply is outside the schema's enum", () =>
      Effect.map(failureOf(call()), (f) => expect(f).toMatchObject({ _tag: "ConstraintFailure", code: "CONSTRAINT_ENUM_UNRECOGNIZED" })).pipe(
        Effect.provide(env([notInEnum(), notInEnum(), notInEnum()]))
      ))

    it.effect("ValidationFailure: every reply fails the caller's rule", () =>
      Effect.map(failureOf(call({ validate: positive, strictValidation: true })), (f) =>
        expect(f).toMatchObject({ _tag: "ValidationFailure", code: "VALIDATION_RULE_FAILED" })).pipe(
          Effect.provide(env(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"sentiment":"negative"}'))))
        ))

    it.effect("Cancellation: the call's deadline passes", () =>
      Effect.map(failureOf(call({ timeout: "1 second" })), (f) => expect(f).toMatchObject({ _tag: "Cancellation", code: "CANCELLED_TIMEOUT" })).pipe(
        Effect.provide(env([slow()]))
      ))

    it.effect("recovers from a ConstraintFailure by repair, and from a ValidationFailure by a retry", () =>
      Effect.gen(function* () {
        const repaired = yield* valueOf(call())
        expect(repaired).toMatchObject({ value: { sentiment: "positive" }, repaired: true, attempts: 1 })
        const retried = yield* valueOf(call({ validate: positive }))
        expect(retried).toMatchObject({ value: { sentiment: "positive" }, attempts: 2 })
      }).pipe(
        Effect.provide(env([ScriptedEngine.reply('{"sentiment":"positive"'), ScriptedEngine.reply('{"sentiment":"negative"}'), good()]))
      ))
  })

  describe("RedundantLoop: emits Inference, Constraint, Orchestration, Cancellation; recovers from Inference and Constraint", () => {
    const vote = (options: Partial<RedundantLoop.Options<typeof Sentiment.Type>> = {}) =>
      RedundantLoop.run("I love it", { schema: Sentiment, n: 3, concurrency: 1, ...options })

    it.effect("InferenceFailure: no replica gets an answer from the engine", () =>
      Effect.map(failureOf(vote()), (f) => expect(f).toMatchObject({ _tag: "InferenceFailure", code: "INFERENCE_MODEL_UNAVAILABLE" })).pipe(
        Effect.provide(env([down(), down(), down()]))
      ))

    it.effect("ConstraintFailure: no replica's answer fits the schema", () =>
      Effect.map(failureOf(vote()), (f) => expect(f._tag).toBe("ConstraintFailure")).pipe(
        Effect.provide(env([notInEnum(), notInEnum(), notInEnum()]))
      ))

    it.effect("OrchestrationFailure: valid answers, but fewer than the quorum", () =>
      Effect.map(failureOf(vote({ quorum: 3 })), (f) => expect(f).toMatchObject({ _tag: "OrchestrationFailure", code: "ORCHESTRATION_NO_CONSENSUS" })).pipe(
        Effect.provide(env([good(), down(), good()]))
      ))

    it.effect("Cancellation: the call's deadline passes", () =>
      Effect.map(failureOf(vote({ timeout: "1 second" })), (f) => expect(f).toMatchObject({ _tag: "Cancellation", code: "CANCELLED_TIMEOUT" })).pipe(
        Effect.provide(env([slow(), slow(), slow()]))
      ))

    it.effect("recovers from an InferenceFailure (the other replicas vote) and a ConstraintFailure (repaired per replica)", () =>
      Effect.gen(function* () {
        const result = yield* valueOf(vote())
        expect(result.value).toEqual({ sentiment: "positive" })
        expect(result.replicas.map((r) => r._tag)).toEqual(["Failed", "Valid", "Valid"])
        expect(result.validation.repairAttempts).toBe(1)
      }).pipe(Effect.provide(env([down(), ScriptedEngine.reply('{"sentiment":"positive"'), good()]))))
  })

  describe("PlanExecutor (mode plan): emits every category; recovers from Constraint and Validation per step, and Tool", () => {
    const decode = Schema.decodeUnknownSync(SystemRequest)
    const plan = (steps: ReadonlyArray<Record<string, unknown>>, options: Facade.Options = {}) =>
      Effect.gen(function* () {
        const system = yield* Facade.make(options)
        const fiber = yield* Effect.fork(system.run(decode({ mode: "plan", messages: [], plan: { steps } })))
        yield* TestClock.adjust("1 minute")
        return yield* Fiber.join(fiber)
      })
    const categoryOf = (steps: ReadonlyArray<Record<string, unknown>>, options: Facade.Options = {}) =>
      Effect.map(plan(steps, options), (response) => [response.error?.category, response.error?.code])
    const candidates = { query: "weather", candidates: [{ content: "It is sunny.", source: "a", score: 0 }] }
    const withPlanServices = (script: ReadonlyArray<ScriptedEngine.Step>, options: ScriptedEngine.Options = {}) =>
      Layer.mergeAll(
        Layer.provideMerge(ModelReranker.layer(), env(script, options)),
        RuleValidator.layer([Validator.pattern(/sunny/, { name: "mentions the sun" })])
      )

    it.effect("InferenceFailure: an infer step's engine has no model", () =>
      Effect.map(categoryOf([{ name: "a", type: "infer", input: "hi" }]), (c) => expect(c).toEqual(["InferenceFailure", "INFERENCE_MODEL_UNAVAILABLE"])).pipe(
        Effect.provide(withPlanServices([down()]))
      ))

    it.effect("ToolFailure: a tool step's tool breaks", () =>
      Effect.map(categoryOf([{ name: "t", type: "tool", input: { name: "failing" } }]), (c) => expect(c).toEqual(["ToolFailure", "TOOL_EXECUTION_FAILED"])).pipe(
        Effect.provide(withPlanServices([]))
      ))

    it.effect("ConstraintFailure: a rerank step's model never answers in the score's shape", () =>
      Effect.map(categoryOf([{ name: "r", type: "rerank", input: candidates }]), (c) => expect(c[0]).toBe("ConstraintFailure")).pipe(
        Effect.provide(withPlanServices([ScriptedEngine.reply("very relevant")], { whenExhausted: "repeat-last" }))
      ))

    it.effect("ValidationFailure: a validate step's rule fails", () =>
      Effect.map(
        categoryOf([{ name: "a", type: "infer", input: "weather?" }, { name: "check", type: "validate" }]),
        (c) => expect(c).toEqual(["ValidationFailure", "VALIDATION_RULE_FAILED"])
      ).pipe(Effect.provide(withPlanServices([ScriptedEngine.reply("It rains.")], { whenExhausted: "repeat-last" }))))

    it.effect("OrchestrationFailure: a step gets input of the wrong type", () =>
      Effect.map(categoryOf([{ name: "a", type: "infer", input: 42 }]), (c) => expect(c).toEqual(["OrchestrationFailure", "ORCHESTRATION_STEP_MISMATCH"])).pipe(
        Effect.provide(withPlanServices([]))
      ))

    it.effect("ConfigurationFailure: no plan in the request and no Planner to make one", () =>
      Effect.gen(function* () {
        const system = yield* Facade.make()
        const response = yield* system.run(decode({ mode: "plan", messages: [{ role: "user", content: "plan it" }] }))
        expect(response.error).toMatchObject({ category: "ConfigurationFailure", code: "CONFIG_INVALID_REQUEST" })
      }).pipe(Effect.provide(withPlanServices([]))))

    it.effect("Cancellation: a step passes the policy's time per step", () =>
      Effect.map(
        categoryOf([{ name: "a", type: "infer", input: "hi" }], { planPolicy: new Plan.PlanPolicy({ timeoutPerStep: Duration.seconds(1) }) }),
        (c) => expect(c).toEqual(["Cancellation", "CANCELLED_TIMEOUT"])
      ).pipe(Effect.provide(withPlanServices([slow()]))))

    it.effect("recovers from a ConstraintFailure: the step is run again and its next answer scores", () =>
      Effect.gen(function* () {
        const response = yield* plan([{ name: "r", type: "rerank", input: candidates }])
        expect(response.error).toBeUndefined()
        expect(response.confidence).toBe(0.7)
      }).pipe(Effect.provide(withPlanServices([ScriptedEngine.reply("very relevant"), ScriptedEngine.reply('{"score":0.7}')]))))

    it.effect("recovers from a ValidationFailure per step: the validated step is run again and its next answer passes", () =>
      Effect.gen(function* () {
        const checkedInfer = PlanExecutorProgram.validatedBy(PlanExecutorProgram.infer(), (result) => result.content)
        const response = yield* plan([{ name: "a", type: "infer", input: "weather?" }], { planHandlers: [checkedInfer] })
        expect(response.error).toBeUndefined()
        expect(response.content).toBe("It is sunny.")
        expect(yield* ScriptedEngine.requests).toHaveLength(2)
      }).pipe(Effect.provide(withPlanServices([ScriptedEngine.reply("It rains."), ScriptedEngine.reply("It is sunny.")]))))

    describe("recovers from a ToolFailure when its step uses tools", () => {
      let runs = 0
      const flaky = Tool.make({
        name: "flaky",
        description: "Fails on its first run",
        parameters: Schema.Struct({}),
        idempotent: true,
        handler: () => (++runs === 1 ? Effect.fail("the service blinked") : Effect.succeed("ok"))
      })
      const withFlaky = Layer.mergeAll(ScriptedEngine.layer([]), Constraint.layer, Registry.layer([flaky]))
      const steps = [{ name: "t", type: "tool", input: { name: "flaky", arguments: {} } }]

      it.effect("planRetryOn retryable: an idempotent tool that failed is run again", () =>
        Effect.gen(function* () {
          runs = 0
          const response = yield* plan(steps, { planRetryOn: "retryable" })
          expect(response.error).toBeUndefined()
          expect(response.content).toContain("ok")
          expect(runs).toBe(2)
        }).pipe(Effect.provide(withFlaky)))

      it.effect("by default the step's ToolFailure is the plan's error (a tool failure is not VALIDATE's to retry)", () =>
        Effect.gen(function* () {
          runs = 0
          const response = yield* plan(steps)
          expect(response.error).toMatchObject({ category: "ToolFailure", code: "TOOL_EXECUTION_FAILED", retryable: true })
          expect(runs).toBe(1)
        }).pipe(Effect.provide(withFlaky)))
    })
  })
})
