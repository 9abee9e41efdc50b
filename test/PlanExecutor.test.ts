import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import type * as Event from "../src/domain/Event.js"
import type { Failure } from "../src/domain/Failure.js"
import { OrchestrationFailure, ToolFailure, ValidationFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as Plan from "../src/domain/Plan.js"
import * as ContextBuilder from "../src/layers/RetrieverContextProvider.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as Retriever from "../src/layers/MiniSearchRetriever.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ConstraintLayer from "../src/layers/JsonConstraint.js"
import * as ValidatorLayer from "../src/layers/RuleValidator.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Lifecycle from "../src/programs/Lifecycle.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as SpecializedLoop from "../src/programs/SpecializedLoop.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import type { InferenceResult } from "../src/services/Engine.js"
import { EventLog } from "../src/services/EventLog.js"
import * as Validator from "../src/services/Validator.js"
import { add } from "./support/tools.js"

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

const step = (
  name: string,
  type: string,
  fields: { readonly input?: unknown; readonly dependsOn?: ReadonlyArray<string> } = {}
) => new Plan.Step({ name, type, ...fields })

const plan = (...steps: ReadonlyArray<Plan.Step>) => new Plan.ExecutionPlan({ steps })

const upper = PlanExecutor.handler("upper", {
  input: Schema.String,
  output: Schema.String,
  run: (s) => Effect.succeed(s.toUpperCase())
})

const length = PlanExecutor.handler("length", {
  input: Schema.String,
  output: Schema.Number,
  run: (s) => Effect.succeed(s.length)
})

const double = PlanExecutor.handler("double", {
  input: Schema.Number,
  output: Schema.Number,
  run: (n) => Effect.succeed(n * 2)
})

/** A step that records that it ran, then takes `seconds` of Clock time and echoes its input. */
const sleeper = (ran: Ref.Ref<ReadonlyArray<string>>, seconds = 1) =>
  PlanExecutor.handler("sleep", {
    input: Schema.Unknown,
    output: Schema.Unknown,
    run: (input, { step }) =>
      Effect.zipRight(
        Ref.update(ran, (r) => [...r, step.name]),
        Effect.as(Effect.sleep(`${seconds} seconds`), input)
      )
  })

const failed = (outcome: PlanExecutor.PlanOutcome) => {
  if (outcome._tag !== "Failed") throw new Error(`expected Failed, got ${outcome._tag}`)
  return outcome
}

const completed = (outcome: PlanExecutor.PlanOutcome) => {
  if (outcome._tag !== "Completed") {
    throw new Error(`expected Completed, got Failed at ${outcome.failedStep}: ${outcome.error.message}`)
  }
  return outcome
}

const rejection = <A>(either: Either.Either<A, OrchestrationFailure>) => {
  if (Either.isRight(either)) throw new Error("expected the plan to be rejected")
  return either.left
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

describe("PlanExecutor", () => {
  describe("typed steps", () => {
    it.effect("chains step N's output into step N+1 when its input is absent", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper, length, double] })
        const outcome = completed(
          yield* executor.execute(plan(step("up", "upper", { input: "abc" }), step("len", "length"), step("x2", "double")))
        )
        expect(outcome.steps.map((s) => [s.name, s.input, s.output])).toEqual([
          ["up", "abc", "ABC"],
          ["len", "ABC", 3],
          ["x2", 3, 6]
        ])
        expect(outcome.output).toBe(6)
        expect(outcome.steps.every((s) => s.attempts === 1)).toBe(true)
      }))

    it.effect("a step's scoped resource is the run's: released when the run ends, not bound to the scope the executor was made in", () =>
      Effect.gen(function* () {
        const log: Array<string> = []
        const scoped = PlanExecutor.handler("scoped", {
          input: Schema.String,
          output: Schema.String,
          run: (s) =>
            Effect.as(
              Effect.acquireRelease(Effect.sync(() => log.push(`acquire ${s}`)), () => Effect.sync(() => log.push(`release ${s}`))),
              s
            )
        })
        // made in a scope that is closed before any plan runs
        const executor = yield* Effect.scoped(PlanExecutor.make({ handlers: [scoped] }))
        const outcome = yield* Effect.scoped(
          Effect.tap(executor.execute(plan(step("a", "scoped", { input: "a" }), step("b", "scoped", { input: "b", dependsOn: ["a"] }))), () =>
            Effect.sync(() => log.push("run ended")))
        )
        expect(outcome._tag).toBe("Completed")
        // the run's own scope: released in reverse when the plan's run ends (a closed scope would have released
        // each at once, before the next step acquired its own)
        expect(log).toEqual(["acquire a", "acquire b", "release b", "release a", "run ended"])
      }))

    it.effect("an output of the wrong type is ORCHESTRATION_STEP_MISMATCH on the output side; a right one is encoded by the output schema", () =>
      Effect.gen(function* () {
        const liar = PlanExecutor.handler("liar", {
          input: Schema.String,
          output: Schema.Number,
          run: (s) => Effect.succeed(s as unknown as number)
        })
        const asText = PlanExecutor.handler("asText", {
          input: Schema.String,
          output: Schema.NumberFromString,
          run: (s) => Effect.succeed(s.length)
        })
        const executor = yield* PlanExecutor.make({ handlers: [liar, asText] })
        const failed = yield* executor.execute(plan(step("a", "asText", { input: "abc" }), step("b", "liar", { input: "x", dependsOn: ["a"] })))
        if (failed._tag !== "Failed") return expect.fail(`expected Failed, got ${failed._tag}`)
        expect(failed.error).toMatchObject({ code: "ORCHESTRATION_STEP_MISMATCH", details: { step: "b", side: "output" } })
        // the step before it completed: its output as the handler made it, and encoded by its schema
        expect(failed.completed.map((r) => [r.name, r.output, r.encoded])).toEqual([["a", 3, "3"]])
        expect(PlanExecutor.encodedOutputs(failed.completed)).toEqual({ a: "3" })
      }))

    it.effect("an explicit input overrides the chained output", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper, length] })
        const outcome = completed(
          yield* executor.execute(plan(step("up", "upper", { input: "abc" }), step("len", "length", { input: "override" })))
        )
        expect(outcome.steps[1]!.input).toBe("override")
        expect(outcome.output).toBe(8)
      }))

    it.effect("a wrong chained input is ORCHESTRATION_STEP_MISMATCH at that step, with the earlier steps kept", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper, double] })
        const outcome = failed(yield* executor.execute(plan(step("up", "upper", { input: "abc" }), step("x2", "double"))))
        expect(outcome.failedStep).toBe("x2")
        expect(outcome.error._tag).toBe("OrchestrationFailure")
        expect(outcome.error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
        expect(outcome.error.details).toMatchObject({ step: "x2", type: "double", side: "input" })
        expect(outcome.completed.map((s) => s.name)).toEqual(["up"])
      }))

    it.effect("the mismatch names the path of the bad field", () =>
      Effect.gen(function* () {
        const search = PlanExecutor.handler("search", {
          input: Schema.Struct({ query: Schema.String, options: Schema.Struct({ limit: Schema.Number }) }),
          output: Schema.String,
          run: (i) => Effect.succeed(i.query)
        })
        const executor = yield* PlanExecutor.make({ handlers: [search] })
        const outcome = failed(
          yield* executor.execute(plan(step("s", "search", { input: { query: "q", options: { limit: "ten" } } })))
        )
        expect(outcome.error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
        expect(outcome.error.details["issues"]).toEqual([
          { path: "$.options.limit", message: "Expected number, actual \"ten\"" }
        ])
        expect(outcome.error.message).toContain("limit")
      }))

    it.effect("an output that breaks the handler's own output schema is a mismatch on the output side", () =>
      Effect.gen(function* () {
        const liar = PlanExecutor.handler("liar", {
          input: Schema.String,
          output: Schema.Number,
          // The type system is bypassed on purpose: a handler built from untyped code.
          run: (s) => Effect.succeed(s as unknown as number)
        })
        const executor = yield* PlanExecutor.make({ handlers: [liar] })
        const outcome = failed(yield* executor.execute(plan(step("l", "liar", { input: "x" }))))
        expect(outcome.error.details).toMatchObject({ step: "l", side: "output" })
      }))

    it.effect("a first step with no input gets `undefined`, which its schema rejects", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper] })
        const outcome = failed(yield* executor.execute(plan(step("up", "upper"))))
        expect(outcome.error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
      }))

    it.effect("a plan decoded from JSON runs (class inputs are decoded, not trusted)", () =>
      Effect.gen(function* () {
        const json = {
          steps: [
            { name: "up", type: "upper", input: "json" },
            { name: "len", type: "length" }
          ]
        }
        const decoded = yield* Schema.decodeUnknown(Plan.ExecutionPlan)(json)
        const executor = yield* PlanExecutor.make({ handlers: [upper, length] })
        expect(completed(yield* executor.execute(decoded)).output).toBe(4)
      }))
  })

  describe("checks before anything runs", () => {
    it.effect("an unknown step type is rejected and no step runs", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 0)] })
        const error = rejection(
          yield* Effect.either(executor.execute(plan(step("a", "sleep", { input: 1 }), step("b", "summarize"))))
        )
        expect(error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
        expect(error.details).toMatchObject({ rule: "unknownStepType", step: "b", type: "summarize" })
        expect(yield* Ref.get(ran)).toEqual([])
      }))

    it.effect("policy: max steps (ITERATION_LIMIT), allowed types, linear only", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 0), upper] })
        const three = plan(step("a", "sleep", { input: 1 }), step("b", "sleep"), step("c", "sleep"))

        const tooLong = rejection(
          yield* Effect.either(executor.execute(three, { policy: new Plan.PlanPolicy({ maxSteps: 2 }) }))
        )
        expect(tooLong.code).toBe("ORCHESTRATION_ITERATION_LIMIT")
        expect(tooLong.details).toMatchObject({ rule: "maxSteps", stepCount: 3, maxSteps: 2 })

        const notAllowed = rejection(
          yield* Effect.either(
            executor.execute(plan(step("a", "sleep", { input: 1 }), step("u", "upper", { input: "x" })), {
              policy: new Plan.PlanPolicy({ allowedStepTypes: ["sleep"] })
            })
          )
        )
        expect(notAllowed.details).toMatchObject({ rule: "allowedStepTypes", step: "u", type: "upper" })

        const parallel = plan(step("a", "sleep", { input: 1, dependsOn: [] }), step("b", "sleep", { input: 2, dependsOn: [] }))
        const notLinear = rejection(
          yield* Effect.either(executor.execute(parallel, { policy: new Plan.PlanPolicy({ requireLinear: true }) }))
        )
        expect(notLinear.details).toMatchObject({ rule: "requireLinear", step: "b" })

        // The same linear plan passes the same policy.
        const linear = completed(
          yield* executor.execute(three, { policy: new Plan.PlanPolicy({ requireLinear: true, maxSteps: 3 }) })
        )
        expect(linear.steps).toHaveLength(3)
        expect(yield* Ref.get(ran)).toEqual(["a", "b", "c"])
      }))

    it.effect("the executor's own policy applies when execute gives none", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({
          handlers: [upper],
          policy: new Plan.PlanPolicy({ allowedStepTypes: ["infer"] })
        })
        const error = rejection(yield* Effect.either(executor.execute(plan(step("u", "upper", { input: "x" })))))
        expect(error.details["rule"]).toBe("allowedStepTypes")
      }))

    it.effect("a dependency cycle is rejected, naming the cycle", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 0)] })
        const cyclic = plan(
          step("a", "sleep", { dependsOn: ["c"] }),
          step("b", "sleep", { dependsOn: ["a"] }),
          step("c", "sleep", { dependsOn: ["b"] }),
          step("d", "sleep", { input: 0, dependsOn: [] })
        )
        const error = rejection(yield* Effect.either(executor.execute(cyclic)))
        expect(error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
        expect(error.details["rule"]).toBe("cycle")
        expect(error.details["cycle"]).toEqual(["a", "b", "c", "a"])
        expect(error.message).toContain("a -> b -> c -> a")
        expect(yield* Ref.get(ran)).toEqual([])

        const self = rejection(yield* Effect.either(executor.execute(plan(step("a", "sleep", { dependsOn: ["a"] })))))
        expect(self.details["cycle"]).toEqual(["a", "a"])
      }))

    it.effect("unknown dependencies and duplicate names are rejected", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 0)] })
        const unknown = rejection(
          yield* Effect.either(executor.execute(plan(step("a", "sleep", { input: 1, dependsOn: ["ghost"] }))))
        )
        expect(unknown.details).toMatchObject({ rule: "unknownDependency", step: "a", dependency: "ghost" })
        const duplicate = rejection(
          yield* Effect.either(executor.execute(plan(step("a", "sleep", { input: 1 }), step("a", "sleep"))))
        )
        expect(duplicate.details).toMatchObject({ rule: "duplicateStep", step: "a" })
      }))
  })

  describe("dependencies and concurrency", () => {
    it.effect("two independent 1s steps both finish at t=1s; the join gets both outputs", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 1)] })
        const fiber = yield* Effect.fork(
          executor.execute(
            plan(
              step("a", "sleep", { input: "A", dependsOn: [] }),
              step("b", "sleep", { input: "B", dependsOn: [] }),
              step("join", "sleep", { dependsOn: ["a", "b"] })
            )
          )
        )
        yield* TestClock.adjust("1 second")
        expect(yield* Ref.get(ran)).toEqual(["a", "b", "join"])
        yield* TestClock.adjust("1 second")
        const outcome = completed(yield* Fiber.join(fiber))
        const at = Object.fromEntries(outcome.steps.map((s) => [s.name, [s.startedAt, s.finishedAt]]))
        expect(at).toEqual({ a: [0, 1000], b: [0, 1000], join: [1000, 2000] })
        expect(outcome.output).toEqual({ a: "A", b: "B" })
      }))

    it.effect("the concurrency cap serialises independent steps", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 1)], concurrency: 1 })
        const fiber = yield* Effect.fork(
          executor.execute(
            plan(step("a", "sleep", { input: 1, dependsOn: [] }), step("b", "sleep", { input: 2, dependsOn: [] }))
          )
        )
        yield* TestClock.adjust("1 second")
        expect(fiber.unsafePoll()).toBeNull()
        yield* TestClock.adjust("1 second")
        const outcome = completed(yield* Fiber.join(fiber))
        expect(outcome.steps.map((s) => s.finishedAt).sort()).toEqual([1000, 2000])
      }))

    it.effect("a step may depend on a non-adjacent step; absent dependsOn still means the previous step", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper, length, double] })
        const outcome = completed(
          yield* executor.execute(
            plan(
              step("up", "upper", { input: "abcd" }),
              step("other", "upper", { input: "zz", dependsOn: [] }),
              step("len", "length", { dependsOn: ["up"] }),
              step("x2", "double")
            )
          )
        )
        expect(outcome.steps.map((s) => [s.name, s.output])).toEqual([
          ["up", "ABCD"],
          ["other", "ZZ"],
          ["len", 4],
          ["x2", 8]
        ])
      }))
  })

  describe("failure, interruption, retries, timeouts", () => {
    it.effect("returns the completed steps and the typed error of the failing one", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const broken = PlanExecutor.handler("broken", {
          input: Schema.Unknown,
          output: Schema.Unknown,
          run: () =>
            Effect.fail(
              new ToolFailure({ code: "TOOL_EXECUTION_FAILED", tool: "search", retryable: false, message: "boom" })
            )
        })
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 0), broken] })
        const outcome = failed(
          yield* executor.execute(plan(step("one", "sleep", { input: 1 }), step("two", "broken"), step("three", "sleep")))
        )
        expect(outcome.completed.map((s) => [s.name, s.output])).toEqual([["one", 1]])
        expect(outcome.failedStep).toBe("two")
        expect(outcome.error).toBeInstanceOf(ToolFailure)
        expect(outcome.error.code).toBe("TOOL_EXECUTION_FAILED")
        expect(yield* Ref.get(ran)).toEqual(["one"])
      }))

    it.effect("`stop` ends the run between steps: the running step finishes, the next never starts", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const signal = yield* Deferred.make<void>()
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 1)] })
        const fiber = yield* Effect.fork(
          executor.execute(plan(step("one", "sleep", { input: 1 }), step("two", "sleep"), step("three", "sleep")), {
            stop: Deferred.await(signal)
          })
        )
        yield* TestClock.adjust("500 millis")
        yield* Deferred.succeed(signal, undefined)
        yield* TestClock.adjust("1 second")
        const outcome = failed(yield* Fiber.join(fiber))
        expect(outcome.completed.map((s) => [s.name, s.finishedAt])).toEqual([["one", 1000]])
        expect(outcome.failedStep).toBe("two")
        expect(outcome.error.code).toBe("CANCELLED_SIGNAL")
        expect(yield* Ref.get(ran)).toEqual(["one"])
      }))

    it.effect("interrupting the run interrupts the running step; later steps never start", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 1)] })
        const fiber = yield* Effect.fork(
          executor.execute(plan(step("one", "sleep", { input: 1 }), step("two", "sleep")))
        )
        yield* TestClock.adjust("500 millis")
        yield* Fiber.interrupt(fiber)
        yield* TestClock.adjust("5 seconds")
        expect(yield* Ref.get(ran)).toEqual(["one"])
      }))

    it.effect("a step rejected by validation is re-run on the Schedule until it passes", () =>
      Effect.gen(function* () {
        const calls = yield* Ref.make(0)
        const draft = PlanExecutor.handler("draft", {
          input: Schema.String,
          output: Schema.String,
          run: (topic) => Effect.map(Ref.updateAndGet(calls, (n) => n + 1), (n) => n < 3 ? "short" : `a long essay on ${topic}`)
        })
        const checked = PlanExecutor.validatedBy(draft, (s) => s, [Validator.length({ min: 10 })])
        const executor = yield* PlanExecutor.make({ handlers: [checked] })
        const fiber = yield* Effect.fork(executor.execute(plan(step("d", "draft", { input: "effects" }))))
        yield* TestClock.adjust("10 seconds")
        const outcome = completed(yield* Fiber.join(fiber))
        expect(outcome.output).toBe("a long essay on effects")
        expect(outcome.steps[0]!.attempts).toBe(3)
      }).pipe(Effect.provide(ValidatorLayer.layer())))

    it.effect("retries are bounded: after the schedule the ValidationFailure is the step's error", () =>
      Effect.gen(function* () {
        const calls = yield* Ref.make(0)
        const draft = PlanExecutor.withValidation(
          PlanExecutor.handler("draft", {
            input: Schema.String,
            output: Schema.String,
            run: () => Effect.as(Ref.update(calls, (n) => n + 1), "short")
          }),
          () =>
            Effect.fail(
              new ValidationFailure({ code: "VALIDATION_RULE_FAILED", retryable: true, message: "too short", failedRules: ["length"] })
            )
        )
        const executor = yield* PlanExecutor.make({ handlers: [draft] })
        const fiber = yield* Effect.fork(executor.execute(plan(step("d", "draft", { input: "x" }))))
        yield* TestClock.adjust("10 seconds")
        const outcome = failed(yield* Fiber.join(fiber))
        expect(outcome.error.code).toBe("VALIDATION_RULE_FAILED")
        expect(yield* Ref.get(calls)).toBe(3)
      }))

    it.effect("inside a tracked request: retries move EXECUTE -> VALIDATE -> EXECUTE, steps are counted", () =>
      Effect.gen(function* () {
        const tracker = yield* Lifecycle.makeTracker
        yield* tracker.transition("PLAN", "planned")
        yield* tracker.transition("PREPARE", "prepared")
        yield* tracker.transition("EXECUTE", "run the plan")
        const calls = yield* Ref.make(0)
        const draft = PlanExecutor.validatedBy(
          PlanExecutor.handler("draft", {
            input: Schema.String,
            output: Schema.String,
            run: () => Effect.map(Ref.updateAndGet(calls, (n) => n + 1), (n) => n === 1 ? "no" : "long enough")
          }),
          (s) => s,
          [Validator.length({ min: 5 })]
        )
        const executor = yield* PlanExecutor.make({ handlers: [draft, upper] })
        const fiber = yield* Effect.fork(
          executor.execute(plan(step("d", "draft", { input: "x" }), step("u", "upper"))).pipe(Lifecycle.tracked(tracker))
        )
        yield* TestClock.adjust("10 seconds")
        completed(yield* Fiber.join(fiber))
        const history = yield* tracker.history
        expect(history.slice(3)).toEqual([{ from: "EXECUTE", to: "VALIDATE" }, { from: "VALIDATE", to: "EXECUTE" }])
        const state = yield* tracker.state
        expect(state).toMatchObject({ current: "EXECUTE", attempt: 2, totalSteps: 2, lastStep: "u" })
      }).pipe(Effect.provide(ValidatorLayer.layer())))

    it.effect("failures outside Constraint/Validation, and non-retryable ones, are not retried", () =>
      Effect.gen(function* () {
        const calls = yield* Ref.make(0)
        const flaky = (failure: Failure) =>
          PlanExecutor.handler("flaky", {
            input: Schema.Unknown,
            output: Schema.Unknown,
            run: () => Effect.zipRight(Ref.update(calls, (n) => n + 1), Effect.fail(failure))
          })
        const tool = new ToolFailure({ code: "TOOL_TIMEOUT", tool: "t", retryable: true, message: "slow" })
        const rule = new ValidationFailure({ code: "VALIDATION_SEMANTIC_FAILED", retryable: false, message: "nonsense" })
        for (const failure of [tool, rule]) {
          yield* Ref.set(calls, 0)
          const executor = yield* PlanExecutor.make({ handlers: [flaky(failure)] })
          const outcome = failed(yield* executor.execute(plan(step("f", "flaky", { input: 1 }))))
          expect([outcome.error._tag, outcome.error.code]).toEqual([failure._tag, failure.code])
          expect(yield* Ref.get(calls)).toBe(1)
        }
      }))

    it.effect("a step past timeoutPerStep fails with CANCELLED_TIMEOUT", () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make<ReadonlyArray<string>>([])
        const executor = yield* PlanExecutor.make({ handlers: [sleeper(ran, 5)] })
        const fiber = yield* Effect.fork(
          executor.execute(plan(step("slow", "sleep", { input: 1 })), {
            policy: new Plan.PlanPolicy({ timeoutPerStep: Duration.seconds(1) })
          })
        )
        yield* TestClock.adjust("1 second")
        const outcome = failed(yield* Fiber.join(fiber))
        expect(outcome.error._tag).toBe("Cancellation")
        expect(outcome.error.code).toBe("CANCELLED_TIMEOUT")
        expect(outcome.error.details).toMatchObject({ step: "slow", timeoutMs: 1000 })
      }))
  })

  describe("built-in handlers", () => {
    const documents = [
      { id: "1", source: "go-spec", content: "Interfaces in Go are satisfied implicitly by any type with the methods." },
      { id: "2", source: "cookbook", content: "Boil pasta in salted water for nine minutes." },
      { id: "3", source: "effective-go", content: "Go interfaces with one method are named with an -er suffix." }
    ]

    it.effect("retrieve -> rerank -> infer: BM25 candidates, reranked, formatted with sources into the prompt", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({
          handlers: [PlanExecutor.retrieve({ limit: 3 }), PlanExecutor.rerank({ topK: 2 }), PlanExecutor.infer()]
        })
        const outcome = completed(
          yield* executor.execute(
            plan(
              step("retrieve", "retrieve", { input: "How do interfaces work in Go?" }),
              step("rerank", "rerank"),
              step("infer", "infer")
            )
          )
        )
        const retrieved = outcome.steps[0]!.output as PlanExecutor.CandidateSet
        // "in" matches the cookbook too, but BM25 ranks it last.
        expect(retrieved.candidates.map((c) => c.source).at(-1)).toBe("cookbook")
        const reranked = outcome.steps[1]!.output as PlanExecutor.CandidateSet
        expect(reranked.candidates.map((c) => c.source).sort()).toEqual(["effective-go", "go-spec"])
        expect((outcome.output as InferenceResult).content).toBe("Implicitly.")
        const [request] = yield* ScriptedEngine.requests
        expect(request!.messages.map((m) => m.role)).toEqual(["system", "user"])
        expect(request!.messages[0]!.content).toBe(
          `Relevant context:\n\n[1] (${reranked.candidates[0]!.source}): ${reranked.candidates[0]!.content}\n` +
            `[2] (${reranked.candidates[1]!.source}): ${reranked.candidates[1]!.content}`
        )
        expect(request!.messages[1]!.content).toBe("How do interfaces work in Go?")
        // Encoded outputs are JSON-ready.
        expect(JSON.parse(JSON.stringify(outcome.steps[2]!.encoded))).toMatchObject({ content: "Implicitly." })
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            Retriever.layer(documents),
            LexicalReranker.layer(),
            ScriptedEngine.layer([ScriptedEngine.reply("Implicitly.")])
          )
        )
      ))

    it.effect("retrieve over a ContextProvider -> infer puts the context before the question", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({
          handlers: [PlanExecutor.retrieveContext(), PlanExecutor.infer({ systemPrompt: "Be brief." })]
        })
        completed(
          yield* executor.execute(plan(step("retrieve", "retrieve", { input: "pasta" }), step("infer", "infer")))
        )
        const [request] = yield* ScriptedEngine.requests
        expect(request!.messages.map((m) => [m.role, m.content])).toEqual([
          ["system", "Be brief."],
          ["system", "Relevant context:\n\n[1] (cookbook): Boil pasta in salted water for nine minutes."],
          ["user", "pasta"]
        ])
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ContextBuilder.layer({ maxChunks: 2 }).pipe(Layer.provide(Retriever.layer(documents))),
            ScriptedEngine.layer([ScriptedEngine.reply("Nine minutes.")])
          )
        )
      ))

    it.effect("infer -> validate passes the content through with its report; a failing rule stops the plan", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [PlanExecutor.infer(), PlanExecutor.validate()] })
        const ok = completed(
          yield* executor.execute(plan(step("infer", "infer", { input: "Say hi" }), step("validate", "validate")))
        )
        const validated = ok.output as PlanExecutor.Validated
        expect(validated.content).toBe("Hello there, friend.")
        expect(validated.report.passRate).toBe(1)
        expect(validated.report.confidence).toEqual({ value: 1, source: "validation" })

        const bad = failed(
          yield* executor.execute(plan(step("infer", "infer", { input: "Say hi" }), step("validate", "validate")))
        )
        expect(bad.failedStep).toBe("validate")
        expect(bad.error.code).toBe("VALIDATION_RULE_FAILED")
        expect((bad.error as ValidationFailure).failedRules).toEqual(["length(10..inf)"])
        expect(bad.completed.map((s) => s.name)).toEqual(["infer"])
        // validate is deterministic: it is not re-run, and the engine is not asked again.
        expect(yield* ScriptedEngine.requests).toHaveLength(2)
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ValidatorLayer.layer([Validator.length({ min: 10 })]),
            ScriptedEngine.layer([ScriptedEngine.reply("Hello there, friend."), ScriptedEngine.reply("Hi")])
          )
        )
      ))

    it.effect("tool runs a registered tool; an unknown tool is TOOL_NOT_FOUND", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [PlanExecutor.tool()] })
        const ok = completed(
          yield* executor.execute(plan(step("sum", "tool", { input: { name: "add", arguments: { a: 2, b: 3 } } })))
        )
        expect(ok.output).toEqual({ id: "sum", name: "add", content: "5", value: "5" })
        const missing = failed(yield* executor.execute(plan(step("x", "tool", { input: { name: "nope" } }))))
        expect(missing.error.code).toBe("TOOL_NOT_FOUND")
      }).pipe(Effect.provide(Registry.layer([add]))))

    it.effect("steps carry step_name in their events; the plan trace is recorded", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [upper, length] })
        const outcome = completed(
          yield* executor.execute(plan(step("up", "upper", { input: "abc" }), step("len", "length")))
        )
        expect(outcome.trace).toMatchObject({ plannerId: "manual", stepCount: 2 })
        const events = (yield* Effect.flatMap(EventLog, (log) => log.events)) as ReadonlyArray<Event.Custom>
        expect(events.map((e) => [e.action, e.correlation.stepName])).toEqual([
          ["plan.trace", undefined],
          ["plan.step.start", "up"],
          ["plan.step.end", "up"],
          ["plan.step.start", "len"],
          ["plan.step.end", "len"]
        ])
      }).pipe(Effect.provide(Observe.eventLogMemory)))
  })

  describe("composition (seed 01)", () => {
    it.effect("research with an AgentLoop (tools), then classify with another loop, auto-chained", () =>
      Effect.gen(function* () {
        const research = PlanExecutor.fromProgram("research", Schema.String, Schema.String, (prompt) =>
          Effect.flatMap(
            AgentLoop.make({ systemPrompt: "You are a research assistant." }),
            (agent) => Effect.map(agent.chat(prompt), (r) => r.content)
          ))
        const Classification = Schema.Struct({ trend: Schema.Literal("up", "down", "flat") })
        const classify = PlanExecutor.fromProgram("classify", Schema.String, Classification, (text) =>
          Effect.flatMap(AgentLoop.make({ systemPrompt: "Classify the trend." }), (agent) =>
            Effect.flatMap(
              agent.chat(text),
              (r) =>
                Effect.mapError(
                  Schema.decodeUnknown(Schema.parseJson(Classification))(r.content),
                  (e) =>
                    new ValidationFailure({
                      code: "VALIDATION_RULE_FAILED",
                      retryable: true,
                      message: e.message,
                      failedRules: ["classification"]
                    })
                )
            )))
        const executor = yield* PlanExecutor.make({ handlers: [research, classify] })
        const outcome = completed(
          yield* executor.execute(
            plan(step("research", "research", { input: "Analyze market trends for Q4 (2+3 regions)" }), step("classify", "classify"))
          )
        )
        expect(outcome.steps[0]!.output).toBe("Q4 grew in 5 regions.")
        expect(outcome.output).toEqual({ trend: "up" })
        const requests = yield* ScriptedEngine.requests
        // research: asks for the tool, then answers; classify: gets the research output as its prompt.
        expect(requests).toHaveLength(3)
        expect(requests[2]!.messages.at(-1)).toEqual(Message.user("Q4 grew in 5 regions."))
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            Registry.layer([add]),
            ScriptedEngine.layer([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]),
              ScriptedEngine.reply("Q4 grew in 5 regions."),
              ScriptedEngine.reply("{\"trend\":\"up\"}")
            ])
          )
        )
      ))
  })

  describe("composition with SpecializedLoop", () => {
    it.effect("research (AgentLoop with a tool) -> classify (SpecializedLoop with a schema), typed end to end", () =>
      Effect.gen(function* () {
        const Trend = Schema.Struct({ trend: Schema.Literal("up", "down", "flat") })
        const research = PlanExecutor.fromProgram("research", Schema.String, Schema.String, (prompt) =>
          Effect.flatMap(
            AgentLoop.make({ systemPrompt: "You are a research assistant." }),
            (agent) => Effect.map(agent.chat(prompt), (r) => r.content)
          ))
        const classify = PlanExecutor.fromProgram("classify", Schema.String, Trend, (text) =>
          Effect.map(
            SpecializedLoop.call(text, { schema: Trend, systemPrompt: "Classify the trend.", useTools: false }),
            (r) => r.value
          ))
        const executor = yield* PlanExecutor.make({ handlers: [research, classify] })
        const fiber = yield* Effect.fork(
          executor.execute(
            plan(step("research", "research", { input: "Analyze market trends for Q4" }), step("classify", "classify"))
          )
        )
        // The classifier's first reply is outside the enum: SpecializedLoop re-prompts on its Schedule.
        yield* TestClock.adjust("10 seconds")
        const outcome = completed(yield* Fiber.join(fiber))
        expect(outcome.output).toEqual({ trend: "up" })
        const requests = yield* ScriptedEngine.requests
        expect(requests).toHaveLength(4)
        // The classifier's request carries the research output and the schema.
        expect(requests[2]!.schema).toMatchObject({ type: "object", required: ["trend"] })
        expect(requests[2]!.messages.some((m) => m.content === "Q4 grew in 5 regions.")).toBe(true)
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            Registry.layer([add]),
            ConstraintLayer.layer,
            ScriptedEngine.layer([
              ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]),
              ScriptedEngine.reply("Q4 grew in 5 regions."),
              ScriptedEngine.reply("{\"trend\": \"sideways\"}"),
              ScriptedEngine.reply("{\"trend\": \"up\"}")
            ])
          )
        )
      ))

    it.effect("the classifier's typed failure is the failed step's error, with the research kept", () =>
      Effect.gen(function* () {
        const Trend = Schema.Struct({ trend: Schema.Literal("up", "down", "flat") })
        const research = PlanExecutor.fromProgram("research", Schema.String, Schema.String, (prompt) =>
          Effect.flatMap(AgentLoop.make(), (agent) => Effect.map(agent.chat(prompt), (r) => r.content)))
        const classify = PlanExecutor.fromProgram("classify", Schema.String, Trend, (text) =>
          Effect.map(SpecializedLoop.call(text, { schema: Trend, retry: Schedule.stop }), (r) => r.value))
        const executor = yield* PlanExecutor.make({ handlers: [research, classify], retry: Schedule.stop })
        const outcome = failed(
          yield* executor.execute(plan(step("research", "research", { input: "Q4?" }), step("classify", "classify")))
        )
        expect(outcome.completed.map((s) => s.output)).toEqual(["It grew."])
        expect(outcome.failedStep).toBe("classify")
        expect(outcome.error._tag).toBe("ConstraintFailure")
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ConstraintLayer.layer,
            ScriptedEngine.layer([ScriptedEngine.reply("It grew."), ScriptedEngine.reply("{\"trend\": \"sideways\"}")])
          )
        )
      ))
  })

  describe("composition with RedundantLoop (seed 01's reliableClassifier)", () => {
    const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })
    const research = PlanExecutor.fromProgram("research", Schema.String, Schema.String, (prompt) =>
      Effect.flatMap(
        AgentLoop.make({ systemPrompt: "You are a research assistant." }),
        (agent) => Effect.map(agent.chat(prompt), (r) => r.content)
      ))
    const ClassifyOutput = Schema.Struct({ value: Sentiment, confidence: Schema.Number })
    const classify = PlanExecutor.fromProgram("classify", Schema.String, ClassifyOutput, (text) =>
      Effect.map(
        RedundantLoop.run(text, { schema: Sentiment, n: 3, systemPrompt: "Classify sentiment." }),
        (r) => ({ value: r.value, confidence: r.confidence })
      ))

    it.effect("research with an AgentLoop, then classify by 3-replica majority vote", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [research, classify] })
        const outcome = completed(
          yield* executor.execute(
            plan(step("research", "research", { input: "How do users feel about the product?" }), step("classify", "classify"))
          )
        )
        expect(outcome.steps[0]!.output).toBe("Users love it.")
        expect(outcome.output).toEqual({ value: { sentiment: "positive" }, confidence: 2 / 3 })
        const requests = yield* ScriptedEngine.requests
        expect(requests).toHaveLength(4)
        // Every replica was asked about the research output.
        for (const r of requests.slice(1)) {
          expect(r.messages.some((m) => m.content === "Users love it.")).toBe(true)
        }
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ConstraintLayer.layer,
            ScriptedEngine.layer([
              ScriptedEngine.reply("Users love it."),
              ScriptedEngine.reply("{\"sentiment\": \"positive\"}"),
              ScriptedEngine.reply("{\"sentiment\": \"neutral\"}"),
              ScriptedEngine.reply("{\"sentiment\": \"positive\"}")
            ])
          )
        )
      ))

    it.effect("every replica failing (below quorum) is the classify step's typed failure", () =>
      Effect.gen(function* () {
        const executor = yield* PlanExecutor.make({ handlers: [research, classify] })
        const fiber = yield* Effect.fork(
          executor.execute(plan(step("research", "research", { input: "How?" }), step("classify", "classify")))
        )
        yield* TestClock.adjust("1 minute")
        const outcome = failed(yield* Fiber.join(fiber))
        expect(outcome.completed.map((s) => s.name)).toEqual(["research"])
        expect(outcome.failedStep).toBe("classify")
        expect([outcome.error._tag, outcome.error.code]).toEqual(["ConstraintFailure", "CONSTRAINT_JSON_INVALID"])
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            ConstraintLayer.layer,
            ScriptedEngine.layer([ScriptedEngine.reply("Mixed."), ScriptedEngine.reply("not json at all {")], {
              whenExhausted: "repeat-last"
            })
          )
        )
      ))
  })

  describe("one step at a time, then several (a chain runs on the caller's fiber until steps fan out)", () => {
    it.effect("a chain that fans out: its first step alone, then the ready ones together, their scoped resources the run's", () =>
      Effect.gen(function* () {
        const log: Array<string> = []
        const scopedSleep = PlanExecutor.handler("sleep", {
          input: Schema.Unknown,
          output: Schema.Unknown,
          run: (input, { step }) =>
            Effect.zipRight(
              Effect.acquireRelease(Effect.sync(() => log.push(`acquire ${step.name}`)), () =>
                Effect.sync(() => log.push(`release ${step.name}`))),
              Effect.as(Effect.sleep("1 second"), input)
            )
        })
        const executor = yield* Effect.scoped(PlanExecutor.make({ handlers: [scopedSleep] }))
        const fiber = yield* Effect.fork(Effect.scoped(
          Effect.tap(
            executor.execute(plan(
              step("a", "sleep", { input: "A" }),
              step("b", "sleep", { dependsOn: ["a"] }),
              step("c", "sleep", { input: "C", dependsOn: ["a"] }),
              step("join", "sleep", { dependsOn: ["b", "c"] })
            )),
            () => Effect.sync(() => log.push("run ended"))
          )
        ))
        yield* TestClock.adjust("3 seconds")
        const outcome = completed(yield* Fiber.join(fiber))
        const at = Object.fromEntries(outcome.steps.map((s) => [s.name, [s.startedAt, s.finishedAt]]))
        expect(at).toEqual({ a: [0, 1000], b: [1000, 2000], c: [1000, 2000], join: [2000, 3000] })
        expect(outcome.output).toEqual({ b: "A", c: "C" })
        expect(log).toEqual([
          "acquire a",
          "acquire b",
          "acquire c",
          "acquire join",
          "release join",
          "release c",
          "release b",
          "release a",
          "run ended"
        ])
      }))

    it.effect("continue on a chain: the later steps are skipped, each naming the step it waited on", () =>
      Effect.gen(function* () {
        const broken = PlanExecutor.handler("broken", {
          input: Schema.Unknown,
          output: Schema.Unknown,
          run: () => Effect.fail(new ToolFailure({ code: "TOOL_EXECUTION_FAILED", tool: "t", retryable: false, message: "boom" }))
        })
        for (const failurePolicy of ["continue", "fail-fast"] as const) {
          const executor = yield* PlanExecutor.make({ handlers: [upper, broken], failurePolicy })
          const outcome = failed(
            yield* executor.execute(plan(step("a", "upper", { input: "x" }), step("b", "broken"), step("c", "upper"), step("d", "upper")))
          )
          expect([outcome.completed.map((s) => s.name), outcome.failedStep, outcome.failures.map((f) => f.name)]).toEqual([
            ["a"],
            "b",
            ["b"]
          ])
          expect(outcome.skipped.map((s) => [s.name, s.reason, s.dependency, s.interrupted, s.message])).toEqual([
            ["c", "dependency_failed", "b", false, `step "b" failed (TOOL_EXECUTION_FAILED)`],
            ["d", "dependency_failed", "c", false, `step "c" did not complete`]
          ])
        }
      }))

    it.effect("a defect in a chain's step propagates; the steps after it never start", () =>
      Effect.gen(function* () {
        const ran: Array<string> = []
        const buggy = PlanExecutor.handler("buggy", {
          input: Schema.Unknown,
          output: Schema.Unknown,
          run: (input, { step }) => Effect.suspend(() => {
            ran.push(step.name)
            return step.name === "b" ? Effect.dieMessage("bug in b") : Effect.succeed(input)
          })
        })
        const executor = yield* PlanExecutor.make({ handlers: [buggy] })
        const exit = yield* Effect.exit(executor.execute(plan(step("a", "buggy", { input: 1 }), step("b", "buggy"), step("c", "buggy"))))
        expect(Exit.isFailure(exit) && String(exit.cause)).toContain("bug in b")
        expect(ran).toEqual(["a", "b"])
      }))

    it.effect("a chain step's first failure goes to the schedule as any other: re-run, counted, then passing", () =>
      Effect.gen(function* () {
        let calls = 0
        const flaky = PlanExecutor.withValidation(upper, () =>
          Effect.suspend(() =>
            ++calls < 3
              ? Effect.fail(new ValidationFailure({ code: "VALIDATION_RULE_FAILED", retryable: true, message: `try ${calls}` }))
              : Effect.void
          ))
        const executor = yield* PlanExecutor.make({ handlers: [flaky, length], retry: Schedule.recurs(5) })
        const outcome = completed(yield* executor.execute(plan(step("u", "upper", { input: "ab" }), step("n", "length"))))
        expect(outcome.steps.map((s) => [s.name, s.output, s.attempts])).toEqual([["u", "AB", 3], ["n", 2, 1]])
      }))
  })

  it.effect("usageOf and encodedOutputs summarise the steps for a response", () =>
    Effect.gen(function* () {
      const executor = yield* PlanExecutor.make({ handlers: [PlanExecutor.infer(), upper] })
      const outcome = completed(
        yield* executor.execute(
          plan(step("a", "infer", { input: "one" }), step("b", "infer", { input: "two" }), step("c", "upper", { input: "x" }))
        )
      )
      const usage = PlanExecutor.usageOf(PlanExecutor.completedSteps(outcome))
      expect(usage.calls).toBe(2)
      expect(usage.outputTokens).toBe(TokenUsage.combine(
        (outcome.steps[0]!.output as InferenceResult).usage,
        (outcome.steps[1]!.output as InferenceResult).usage
      ).outputTokens)
      const encoded = PlanExecutor.encodedOutputs(outcome.steps)
      expect(encoded["c"]).toBe("X")
      expect(encoded["a"]).toMatchObject({ content: "first answer", finishReason: "stop" })
    }).pipe(
      Effect.provide(
        ScriptedEngine.layer([ScriptedEngine.reply("first answer"), ScriptedEngine.reply("second longer answer")])
      )
    ))

  it.effect("check() rejects without running and accepts a good plan", () =>
    Effect.gen(function* () {
      const executor = yield* PlanExecutor.make({ handlers: [upper] })
      expect(executor.stepTypes).toEqual(["upper"])
      yield* executor.check(plan(step("u", "upper", { input: "x" })))
      const error = yield* Effect.flip(executor.check(plan(step("u", "other"))))
      expect(error).toBeInstanceOf(OrchestrationFailure)
    }))
})
