/**
 * A plan run as a dependency graph, its steps checked and paired with their
 * handlers first (./Checked.ts).
 *
 * One coordinator runs it: a step is ready when every step it depends on has
 * completed (and, with phases, every step of the earlier phases has ended: the
 * barrier); the ready steps start in order of (priority, plan order), at most
 * `concurrency` at once across the whole plan. A step's input is the output of its
 * dependencies (none: no input; one: its output; several: `{ [name]: output }`).
 * On a failure, "fail-fast" interrupts the running steps and starts no other;
 * "continue" lets independent branches go on and skips what depends on the
 * failure. A `stop` signal lets running steps finish and starts no other: the
 * first step that would have started is reported with CANCELLED_SIGNAL. A defect
 * in a step interrupts the others and propagates.
 *
 * While one step at a time can run (a chain), the steps run on the caller's
 * fiber, each started in the step in which the one before ended: no fiber, no
 * queue, no generator and, unless the handlers may need one, no scope (a plan of
 * 3 model calls: 13 Effect operations, 100 before; test/HotPathPlan).
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Event from "../../domain/Event.js"
import type { Failure } from "../../domain/Failure.js"
import { Cancellation } from "../../domain/Failure.js"
import * as Plan from "../../domain/Plan.js"
import { EventLog, recordEvent } from "../../services/EventLog.js"
import * as Local from "../../services/internal/Local.js"
import * as Observed from "../internal/Observed.js"
import * as Lifecycle from "../Lifecycle.js"
import type { FailurePolicy } from "../../domain/Task.js"
import type { SkippedStep, StepResult } from "./Outcome.js"
import { PlanOutcome } from "./Outcome.js"
import type { CheckedStep } from "./Checked.js"
import * as Step from "./Step.js"
import * as Construct from "../../domain/Construct.js"

export interface RunOptions {
  readonly concurrency: number
  readonly policy: Plan.PlanPolicy
  /** When this effect completes, no further step starts; running steps finish. */
  readonly stop?: Effect.Effect<void> | undefined
  /** Lower starts first among ready steps; absent means 0. Ties go by plan order. */
  readonly priorities?: ReadonlyMap<string, number> | undefined
  /** Step names per phase, checked by `checkPhases`: a barrier between phases. Absent: dataflow. */
  readonly phases?: ReadonlyArray<ReadonlyArray<string>> | undefined
  /** Default "fail-fast". */
  readonly failurePolicy?: FailurePolicy | undefined
  /**
   * Whether the steps run with a scope of the run's own (their resources released
   * when the run ends) from the start: when their handlers may need one (a
   * handler that needs a Scope makes the executor's `make` require one). A run
   * that forks steps makes one for its fibers either way.
   */
  readonly scoped?: boolean | undefined
}

type Status =
  | { readonly _tag: "Pending" }
  /** Running in a fiber of its own, or (no fiber) in the run's fiber: the only step running. */
  | { readonly _tag: "Running"; readonly fiber: Fiber.RuntimeFiber<void> | undefined }
  | { readonly _tag: "Done"; readonly result: StepResult }
  | { readonly _tag: "Failed"; readonly error: Failure }
  | { readonly _tag: "Skipped"; readonly skipped: SkippedStep }

interface Finished {
  readonly index: number
  readonly exit: Exit.Exit<StepResult, Failure>
}

const pending: Status = { _tag: "Pending" }

/** Runs the checked steps of `plan`; always an outcome once steps run. */
export const run = (
  environment: Step.StepEnvironment,
  plan: Plan.ExecutionPlan,
  steps: ReadonlyArray<CheckedStep>,
  options: RunOptions
): Effect.Effect<PlanOutcome> =>
  Effect.withFiberRuntime((fiber) => runOn(fiber, Observed.listenedBy(fiber), environment, plan, steps, options))

/**
 * `run`, started on `fiber` (the fiber that runs it, read as it starts: its
 * caller is that fiber's own step); `listened`, whether somebody observes it
 * (Observed.listenedBy, as the caller found it: what runs one step after another
 * on this fiber leaves its context as it found it).
 *
 * While one step at a time can run (a chain: one ready step, none running) and
 * no `stop` is given, each step starts in the step in which the one before
 * ended, on this fiber: no fiber, no queue, no scope of the run's own unless
 * the handlers may need one (`options.scoped`). Once several steps are ready, or
 * from the start when `stop` is given, the run goes on with fibers of their own
 * in a scope of the run's (the stop signal forked in it too), from the state
 * reached: both ways decide, skip and conclude with the same code.
 */
export const runOn = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  listened: boolean,
  environment: Step.StepEnvironment,
  plan: Plan.ExecutionPlan,
  steps: ReadonlyArray<CheckedStep>,
  options: RunOptions
): Effect.Effect<PlanOutcome> => {
  // the plan's trace (a manual one when the plan has none, built from the library's own values: not validated again)
  const trace = plan.trace ?? Construct.unchecked(Plan.PlanTrace, {
    plannerId: "manual",
    rationale: "",
    createdAt: DateTime.unsafeMake(Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeMillis()),
    stepCount: plan.steps.length
  })
  // the request's tracker (inside the facade), read once: completed steps are counted on it
  const tracker = fiber.getFiberRef(Lifecycle.currentTracker)
  const count = steps.length
  const dependencies = steps.map((s) => s.dependencies)
  const phases = options.phases
  const phaseOfName = phases === undefined
    ? undefined
    : new Map(phases.flatMap((phase, k) => phase.map((name) => [name, k] as const)))
  const phaseOf = (i: number): number => phaseOfName?.get(steps[i]!.step.name) ?? 0
  const priorities = options.priorities
  const priorityOf = (i: number): number => priorities?.get(steps[i]!.step.name) ?? 0
  const failFast = (options.failurePolicy ?? "fail-fast") === "fail-fast"
  const cap = Math.max(1, options.concurrency)
  const status: Array<Status> = steps.map(() => pending)
  // whether a scope of the run's own is in the context now
  let scoped = false
  // the ends of steps running in fibers of their own (made at the first such step: a chain runs in this fiber)
  let finishedQueue: Queue.Queue<Finished> | undefined
  const finished = (): Effect.Effect<Queue.Queue<Finished>> =>
    finishedQueue !== undefined
      ? Effect.succeed(finishedQueue)
      : Effect.map(Queue.unbounded<Finished>(), (q) => (finishedQueue = q))
  let stopped = false
  let running = 0
  let firstFailure: { readonly index: number; readonly error: Failure } | undefined
  let stopStep: number | undefined

  const nameOf = (i: number) => steps[i]!.step.name
  const skip = (i: number, skipped: Omit<SkippedStep, "name" | "type">) => {
    status[i] = { _tag: "Skipped", skipped: { name: nameOf(i), type: steps[i]!.step.type, ...skipped } }
  }

  const inputOf = (i: number): unknown => {
    const { dependsOn, step } = steps[i]!
    if (step.input !== undefined) return step.input
    if (dependsOn.length === 0) return undefined
    const outputs = dependencies[i]!.map((d) => {
      const s = status[d]!
      return s._tag === "Done" ? s.result.output : undefined
    })
    if (dependsOn.length === 1) return outputs[0]
    return Object.fromEntries(dependsOn.map((d, k) => [d, outputs[k]]))
  }

  const launch = (i: number) =>
    Effect.gen(function* () {
      const { handler, step } = steps[i]!
      const queue = yield* finished()
      const fiber = yield* Effect.forkScoped(
        Step.run(environment, step, handler, inputOf(i), options.policy).pipe(
          Effect.exit,
          Effect.flatMap((exit) => Queue.offer(queue, { index: i, exit })),
          Effect.asVoid
        )
      )
      status[i] = { _tag: "Running", fiber }
      running++
    })

  // Steps waiting on a failed or skipped step are skipped, transitively: a
  // worklist over the dependents of each step that ended without completing.
  let dependentsOf: ReadonlyArray<ReadonlyArray<number>> | undefined
  const dependents = (): ReadonlyArray<ReadonlyArray<number>> => {
    if (dependentsOf === undefined) {
      const made: Array<Array<number>> = steps.map(() => [])
      for (const [i, deps] of dependencies.entries()) for (const d of deps) made[d]!.push(i)
      dependentsOf = made
    }
    return dependentsOf
  }
  const ended: Array<number> = []
  const skipDependents = () => {
    while (ended.length > 0) {
      const blocked = ended.pop()!
      const cause = status[blocked]!
      for (const i of dependents()[blocked]!) {
        if (status[i]!._tag !== "Pending") continue
        skip(i, {
          reason: "dependency_failed",
          dependency: nameOf(blocked),
          interrupted: false,
          message: cause._tag === "Failed"
            ? `step "${nameOf(blocked)}" failed (${cause.error.code})`
            : `step "${nameOf(blocked)}" did not complete`
        })
        ended.push(i)
      }
    }
  }

  // The pending steps that may start now, in the order they start (plain loops: it runs once per step end).
  const ready = (): ReadonlyArray<number> => {
    let barrier = Infinity
    if (phaseOfName !== undefined) {
      for (let i = 0; i < count; i++) {
        const tag = status[i]!._tag
        if ((tag === "Pending" || tag === "Running") && phaseOf(i) < barrier) barrier = phaseOf(i)
      }
    }
    const out: Array<number> = []
    for (let i = 0; i < count; i++) {
      if (status[i]!._tag !== "Pending" || (phaseOfName !== undefined && phaseOf(i) > barrier)) continue
      const deps = dependencies[i]!
      let done = true
      for (let k = 0; k < deps.length && done; k++) done = status[deps[k]!]!._tag === "Done"
      if (done) out.push(i)
    }
    return out.length > 1 ? out.sort((a, b) => priorityOf(a) - priorityOf(b) || a - b) : out
  }

  /**
   * A step's end: its status, the tracker told of a completion; a defect (or an
   * interruption from inside the step) is not a value here: `undefined` and the
   * cause to propagate, the caller first interrupting what runs.
   */
  const end = (index: number, exit: Exit.Exit<StepResult, Failure>): Cause.Cause<never> | undefined => {
    running--
    if (Exit.isSuccess(exit)) {
      status[index] = { _tag: "Done", result: exit.value }
      return undefined
    }
    const failure = Cause.failureOption(exit.cause)
    if (Option.isNone(failure)) return Cause.stripFailures(exit.cause)
    status[index] = { _tag: "Failed", error: failure.value }
    ended.push(index)
    firstFailure ??= { index, error: failure.value }
    return undefined
  }

  /** The outcome, once no step runs (fail-fast: the running ones were interrupted). */
  const conclude = (): Effect.Effect<PlanOutcome> => {
    if (firstFailure !== undefined && failFast) {
      const failed = nameOf(firstFailure.index)
      for (const [i, s] of status.entries()) {
        if (s._tag === "Running") {
          skip(i, { reason: "stopped", interrupted: true, message: `interrupted: step "${failed}" failed` })
          ended.push(i)
        }
      }
      skipDependents()
    }
    if (firstFailure === undefined && stopStep === undefined && status.some((s) => s._tag === "Pending")) {
      // every pending step waits on a completed step or a failure: no other way out of the loop
      return Effect.dieMessage("the plan run ended with steps that neither ran nor were skipped")
    }
    const why = firstFailure === undefined
      ? "the run was stopped"
      : `step "${nameOf(firstFailure.index)}" failed`
    for (const [i, s] of status.entries()) {
      if (s._tag === "Pending") skip(i, { reason: "stopped", interrupted: false, message: `not started: ${why}` })
    }

    const completed: Array<StepResult> = []
    for (const s of status) if (s._tag === "Done") completed.push(s.result)
    if (completed.length === count) {
      const last = plan.steps[plan.steps.length - 1]
      const output = last === undefined ? undefined : completed.find((r) => r.name === last.name)?.output
      return Effect.succeed(PlanOutcome.Completed({ steps: completed, output, trace }))
    }
    const failures = status.flatMap((s, i) =>
      s._tag === "Failed" ? [{ name: nameOf(i), type: steps[i]!.step.type, error: s.error }] : []
    )
    const skipped = status.flatMap((s) => (s._tag === "Skipped" ? [s.skipped] : []))
    const [failedStep, error] = firstFailure !== undefined
      ? [nameOf(firstFailure.index), firstFailure.error]
      : stopStep !== undefined && stopStep >= 0
      ? [nameOf(stopStep), Cancellation.signal(`stopped before step "${nameOf(stopStep)}"`, { step: nameOf(stopStep) })]
      : ["", Cancellation.signal("stopped", {})]
    return Effect.succeed(PlanOutcome.Failed({ completed, failedStep, error, failures, skipped, trace }))
  }

  // One step at a time, on this fiber: the next one starts in the step in which the one before ended.
  const sequential = (): Effect.Effect<PlanOutcome> => {
    if (!failFast) skipDependents()
    const next = ready()
    if (next.length === 0) return conclude()
    if (next.length > 1) return concurrent()
    const i = next[0]!
    const { handler, step } = steps[i]!
    status[i] = { _tag: "Running", fiber: undefined }
    running++
    return Step.runThen(fiber, listened, environment, step, handler, inputOf(i), options.policy, (exit) => {
      const defect = end(i, exit)
      if (defect !== undefined) return Effect.failCause(defect)
      if (failFast && firstFailure !== undefined) return conclude()
      return Exit.isSuccess(exit) && Option.isSome(tracker)
        ? Effect.flatMap(tracker.value.stepCompleted(nameOf(i)), sequential)
        : sequential()
    })
  }

  // Steps in fibers of their own, in the run's scope (made when the run comes to it).
  const loop = (): Effect.Effect<PlanOutcome, never, Scope.Scope> => Effect.gen(function* () {
    if (options.stop !== undefined) {
      // Forked before any step starts; ends with the run.
      yield* Effect.forkScoped(Effect.zipRight(options.stop, Effect.sync(() => void (stopped = true))))
    }
    while (true) {
      if (!failFast) skipDependents()
      const next = ready()
      let batch: ReadonlyArray<Finished>
      if (stopped && running === 0) {
        stopStep = next[0] ?? status.findIndex((s) => s._tag === "Pending")
        break
      } else if (!stopped && running === 0 && next.length === 1) {
        // the only step that can run (a chain): in this fiber, no fiber of its own; its end is handled as any other's
        const i = next[0]!
        const { handler, step } = steps[i]!
        status[i] = { _tag: "Running", fiber: undefined }
        running++
        batch = [{ index: i, exit: yield* Effect.exit(Step.run(environment, step, handler, inputOf(i), options.policy)) }]
      } else {
        if (!stopped) {
          for (const i of next) {
            if (running >= cap) break
            yield* launch(i)
          }
        }
        if (running === 0) break
        const queue = yield* finished()
        batch = [yield* Queue.take(queue), ...(yield* Queue.takeAll(queue))]
      }
      for (const { exit, index } of batch) {
        const defect = end(index, exit)
        if (defect !== undefined) {
          yield* Fiber.interruptAll(runningFibers(status))
          return yield* Effect.failCause(defect)
        }
        if (Exit.isSuccess(exit) && Option.isSome(tracker)) yield* tracker.value.stepCompleted(nameOf(index))
      }
      if (failFast && firstFailure !== undefined) break
    }
    if (firstFailure !== undefined && failFast) yield* Fiber.interruptAll(runningFibers(status))
    return yield* conclude()
  })
  const concurrent = (): Effect.Effect<PlanOutcome> => scoped ? loop() as Effect.Effect<PlanOutcome> : Local.scoped(loop)

  const start = (): Effect.Effect<PlanOutcome> => {
    if (options.stop !== undefined) return concurrent()
    if (!options.scoped) return sequential()
    return Local.scoped(() => {
      scoped = true
      return sequential()
    })
  }
  // the trace recorded as a `plan.trace` event when an EventLog keeps events
  const log = fiber.currentContext.unsafeMap.get(EventLog.key) as { readonly enabled?: boolean } | undefined
  return log === undefined || log.enabled === false ? start() : Effect.flatMap(traceEvent(trace), start)
}

const runningFibers = (status: ReadonlyArray<Status>): ReadonlyArray<Fiber.RuntimeFiber<void>> =>
  status.flatMap((s) => (s._tag === "Running" && s.fiber !== undefined ? [s.fiber] : []))

/** The plan's trace as a `plan.trace` event. */
const traceEvent = (trace: Plan.PlanTrace): Effect.Effect<void> =>
  recordEvent((base) =>
    new Event.Custom({
      ...base,
      layer: "orchestrate",
      action: "plan.trace",
      data: {
        plannerId: trace.plannerId,
        rationale: trace.rationale,
        createdAt: DateTime.formatIso(trace.createdAt),
        stepCount: trace.stepCount
      }
    })
  )
