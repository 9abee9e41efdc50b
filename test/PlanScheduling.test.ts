/**
 * The PlanExecutor's scheduling: the priority-aware ready queue, the phase
 * barrier, the concurrency cap across phases, the failure policies, per-step
 * retries of retryable failures and the per-step timeout. Time is the TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type { Failure } from "../src/domain/Failure.js"
import { ToolFailure } from "../src/domain/Failure.js"
import * as Plan from "../src/domain/Plan.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"

interface Spec {
  readonly seconds?: number
  /** Fails with this on the given attempts (all when absent). */
  readonly fail?: Failure
  readonly failAttempts?: ReadonlyArray<number>
  readonly die?: boolean
}

interface Log {
  readonly starts: Ref.Ref<ReadonlyArray<readonly [string, number]>>
  readonly interrupted: Ref.Ref<ReadonlyArray<string>>
  readonly running: Ref.Ref<number>
  readonly maxRunning: Ref.Ref<number>
}

const makeLog = Effect.gen(function* () {
  return {
    starts: yield* Ref.make<ReadonlyArray<readonly [string, number]>>([]),
    interrupted: yield* Ref.make<ReadonlyArray<string>>([]),
    running: yield* Ref.make(0),
    maxRunning: yield* Ref.make(0)
  } satisfies Log
})

/** A step that logs its start (with the Clock), counts itself running, takes its time, then fails or echoes its name. */
const worker = (log: Log, specs: Readonly<Record<string, Spec>>) =>
  PlanExecutor.handler("work", {
    input: Schema.Unknown,
    output: Schema.Unknown,
    run: (_input, { attempt, step }) =>
      Effect.gen(function* () {
        const spec = specs[step.name] ?? {}
        const startedAt = yield* Clock.currentTimeMillis
        yield* Ref.update(log.starts, (s) => [...s, [step.name, startedAt] as const])
        const now = yield* Ref.updateAndGet(log.running, (n) => n + 1)
        yield* Ref.update(log.maxRunning, (m) => Math.max(m, now))
        yield* Effect.sleep(`${spec.seconds ?? 1} seconds`).pipe(
          Effect.onInterrupt(() => Ref.update(log.interrupted, (i) => [...i, step.name])),
          Effect.ensuring(Ref.update(log.running, (n) => n - 1))
        )
        if (spec.die === true) return yield* Effect.dieMessage(`bug in ${step.name}`)
        if (spec.fail !== undefined && (spec.failAttempts === undefined || spec.failAttempts.includes(attempt))) {
          return yield* Effect.fail(spec.fail)
        }
        return step.name
      })
  })

const step = (name: string, dependsOn: ReadonlyArray<string> = []) => new Plan.Step({ name, type: "work", dependsOn })
const plan = (...steps: ReadonlyArray<Plan.Step>) => new Plan.ExecutionPlan({ steps })

const toolFailure = (retryable: boolean) =>
  ToolFailure.executionFailed("search", "flaky", { retryable })

/** Runs the plan to its end under the TestClock, advancing `seconds` one second at a time. */
const runFor = (seconds: number, effect: Effect.Effect<PlanExecutor.PlanOutcome, any>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(effect)
    for (let i = 0; i < seconds; i++) yield* TestClock.adjust("1 second")
    // under the TestClock nothing else advances time: a run still waiting here
    // is caught by the describe's real-time bound
    return yield* Fiber.await(fiber)
  })

const outcomeOf = (exit: Exit.Exit<PlanExecutor.PlanOutcome, any>) => {
  if (!Exit.isSuccess(exit)) throw new Error(`the run did not succeed: ${String(exit.cause)}`)
  return exit.value
}

const startOf = (starts: ReadonlyArray<readonly [string, number]>) => Object.fromEntries(starts)

/** A run that never ends (a scheduling bug) fails the test here instead of hanging. */
const bound = 20_000

describe("PlanExecutor scheduling", { timeout: bound }, () => {
  describe("phases: the barrier", () => {
    // a and b form phase 1; c depends on a only. In dataflow c starts when a is
    // done (t=1); with phases it waits for b too (t=3). The origin submits every
    // phase to one pool at once, which would start c at t=1 (or even t=0).
    const graph = plan(step("a"), step("b"), step("c", ["a"]))
    const specs = { a: { seconds: 1 }, b: { seconds: 3 }, c: { seconds: 1 } }

    it.effect("no step of phase n+1 starts before every step of phase n has ended", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)] })
        const exit = yield* runFor(5, executor.execute(graph, { phases: [["a", "b"], ["c"]] }))
        expect(outcomeOf(exit)._tag).toBe("Completed")
        expect(startOf(yield* Ref.get(log.starts))).toEqual({ a: 0, b: 0, c: 3000 })
      }))

    it.effect("dataflow (the default) starts a step as soon as its dependencies are done", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)] })
        yield* runFor(5, executor.execute(graph))
        expect(startOf(yield* Ref.get(log.starts))).toEqual({ a: 0, b: 0, c: 1000 })
      }))

    it.effect("phases that do not fit the graph are rejected before anything runs", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)] })
        const samePhase = yield* Effect.flip(executor.execute(graph, { phases: [["a", "b", "c"]] }))
        expect(samePhase.details).toMatchObject({ rule: "phases", step: "c", dependency: "a" })
        const missing = yield* Effect.flip(executor.execute(graph, { phases: [["a", "b"]] }))
        expect(missing.message).toBe(`step "c" is in no phase`)
        const twice = yield* Effect.flip(executor.execute(graph, { phases: [["a", "b"], ["c", "a"]] }))
        expect(twice.message).toBe(`step "a" is in more than one phase`)
        const stranger = yield* Effect.flip(executor.execute(graph, { phases: [["a", "b", "x"], ["c"]] }))
        expect(stranger.details).toMatchObject({ rule: "phases", step: "x" })
        expect(yield* Ref.get(log.starts)).toEqual([])
      }))
  })

  describe("the concurrency cap and the ready queue", () => {
    it.effect("observed concurrency never goes above the cap, across phases", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        // ten roots and five dependents of the first root: dataflow lets the
        // dependents become ready while roots are still queued
        const roots = Array.from({ length: 10 }, (_, i) => step(`r${i}`))
        const dependents = Array.from({ length: 5 }, (_, i) => step(`d${i}`, ["r0"]))
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, {})], concurrency: 3 })
        const exit = yield* runFor(6, executor.execute(plan(...roots, ...dependents)))
        expect(outcomeOf(exit)._tag).toBe("Completed")
        expect(yield* Ref.get(log.maxRunning)).toBe(3)
        expect((yield* Ref.get(log.starts)).length).toBe(15)

        const phased = yield* makeLog
        const phasedExecutor = yield* PlanExecutor.make({ handlers: [worker(phased, {})], concurrency: 2 })
        yield* runFor(8, phasedExecutor.execute(plan(...roots.slice(0, 5), ...dependents.slice(0, 3)), {
          phases: [["r0", "r1", "r2", "r3", "r4"], ["d0", "d1", "d2"]]
        }))
        expect(yield* Ref.get(phased.maxRunning)).toBe(2)
      }))

    it.effect("ready steps start by priority (lower first), ties by plan order", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, {})], concurrency: 1 })
        const priorities = new Map([["a", 3], ["b", 1], ["c", 2], ["d", 1]])
        const exit = yield* runFor(5, executor.execute(plan(step("a"), step("b"), step("c"), step("d")), { priorities }))
        expect(outcomeOf(exit)._tag).toBe("Completed")
        expect((yield* Ref.get(log.starts)).map(([name, at]) => `${name}@${at}`)).toEqual([
          "b@0",
          "d@1000",
          "c@2000",
          "a@3000"
        ])
      }))

    it.effect("a step made ready by a completion goes before queued steps of lower priority", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, {})], concurrency: 1 })
        const priorities = new Map([["first", 0], ["late", 5], ["urgent", 1]])
        yield* runFor(4, executor.execute(plan(step("first"), step("late"), step("urgent", ["first"])), { priorities }))
        expect((yield* Ref.get(log.starts)).map(([name]) => name)).toEqual(["first", "urgent", "late"])
      }))
  })

  describe("failure policies", () => {
    it.effect("fail-fast: the first failure interrupts running siblings; nothing else starts", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 1, fail: toolFailure(false) }, b: { seconds: 5 } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], concurrency: 2 })
        const exit = yield* runFor(6, executor.execute(plan(step("a"), step("b"), step("c", ["a"]), step("d"))))
        const outcome = outcomeOf(exit)
        if (outcome._tag !== "Failed") throw new Error("expected Failed")
        expect(outcome.failedStep).toBe("a")
        expect(outcome.error.code).toBe("TOOL_EXECUTION_FAILED")
        expect(outcome.failures.map((f) => f.name)).toEqual(["a"])
        expect(yield* Ref.get(log.interrupted)).toEqual(["b"])
        expect(outcome.skipped.map((s) => [s.name, s.reason, s.interrupted, s.dependency])).toEqual([
          ["b", "stopped", true, undefined],
          ["c", "dependency_failed", false, "a"],
          ["d", "stopped", false, undefined]
        ])
        expect((yield* Ref.get(log.starts)).map(([name]) => name)).toEqual(["a", "b"])
      }))

    it.effect("continue: independent branches go on; dependents are skipped, transitively, naming the dependency", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 1, fail: toolFailure(false) }, b: { seconds: 3 } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], failurePolicy: "continue" })
        const exit = yield* runFor(6, executor.execute(plan(step("a"), step("b"), step("c", ["a"]), step("e", ["c"]), step("f", ["b"]))))
        const outcome = outcomeOf(exit)
        if (outcome._tag !== "Failed") throw new Error("expected Failed")
        expect(outcome.completed.map((s) => s.name)).toEqual(["b", "f"])
        expect(outcome.failures.map((f) => [f.name, f.error.code])).toEqual([["a", "TOOL_EXECUTION_FAILED"]])
        expect(outcome.skipped.map((s) => [s.name, s.reason, s.dependency])).toEqual([
          ["c", "dependency_failed", "a"],
          ["e", "dependency_failed", "c"]
        ])
        expect(outcome.skipped[0]!.message).toBe(`step "a" failed (TOOL_EXECUTION_FAILED)`)
        expect(yield* Ref.get(log.interrupted)).toEqual([])
      }))

    it.effect("continue with phases: a failure in phase 1 still lets phase 1 end before phase 2 starts", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 1, fail: toolFailure(false) }, b: { seconds: 2 } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], failurePolicy: "continue" })
        yield* runFor(4, executor.execute(plan(step("a"), step("b"), step("c", ["b"]), step("x", ["a"])), {
          phases: [["a", "b"], ["c", "x"]]
        }))
        expect(startOf(yield* Ref.get(log.starts))).toEqual({ a: 0, b: 0, c: 2000 })
      }))

    it.effect("a defect in a step interrupts the others and propagates", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 1, die: true }, b: { seconds: 5 } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], failurePolicy: "continue" })
        const exit = yield* runFor(2, executor.execute(plan(step("a"), step("b"))))
        expect(Exit.isFailure(exit) && String(exit.cause)).toContain("bug in a")
        expect(yield* Ref.get(log.interrupted)).toEqual(["b"])
      }))
  })

  describe("retries and timeouts", () => {
    const backoff = Schedule.exponential("1 second", 2).pipe(Schedule.intersect(Schedule.recurs(3)), Schedule.asVoid)

    it.effect("a retryable failure is re-run on the schedule: exact delays, attempt count", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 0, fail: toolFailure(true), failAttempts: [1, 2] } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], retry: backoff, retryOn: "retryable" })
        const exit = yield* runFor(4, executor.execute(plan(step("a"))))
        const outcome = outcomeOf(exit)
        if (outcome._tag !== "Completed") throw new Error("expected Completed")
        expect(outcome.steps[0]!.attempts).toBe(3)
        expect((yield* Ref.get(log.starts)).map(([, at]) => at)).toEqual([0, 1000, 3000])
      }))

    it.effect("retries stop at the schedule's end; the last failure is the step's", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 0, fail: toolFailure(true) } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], retry: backoff, retryOn: "retryable" })
        const outcome = outcomeOf(yield* runFor(10, executor.execute(plan(step("a")))))
        expect(outcome._tag === "Failed" && outcome.error.code).toBe("TOOL_EXECUTION_FAILED")
        expect((yield* Ref.get(log.starts)).map(([, at]) => at)).toEqual([0, 1000, 3000, 7000])
      }))

    it.effect("a non-retryable failure runs exactly once", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 0, fail: toolFailure(false) } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], retry: backoff, retryOn: "retryable" })
        const outcome = outcomeOf(yield* runFor(10, executor.execute(plan(step("a")))))
        expect(outcome._tag).toBe("Failed")
        expect((yield* Ref.get(log.starts)).length).toBe(1)
      }))

    it.effect("retryOn \"validation\" (the default) leaves a retryable tool failure alone; execute can override", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const specs = { a: { seconds: 0, fail: toolFailure(true), failAttempts: [1] } }
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, specs)], retry: backoff })
        expect(outcomeOf(yield* runFor(2, executor.execute(plan(step("a")))))._tag).toBe("Failed")
        const overridden = outcomeOf(yield* runFor(2, executor.execute(plan(step("a")), { retryOn: "retryable" })))
        expect(overridden._tag).toBe("Completed")
      }))

    it.effect("a step past the policy's timeout fails with CANCELLED_TIMEOUT", () =>
      Effect.gen(function* () {
        const log = yield* makeLog
        const executor = yield* PlanExecutor.make({ handlers: [worker(log, { slow: { seconds: 10 } })] })
        const policy = new Plan.PlanPolicy({ timeoutPerStep: Duration.seconds(3) })
        const outcome = outcomeOf(yield* runFor(4, executor.execute(plan(step("slow")), { policy })))
        expect(outcome._tag === "Failed" && outcome.error.code).toBe("CANCELLED_TIMEOUT")
        expect(yield* Ref.get(log.interrupted)).toEqual(["slow"])
      }))
  })
})
