/**
 * A plan run as a dependency graph. Before anything runs the plan is checked
 * (every step type has a handler, the graph is sound, the policy holds) and each
 * step is paired with its handler. Then every step waits for the outputs of its
 * dependencies (none: no input; one: its output; several: `{ [name]: output }`),
 * at most `concurrency` run at once, and the first failure ends the run with the
 * completed steps kept. A `stop` signal lets running steps finish and starts no
 * other: the first step that did not start fails with CANCELLED_SIGNAL.
 */
import * as Data from "effect/Data"
import * as DateTime from "effect/DateTime"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Event from "../../domain/Event.js"
import type { Failure } from "../../domain/Failure.js"
import { Cancellation, OrchestrationFailure } from "../../domain/Failure.js"
import * as Plan from "../../domain/Plan.js"
import { recordEvent } from "../../services/EventLog.js"
import * as Lifecycle from "../Lifecycle.js"
import type { StepHandler } from "./Handler.js"
import type { StepResult } from "./Outcome.js"
import { PlanOutcome } from "./Outcome.js"
import * as Step from "./Step.js"

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
}

/** Runs the checked steps of `plan`; always an outcome once steps run. */
export const run = (
  environment: Step.StepEnvironment,
  plan: Plan.ExecutionPlan,
  steps: ReadonlyArray<CheckedStep>,
  options: RunOptions
): Effect.Effect<PlanOutcome> =>
  Effect.gen(function* () {
    const trace = yield* traceOf(plan)
    const outputs = new Map<string, Deferred.Deferred<unknown>>()
    for (const { step } of steps) outputs.set(step.name, yield* Deferred.make<unknown>())
    const results = yield* Ref.make<ReadonlyMap<string, StepResult>>(new Map())
    const semaphore = yield* Effect.makeSemaphore(options.concurrency)
    const stopped = yield* Deferred.make<void>()
    const outputOf = (name: string): Effect.Effect<Deferred.Deferred<unknown>> => {
      const output = outputs.get(name)
      return output === undefined ? Effect.dieMessage(`step "${name}" is not in the checked plan`) : Effect.succeed(output)
    }

    const task = ({ dependsOn, handler, step }: CheckedStep) =>
      Effect.gen(function* () {
        const upstream = yield* Effect.forEach(dependsOn, (d) => Effect.flatMap(outputOf(d), Deferred.await))
        const raw = step.input !== undefined
          ? step.input
          : dependsOn.length === 0
          ? undefined
          : dependsOn.length === 1
          ? upstream[0]
          : Object.fromEntries(dependsOn.map((d, k) => [d, upstream[k]]))
        yield* semaphore.withPermits(1)(Effect.gen(function* () {
          if (yield* Deferred.isDone(stopped)) {
            return yield* new StepFailed({
              step: step.name,
              error: Cancellation.signal(`stopped before step "${step.name}"`, { step: step.name })
            })
          }
          const result = yield* Effect.mapError(
            Step.run(environment, step, handler, raw, options.policy),
            (error) => new StepFailed({ step: step.name, error })
          )
          yield* Ref.update(results, (m) => new Map(m).set(step.name, result))
          yield* stepCompleted(step.name)
          yield* Deferred.succeed(yield* outputOf(step.name), result.output)
        }))
      })

    const all = Effect.forEach(steps, task, { concurrency: "unbounded", discard: true })
    const stop = options.stop
    // The watcher is forked before any step starts, and ends with the run.
    const watched = stop === undefined
      ? all
      : Effect.scoped(Effect.zipRight(Effect.forkScoped(Effect.zipRight(stop, Deferred.succeed(stopped, undefined))), all))
    const exit = yield* Effect.either(watched)
    const done = yield* Ref.get(results)
    const inOrder = plan.steps.flatMap((s) => Option.toArray(Option.fromNullable(done.get(s.name))))
    if (Either.isLeft(exit)) {
      return PlanOutcome.Failed({ completed: inOrder, failedStep: exit.left.step, error: exit.left.error, trace })
    }
    const last = plan.steps[plan.steps.length - 1]
    return PlanOutcome.Completed({
      steps: inOrder,
      output: last === undefined ? undefined : done.get(last.name)?.output,
      trace
    })
  })

class StepFailed extends Data.TaggedError("StepFailed")<{ readonly step: string; readonly error: Failure }> {}

/** The plan's trace (a manual one when the plan has none), recorded as a `plan.trace` event. */
const traceOf = (plan: Plan.ExecutionPlan): Effect.Effect<Plan.PlanTrace> =>
  Effect.gen(function* () {
    const trace = plan.trace ?? new Plan.PlanTrace({
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

/** Counts a completed step on the request's lifecycle tracker, when there is one. */
const stepCompleted = (name: string): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(Lifecycle.currentTracker), (tracker) =>
    Option.isSome(tracker) ? tracker.value.stepCompleted(name) : Effect.void)
