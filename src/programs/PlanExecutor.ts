/**
 * PlanExecutor: multi-step typed pipelines.
 *
 * A plan is a list of steps; each step's `type` selects a handler. A handler
 * declares the Schema of its input and of its output, so a step that receives the
 * wrong input fails at that step with ORCHESTRATION_STEP_MISMATCH (the parse
 * issues and their paths in `details.issues`), not with a crash later. A step
 * without explicit input takes the output of what it depends on: by default the
 * previous step (a pipeline); `dependsOn: []` makes a root, and several
 * dependencies give the step an object `{ [dependency]: output }`. Independent
 * steps run concurrently, at most `concurrency` at once across the whole plan;
 * among the ready steps the lowest `priority` starts first (ties: plan order).
 * Scheduling is dataflow (a step starts when its dependencies are done) unless
 * `phases` are given: then a barrier holds every step of phase n+1 until every
 * step of phase n has ended.
 *
 * Before anything runs, the plan is checked: every step type has a handler, the
 * dependency graph has unique names, known dependencies and no cycle, and the
 * PlanPolicy holds (max steps, allowed types, linear only). A rejected plan fails
 * the `execute` effect with an OrchestrationFailure (`details.rule` names the
 * rule). Once steps run, `execute` always succeeds with a PlanOutcome: `Completed`
 * with every step's result, or `Failed` with the completed steps, the typed
 * failure of the first step that failed, every failure and every skipped step
 * with its reason. The failure policy decides what a failure does: "fail-fast"
 * (the default) interrupts the running siblings and starts nothing else;
 * "continue" lets independent branches go on and skips the steps that depend on
 * the failure. A defect in a handler (a bug) is not turned into a value here: it
 * interrupts the other steps and propagates, for the facade to label.
 *
 * Per step: a retryable ConstraintFailure or ValidationFailure (VALIDATE rejected
 * the output) re-runs the step on a Schedule (EXECUTE -> VALIDATE -> EXECUTE);
 * with `retryOn: "retryable"` any failure marked retryable does, and a
 * non-retryable one always runs once;
 * `PlanPolicy.timeoutPerStep` bounds a step, retries included, and a step past it
 * fails with CANCELLED_TIMEOUT (a Cancellation: the step was cut off, the plan is
 * not at fault). Interruption: interrupting the fiber running `execute` interrupts
 * the running steps at once (Effect semantics, resources freed); to stop between
 * steps and keep the partial results, pass `stop`: once it completes no further
 * step starts, running steps finish, and the outcome is `Failed` with
 * CANCELLED_SIGNAL at the first step that did not start.
 *
 * Lifecycle: inside a tracked request (see Lifecycle) each completed step is
 * counted (ExecutionState.totalSteps, lastStep), and a rejected attempt reports
 * EXECUTE -> VALIDATE, its re-run VALIDATE -> EXECUTE (which counts the attempt).
 *
 * Events (when an EventLog is present): `plan.trace` once, then
 * `plan.step.start` / `plan.step.end` per step, each carrying `stepName` in its
 * correlation context, as do all events the step's own work records.
 *
 * The parts live in ./plan: handlers (Handler, Handlers, StepData), one step run
 * (Step), the graph (Graph) and what comes out (Outcome).
 */
import * as Context from "effect/Context"
import * as Scope from "effect/Scope"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Fiber from "effect/Fiber"
import type * as Schedule from "effect/Schedule"
import * as Tracer from "effect/Tracer"
import type { OrchestrationFailure } from "../domain/Failure.js"
import * as Plan from "../domain/Plan.js"
import type { FailurePolicy } from "../domain/Task.js"
import { retryPolicy } from "../services/Validator.js"
import * as Tracing from "../services/internal/Tracing.js"
import * as Observed from "./internal/Observed.js"
import * as Graph from "./plan/Graph.js"
import * as Checked from "./plan/Checked.js"
import type { HandlersContext, StepHandler } from "./plan/Handler.js"
import type { PlanOutcome } from "./plan/Outcome.js"
import type { RetryOn, StepEnvironment } from "./plan/Step.js"

export type { HandlersContext, StepContext, StepHandler } from "./plan/Handler.js"
export { fromProgram, handler, validatedBy, withValidation } from "./plan/Handler.js"
export type { InferOptions } from "./plan/Handlers.js"
export { infer, rerank, retrieve, retrieveContext, tool, validate } from "./plan/Handlers.js"
export type { SkippedStep, StepFailure, StepResult } from "./plan/Outcome.js"
export type { RetryOn } from "./plan/Step.js"
export { completedSteps, encodedOutputs, PlanOutcome, usageOf } from "./plan/Outcome.js"
export { CandidateSet, ContextSet, InferInput, ToolStepInput, ToolStepOutput, Validated } from "./plan/StepData.js"

export interface ExecuteOptions {
  /** Overrides the executor's policy. */
  readonly policy?: Plan.PlanPolicy | undefined
  /** When this effect completes, no further step starts; running steps finish. */
  readonly stop?: Effect.Effect<void> | undefined
  /** Lower starts first among the ready steps (absent: 0); ties go by plan order. */
  readonly priorities?: ReadonlyMap<string, number> | undefined
  /**
   * Step names per phase: a barrier between phases (no step of phase n+1 starts
   * before every step of phase n has ended). Each step in exactly one phase, its
   * dependencies in earlier ones. Absent: dataflow (a step starts when its
   * dependencies are done).
   */
  readonly phases?: ReadonlyArray<ReadonlyArray<string>> | undefined
  /** Overrides the executor's failure policy. */
  readonly failurePolicy?: FailurePolicy | undefined
  /** Overrides the executor's concurrency. */
  readonly concurrency?: number | undefined
  /** Overrides the executor's retry schedule. */
  readonly retry?: Schedule.Schedule<unknown> | undefined
  /** Overrides which failures re-run a step. */
  readonly retryOn?: RetryOn | undefined
}

export interface Options<H extends ReadonlyArray<StepHandler>> {
  /** One handler per step type; a later handler for the same type replaces an earlier one. */
  readonly handlers: H
  /** Default policy. Default: permissive. */
  readonly policy?: Plan.PlanPolicy | undefined
  /** Independent steps run at most this many at once. Default 4. */
  readonly concurrency?: number | undefined
  /** When a step is re-run. Default `Validator.retryPolicy`. */
  readonly retry?: Schedule.Schedule<unknown> | undefined
  /**
   * Which failures re-run a step: "validation" (VALIDATE rejected the output: a
   * retryable ConstraintFailure or ValidationFailure; the default) or "retryable"
   * (any failure marked retryable). Non-retryable failures run once.
   */
  readonly retryOn?: RetryOn | undefined
  /**
   * "fail-fast" (the default): the first failure interrupts the running steps and
   * starts no other. "continue": independent branches go on; the steps that depend
   * on a failure are skipped.
   */
  readonly failurePolicy?: FailurePolicy | undefined
}

export interface PlanExecutor {
  /** The step types this executor has handlers for. */
  readonly stepTypes: ReadonlyArray<string>
  /** The checks `execute` applies before running anything. */
  readonly check: (plan: Plan.ExecutionPlan, policy?: Plan.PlanPolicy) => Effect.Effect<void, OrchestrationFailure>
  readonly execute: (
    plan: Plan.ExecutionPlan,
    options?: ExecuteOptions
  ) => Effect.Effect<PlanOutcome, OrchestrationFailure>
}

/** Builds an executor over the handlers; their services are taken from the context once, here. */
export const make = <const H extends ReadonlyArray<StepHandler>>(
  options: Options<H>
): Effect.Effect<PlanExecutor, never, HandlersContext<H>> =>
  Effect.map(Effect.context<HandlersContext<H>>(), (context) =>
    // the span the executor is made in is not the parent of its steps' spans, and the scope it is made in is
    // not its steps' scope: a step's resources are the run's (released when the run ends), and a step runs with
    // the caller's context as it is when that holds the handlers' services. A handler that needs a Scope made
    // this require one: only then may the steps need a scope of the run's own.
    build(
      options,
      Context.omit(Tracer.ParentSpan, Scope.Scope)(context) as Context.Context<never>,
      context.unsafeMap.has(Scope.Scope.key)
    ))

/** Builds an executor and runs one plan. */
export const execute = <const H extends ReadonlyArray<StepHandler>>(
  plan: Plan.ExecutionPlan,
  options: Options<H> & ExecuteOptions
): Effect.Effect<PlanOutcome, OrchestrationFailure, HandlersContext<H>> =>
  Effect.flatMap(make(options), (executor) => executor.execute(plan, options))

interface Executor {
  readonly handlers: ReadonlyMap<string, StepHandler>
  readonly environment: StepEnvironment
  readonly concurrency: number
  readonly policy: Plan.PlanPolicy
  readonly failurePolicy: FailurePolicy
  /** Whether the handlers may need a Scope (the context the executor was made in held one). */
  readonly scoped: boolean
  /** What a run without options runs with. */
  readonly runOptions: Graph.RunOptions
}

const build = <H extends ReadonlyArray<StepHandler>>(
  options: Options<H>,
  context: Context.Context<never>,
  scoped: boolean
): PlanExecutor => {
  const concurrency = Math.max(1, options.concurrency ?? 4)
  const policy = options.policy ?? Plan.permissive
  const failurePolicy = options.failurePolicy ?? "fail-fast"
  const executor: Executor = {
    handlers: new Map<string, StepHandler>(options.handlers.map((h) => [h.type, h])),
    environment: { context, schedule: options.retry ?? retryPolicy, retryOn: options.retryOn },
    concurrency,
    policy,
    failurePolicy,
    scoped,
    runOptions: { concurrency, policy, failurePolicy, scoped }
  }
  return {
    stepTypes: [...executor.handlers.keys()],
    check: (plan, policy = executor.policy) => Effect.asVoid(Checked.check(executor.handlers, plan, policy)),
    execute: (plan, executeOptions) => executePlan(executor, plan, executeOptions)
  }
}

/**
 * A run: its span (when somebody observes), the plan checked and the steps
 * started in the step that begins it (Graph.runOn, on this fiber).
 */
const executePlan = (
  executor: Executor,
  plan: Plan.ExecutionPlan,
  options?: ExecuteOptions
): Effect.Effect<PlanOutcome, OrchestrationFailure> =>
  Effect.withFiberRuntime((fiber) =>
    Observed.listenedBy(fiber)
      ? Tracing.withSpan("PlanExecutor.execute")(Effect.withFiberRuntime((now) => executePlanOn(now, true, executor, plan, options)))
      : executePlanOn(fiber, false, executor, plan, options)
  )

const executePlanOn = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  listened: boolean,
  executor: Executor,
  plan: Plan.ExecutionPlan,
  options: ExecuteOptions | undefined
): Effect.Effect<PlanOutcome, OrchestrationFailure> => {
  const policy = options?.policy ?? executor.policy
  const steps = Checked.check(executor.handlers, plan, policy)
  if (Either.isLeft(steps)) return Effect.fail(steps.left)
  if (options === undefined) return Graph.runOn(fiber, listened, executor.environment, plan, steps.right, executor.runOptions)
  if (options.phases !== undefined) {
    const phased = Checked.checkPhases(steps.right, options.phases)
    if (Either.isLeft(phased)) return Effect.fail(phased.left)
  }
  const environment: StepEnvironment = options.retry === undefined && options.retryOn === undefined
    ? executor.environment
    : {
      ...executor.environment,
      schedule: options.retry ?? executor.environment.schedule,
      retryOn: options.retryOn ?? executor.environment.retryOn
    }
  return Graph.runOn(fiber, listened, environment, plan, steps.right, {
    concurrency: Math.max(1, options.concurrency ?? executor.concurrency),
    policy,
    stop: options.stop,
    priorities: options.priorities,
    phases: options.phases,
    failurePolicy: options.failurePolicy ?? executor.failurePolicy,
    scoped: executor.scoped
  })
}
