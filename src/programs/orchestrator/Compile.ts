/**
 * A task list, in phases, as a PlanExecutor plan, and the plan's outcome as an
 * OrchestratorResult. Each task becomes a step named by its id, typed by its
 * processor and depending on its dependencies; each processor becomes the step
 * handler of its type, which hands the processor the task itself (with its
 * description) and the outputs of its dependencies by id. Steps are listed in
 * phase order, so plan order is the plan creator's order. A `Journal` (durable
 * mode) wraps each attempt of each task, keyed by the task and the attempt.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Construct from "../../domain/Construct.js"
import type { Failure } from "../../domain/Failure.js"
import * as Plan from "../../domain/Plan.js"
import type { Task } from "../../domain/Task.js"
import { OrchestratorMetadata, OrchestratorResult, TaskFailure, TaskResult, TaskSkipped } from "../../domain/Task.js"
import type { StepHandler } from "../plan/Handler.js"
import { handler } from "../plan/Handler.js"
import type { PlanOutcome, SkippedStep } from "../plan/Outcome.js"
import type { Phases } from "./PlanCreator.js"
import type { TaskProcessor } from "./TaskProcessor.js"

export interface Compiled {
  readonly plan: Plan.ExecutionPlan
  /** Task ids per phase. */
  readonly phases: ReadonlyArray<ReadonlyArray<string>>
  readonly priorities: ReadonlyMap<string, number>
  readonly handlers: ReadonlyArray<StepHandler<unknown, unknown, never>>
}

/** What stands for one attempt of a task: the attempt itself, or (durable mode) its journaled result. */
export type Journal = (
  task: Task,
  attempt: number,
  run: Effect.Effect<unknown, Failure>
) => Effect.Effect<unknown, Failure>

/** The plan of `phases`, with one handler per processor type. */
export const compile = (
  phases: Phases,
  processors: ReadonlyMap<string, TaskProcessor<never>>,
  context: Readonly<Record<string, unknown>>,
  journal: Journal = (_task, _attempt, run) => run
): Compiled => {
  const tasks = phases.flat()
  const byId = new Map(tasks.map((t) => [t.id, t]))
  const handlers = [...processors.entries()].map(([type, processor]) =>
    handler(type, {
      input: Schema.Unknown,
      output: Schema.Unknown,
      // a processor's own retries are the orchestrator's schedule, applied by the executor
      run: (upstream, { attempt, step }) => {
        const task = byId.get(step.name)
        // the executor runs only the steps of this plan, and every step is a task
        return task === undefined
          ? Effect.dieMessage(`step "${step.name}" is not a task of the compiled plan`)
          : journal(task, attempt, processor.process(task, { context, dependencies: dependencyOutputs(task, upstream), attempt }))
      }
    })
  )
  return {
    // a task's id and processor are a step's name and type (the same constraints): not validated again (Construct)
    plan: Construct.unchecked(Plan.ExecutionPlan, {
      steps: tasks.map((t) => Construct.unchecked(Plan.Step, { name: t.id, type: t.processor, dependsOn: t.dependencies }))
    }),
    phases: phases.map((phase) => phase.map((t) => t.id)),
    priorities: new Map(tasks.map((t) => [t.id, t.priority])),
    handlers
  }
}

/**
 * The executor gives a step nothing (no dependency), the output (one) or
 * `{ [id]: output }` (several); a processor always gets the record.
 */
const dependencyOutputs = (task: Task, upstream: unknown): Readonly<Record<string, unknown>> => {
  const deps = task.dependencies
  if (deps.length === 0) return {}
  if (deps.length === 1) return { [deps[0]!]: upstream }
  return typeof upstream === "object" && upstream !== null ? (upstream as Record<string, unknown>) : {}
}

/** The outcome as the orchestrator's result. */
export const toResult = (
  outcome: PlanOutcome,
  tasks: ReadonlyMap<string, Task>,
  metadata: OrchestratorMetadata,
  analysis: string
): OrchestratorResult => {
  const processorOf = (id: string) => tasks.get(id)?.processor ?? "unknown"
  const steps = outcome._tag === "Completed" ? outcome.steps : outcome.completed
  const failures: ReadonlyArray<{ readonly name: string; readonly error: Failure }> = outcome._tag === "Completed"
    ? []
    : outcome.failures
  const skipped: ReadonlyArray<SkippedStep> = outcome._tag === "Completed" ? [] : outcome.skipped
  // built from the executor's outcome of checked tasks: not validated again (Construct)
  return Construct.unchecked(OrchestratorResult, {
    completed: steps.map((s) =>
      Construct.unchecked(TaskResult, {
        id: s.name,
        processor: s.type,
        output: s.output,
        attempts: s.attempts,
        startedAt: s.startedAt,
        finishedAt: s.finishedAt
      })
    ),
    failed: failures.map((f) => Construct.unchecked(TaskFailure, { id: f.name, processor: processorOf(f.name), error: f.error })),
    skipped: skipped.map((s) =>
      Construct.unchecked(TaskSkipped, {
        id: s.name,
        processor: s.type,
        reason: s.reason,
        ...(s.dependency === undefined ? {} : { dependency: s.dependency }),
        interrupted: s.interrupted,
        message: s.message
      })
    ),
    analysis,
    metadata
  })
}
