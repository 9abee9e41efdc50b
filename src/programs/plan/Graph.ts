/**
 * A plan run as a dependency graph. Before anything runs the plan is checked
 * (every step type has a handler, the graph is sound, the policy holds, the
 * phases, when given, fit the graph) and each step is paired with its handler.
 *
 * One coordinator then runs it: a step is ready when every step it depends on has
 * completed (and, with phases, every step of the earlier phases has ended: the
 * barrier); the ready steps start in order of (priority, plan order), at most
 * `concurrency` at once across the whole plan. A step's input is the output of its
 * dependencies (none: no input; one: its output; several: `{ [name]: output }`).
 * On a failure, "fail-fast" interrupts the running steps and starts no other;
 * "continue" lets independent branches go on and skips what depends on the
 * failure. A `stop` signal lets running steps finish and starts no other: the
 * first step that would have started is reported with CANCELLED_SIGNAL. A defect
 * in a step interrupts the others and propagates.
 */
import * as Cause from "effect/Cause"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Event from "../../domain/Event.js"
import type { Failure } from "../../domain/Failure.js"
import { Cancellation, OrchestrationFailure } from "../../domain/Failure.js"
import * as Plan from "../../domain/Plan.js"
import { recordEvent } from "../../services/EventLog.js"
import * as Lifecycle from "../Lifecycle.js"
import type { StepHandler } from "./Handler.js"
import type { FailurePolicy } from "../../domain/Task.js"
import type { SkippedStep, StepResult } from "./Outcome.js"
import { PlanOutcome } from "./Outcome.js"
import * as Step from "./Step.js"
import * as Construct from "../../domain/Construct.js"

/** A step of a checked plan, with the handler that runs it. */
export interface CheckedStep {
  readonly step: Plan.Step
  readonly handler: StepHandler
  /** The names of the steps whose output it takes. */
  readonly dependsOn: ReadonlyArray<string>
}

/** Checks the plan against the handlers and the policy, and pairs every step with its handler. */
export const check = (
  handlers: ReadonlyMap<string, StepHandler>,
  plan: Plan.ExecutionPlan,
  policy: Plan.PlanPolicy
): Effect.Effect<ReadonlyArray<CheckedStep>, OrchestrationFailure> =>
  Effect.gen(function* () {
    const checked: Array<CheckedStep> = []
    for (const [index, step] of plan.steps.entries()) {
      const handler = handlers.get(step.type)
      if (handler === undefined) {
        return yield* new OrchestrationFailure({
          code: "ORCHESTRATION_STEP_MISMATCH",
          retryable: false,
          message: `step "${step.name}" has type "${step.type}", which has no handler`,
          details: { rule: "unknownStepType", step: step.name, type: step.type, known: [...handlers.keys()] }
        })
      }
      checked.push({ step, handler, dependsOn: Plan.dependenciesOf(plan, index) })
    }
    yield* Plan.check(plan, policy)
    return checked
  })

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
}

/**
 * Checks that `phases` fit the plan: every step in exactly one phase, and every
 * dependency of a step in an earlier phase (a rejected set is
 * ORCHESTRATION_STEP_MISMATCH with `details.rule` "phases").
 */
export const checkPhases = (
  steps: ReadonlyArray<CheckedStep>,
  phases: ReadonlyArray<ReadonlyArray<string>>
): Either.Either<void, OrchestrationFailure> => {
  const reject = (message: string, details: Record<string, unknown>) =>
    Either.left(OrchestrationFailure.stepMismatch(message, { details: { rule: "phases", ...details } }))
  const phaseOf = new Map<string, number>()
  for (const [k, phase] of phases.entries()) {
    for (const name of phase) {
      if (phaseOf.has(name)) return reject(`step "${name}" is in more than one phase`, { step: name })
      phaseOf.set(name, k)
    }
  }
  const names = new Set(steps.map((s) => s.step.name))
  const stranger = [...phaseOf.keys()].find((name) => !names.has(name))
  if (stranger !== undefined) return reject(`the phases name "${stranger}", which is not a step of the plan`, { step: stranger })
  for (const { dependsOn, step } of steps) {
    const k = phaseOf.get(step.name)
    if (k === undefined) return reject(`step "${step.name}" is in no phase`, { step: step.name })
    const late = dependsOn.find((d) => (phaseOf.get(d) ?? Infinity) >= k)
    if (late !== undefined) {
      return reject(`step "${step.name}" (phase ${k + 1}) depends on "${late}", which is not in an earlier phase`, {
        step: step.name,
        dependency: late
      })
    }
  }
  return Either.void
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
  Effect.scoped(Effect.gen(function* () {
    const trace = yield* traceOf(plan)
    // the request's tracker (inside the facade), read once: completed steps are counted on it
    const tracker = yield* FiberRef.get(Lifecycle.currentTracker)
    const indexOf = new Map(steps.map(({ step }, i) => [step.name, i]))
    const dependencies = steps.map(({ dependsOn }) => {
      const out: Array<number> = []
      for (const d of dependsOn) {
        const k = indexOf.get(d)
        if (k !== undefined) out.push(k)
      }
      return out
    })
    const phaseOfName = new Map((options.phases ?? []).flatMap((phase, k) => phase.map((name) => [name, k] as const)))
    const phaseOf = steps.map(({ step }) => phaseOfName.get(step.name) ?? 0)
    const priorityOf = steps.map(({ step }) => options.priorities?.get(step.name) ?? 0)
    const failFast = (options.failurePolicy ?? "fail-fast") === "fail-fast"
    const cap = Math.max(1, options.concurrency)
    const status: Array<Status> = steps.map(() => pending)
    // the ends of steps running in fibers of their own (made at the first such step: a chain runs in this fiber)
    let finishedQueue: Queue.Queue<Finished> | undefined
    const finished = (): Effect.Effect<Queue.Queue<Finished>> =>
      finishedQueue !== undefined
        ? Effect.succeed(finishedQueue)
        : Effect.map(Queue.unbounded<Finished>(), (q) => (finishedQueue = q))
    let stopped = false
    if (options.stop !== undefined) {
      // Forked before any step starts; ends with the run.
      yield* Effect.forkScoped(Effect.zipRight(options.stop, Effect.sync(() => void (stopped = true))))
    }
    let running = 0
    let firstFailure: { readonly index: number; readonly error: Failure } | undefined

    const nameOf = (i: number) => steps[i]!.step.name
    const skip = (i: number, skipped: Omit<SkippedStep, "name" | "type">) => {
      status[i] = { _tag: "Skipped", skipped: { name: nameOf(i), type: steps[i]!.step.type, ...skipped } }
    }

    const inputOf = (i: number): unknown => {
      const { dependsOn, step } = steps[i]!
      if (step.input !== undefined) return step.input
      const outputs = dependencies[i]!.map((d) => {
        const s = status[d]!
        return s._tag === "Done" ? s.result.output : undefined
      })
      if (dependsOn.length === 0) return undefined
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
    const dependents: Array<Array<number>> = steps.map(() => [])
    for (const [i, deps] of dependencies.entries()) for (const d of deps) dependents[d]!.push(i)
    const ended: Array<number> = []
    const skipDependents = () => {
      while (ended.length > 0) {
        const blocked = ended.pop()!
        const cause = status[blocked]!
        for (const i of dependents[blocked]!) {
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
      for (let i = 0; i < status.length; i++) {
        const tag = status[i]!._tag
        if ((tag === "Pending" || tag === "Running") && phaseOf[i]! < barrier) barrier = phaseOf[i]!
      }
      const out: Array<number> = []
      for (let i = 0; i < status.length; i++) {
        if (status[i]!._tag !== "Pending" || phaseOf[i]! > barrier) continue
        const deps = dependencies[i]!
        let done = true
        for (let k = 0; k < deps.length && done; k++) done = status[deps[k]!]!._tag === "Done"
        if (done) out.push(i)
      }
      return out.length > 1 ? out.sort((a, b) => priorityOf[a]! - priorityOf[b]! || a - b) : out
    }

    let stopStep: number | undefined
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
        running--
        if (Exit.isSuccess(exit)) {
          status[index] = { _tag: "Done", result: exit.value }
          if (Option.isSome(tracker)) yield* tracker.value.stepCompleted(nameOf(index))
          continue
        }
        const failure = Cause.failureOption(exit.cause)
        if (Option.isNone(failure)) {
          // A defect (or an interruption from inside the step): not a value here.
          yield* Fiber.interruptAll(runningFibers(status))
          return yield* Effect.failCause(Cause.stripFailures(exit.cause))
        }
        status[index] = { _tag: "Failed", error: failure.value }
        ended.push(index)
        firstFailure ??= { index, error: failure.value }
      }
      if (failFast && firstFailure !== undefined) break
    }

    if (firstFailure !== undefined && failFast) {
      const failed = nameOf(firstFailure.index)
      const fibers = runningFibers(status)
      yield* Fiber.interruptAll(fibers)
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
      return yield* Effect.dieMessage("the plan run ended with steps that neither ran nor were skipped")
    }
    const why = firstFailure === undefined
      ? "the run was stopped"
      : `step "${nameOf(firstFailure.index)}" failed`
    for (const [i, s] of status.entries()) {
      if (s._tag === "Pending") skip(i, { reason: "stopped", interrupted: false, message: `not started: ${why}` })
    }

    const completed = status.flatMap((s) => (s._tag === "Done" ? [s.result] : []))
    if (completed.length === steps.length) {
      const last = plan.steps[plan.steps.length - 1]
      const output = last === undefined ? undefined : completed.find((r) => r.name === last.name)?.output
      return PlanOutcome.Completed({ steps: completed, output, trace })
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
    return PlanOutcome.Failed({ completed, failedStep, error, failures, skipped, trace })
  }))

const runningFibers = (status: ReadonlyArray<Status>): ReadonlyArray<Fiber.RuntimeFiber<void>> =>
  status.flatMap((s) => (s._tag === "Running" && s.fiber !== undefined ? [s.fiber] : []))

/** The plan's trace (a manual one when the plan has none), recorded as a `plan.trace` event. */
const traceOf = (plan: Plan.ExecutionPlan): Effect.Effect<Plan.PlanTrace> =>
  Effect.gen(function* () {
    // built from the library's own values: not validated again
    const trace = plan.trace ?? Construct.unchecked(Plan.PlanTrace, {
      plannerId: "manual",
      rationale: "",
      createdAt: yield* DateTime.now,
      stepCount: plan.steps.length
    })
    yield* recordEvent((base) =>
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
    return trace
  })
