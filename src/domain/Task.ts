/**
 * Layer 0: tasks, the unit of work of the task orchestrator.
 *
 * An analyzer (a model, or a client) breaks a request into a TaskList: a short
 * analysis and the tasks. Each task names its `type` (what kind of work it is),
 * the `processor` that runs it (a registered TaskProcessor), a `priority` (lower
 * runs first), the ids it depends on, a `description` (handed to the processor:
 * it is the task's instruction) and string `metadata`. The orchestrator turns the
 * list into phases and runs it; what comes out is an OrchestratorResult: the
 * completed tasks with their outputs, the failed ones with their typed failure,
 * the skipped ones with the reason, the analysis, and metadata (the phases among it).
 *
 * The JSON shape of a TaskList, as an analyzer writes it (compact, one line, the
 * fields of a task always present and in this order: id, type, processor,
 * priority, dependencies, description, metadata):
 *
 *   {"analysis":"two reviews to classify, then a sum","tasks":[
 *   {"id":"t1","type":"sentiment","processor":"sentiment","priority":1,"dependencies":[],"description":"Classify: great phone","metadata":{}},
 *   {"id":"t2","type":"sum","processor":"calculator","priority":2,"dependencies":["t1"],"description":"Add 2 and 3","metadata":{"expression":"2+3"}}]}
 *
 * (shown on three lines here; the analyzer emits it on one). `id` is 1 to 128
 * characters, `type` and `processor` 1 to 64, `priority` an integer,
 * `dependencies` the ids of tasks of the same list, `metadata` string values only.
 * When decoding from a client, `priority` (0), `dependencies` ([]), `description`
 * ("") and `metadata` ({}) may be left out.
 */
import * as Schema from "effect/Schema"
import { Failure } from "./Failure.js"
import { TokenUsage } from "./TokenUsage.js"

// ---------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------

/** A task's id: trimmed, 1 to 128 characters. */
export const TaskId = Schema.NonEmptyTrimmedString.pipe(Schema.maxLength(128)).annotations({ identifier: "TaskId" })

/** What kind of work a task is: trimmed, 1 to 64 characters. */
export const TaskType = Schema.NonEmptyTrimmedString.pipe(Schema.maxLength(64)).annotations({ identifier: "TaskType" })

/** The name a TaskProcessor is registered under: trimmed, 1 to 64 characters. */
export const ProcessorType = Schema.NonEmptyTrimmedString.pipe(Schema.maxLength(64)).annotations({
  identifier: "ProcessorType"
})

/** Lower runs first. */
export const Priority = Schema.Int.annotations({ identifier: "Priority" })

/** String values only: what an analyzer can write and an XML `item` can hold. */
export const TaskMetadata = Schema.Record({ key: Schema.String, value: Schema.String })

/** One unit of work. */
export class Task extends Schema.Class<Task>("Task")({
  id: TaskId,
  type: TaskType,
  processor: ProcessorType,
  priority: Schema.optionalWith(Priority, { default: () => 0 }),
  dependencies: Schema.optionalWith(Schema.Array(TaskId), { default: () => [] }),
  /** The task's instruction, handed to its processor. */
  description: Schema.optionalWith(Schema.String, { default: () => "" }),
  metadata: Schema.optionalWith(TaskMetadata, { default: () => ({}) })
}) {}

/** What an analyzer emits: why the work was split so, and the tasks. */
export class TaskList extends Schema.Class<TaskList>("TaskList")({
  analysis: Schema.String,
  tasks: Schema.Array(Task)
}) {}

/** A TaskList as a plain object, every field present, in the documented order. */
const plain = (list: TaskList) => ({
  analysis: list.analysis,
  tasks: list.tasks.map((t) => ({
    id: t.id,
    type: t.type,
    processor: t.processor,
    priority: t.priority,
    dependencies: t.dependencies,
    description: t.description,
    metadata: t.metadata
  }))
})

/**
 * Descriptions copied from the request: a task whose processor is one of
 * `processors` has for its description one of `passages` exactly (the request's
 * quoted passages, see Analyzer.quotedPassages). Engines that constrain decoding
 * then cannot misspell a passage while copying it: the model chooses which
 * passage, the grammar writes it.
 */
export interface Grounding {
  readonly processors: ReadonlyArray<string>
  readonly passages: ReadonlyArray<string>
}

/**
 * The schema an analyzer's JSON is held to: every field required, in the
 * documented order, `processor` one of `processors` (so schema-constrained
 * decoding cannot name a processor that does not exist). With a grounding, the
 * tasks of its processors have one of its passages for description (the others
 * any text): a union of two task shapes. Decodes to a TaskList.
 */
export const taskListFor = (processors: readonly [string, ...Array<string>], grounding?: Grounding) => {
  const draftTask = <P extends Schema.Schema.Any, D extends Schema.Schema.Any>(processor: P, description: D) =>
    Schema.Struct({
      id: TaskId,
      type: TaskType,
      processor,
      priority: Priority,
      dependencies: Schema.Array(TaskId),
      description,
      metadata: TaskMetadata
    })
  const grounded = processors.filter((p) => grounding?.processors.includes(p) === true)
  const free = processors.filter((p) => !grounded.includes(p))
  const passages = grounding?.passages ?? []
  const item = grounded.length === 0 || passages.length === 0
    ? draftTask(Schema.Literal(...processors), Schema.String)
    : free.length === 0
    ? draftTask(Schema.Literal(...grounded), Schema.Literal(...passages))
    : Schema.Union(
      draftTask(Schema.Literal(...grounded), Schema.Literal(...passages)),
      draftTask(Schema.Literal(...free), Schema.String)
    )
  const Draft = Schema.Struct({ analysis: Schema.String, tasks: Schema.Array(item as typeof plainTask) })
  return Schema.transform(Draft, Schema.typeSchema(TaskList), {
    strict: true,
    decode: (draft) => new TaskList({ analysis: draft.analysis, tasks: draft.tasks.map((t) => new Task(t)) }),
    encode: plain
  }).annotations({ identifier: "TaskList" })
}

/** The type every task shape of `taskListFor` decodes to. */
const plainTask = Schema.Struct({
  id: TaskId,
  type: TaskType,
  processor: Schema.String,
  priority: Priority,
  dependencies: Schema.Array(TaskId),
  description: Schema.String,
  metadata: TaskMetadata
})

/** A TaskList as compact JSON, fields in the documented order. */
export const toJson = (list: TaskList): string => JSON.stringify(plain(list))

// ---------------------------------------------------------------------------
// How a task list runs
// ---------------------------------------------------------------------------

/**
 * "dataflow": a task starts as soon as its dependencies are done. "phases": a
 * barrier between phases; no task of phase n+1 starts before every task of
 * phase n has ended.
 */
export const Scheduling = Schema.Literal("dataflow", "phases")
export type Scheduling = typeof Scheduling.Type

/**
 * "fail-fast": the first failure interrupts the running tasks and starts no
 * other. "continue": independent branches go on; the dependents of a failed task
 * are skipped.
 */
export const FailurePolicy = Schema.Literal("fail-fast", "continue")
export type FailurePolicy = typeof FailurePolicy.Type

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/** A task that completed. */
export class TaskResult extends Schema.Class<TaskResult>("TaskResult")({
  id: TaskId,
  processor: ProcessorType,
  output: Schema.Unknown,
  attempts: Schema.Int,
  /** Clock times, epoch milliseconds. */
  startedAt: Schema.Number,
  finishedAt: Schema.Number
}) {}

/** A task that ran and failed, with its typed failure. */
export class TaskFailure extends Schema.Class<TaskFailure>("TaskFailure")({
  id: TaskId,
  processor: ProcessorType,
  error: Failure
}) {}

/**
 * Why a task did not run to the end: a task it depends on failed (or was itself
 * skipped), or the run was stopped (a stop signal, or fail-fast after another
 * task's failure; `interrupted` when it was running then).
 */
export const SkipReason = Schema.Literal("dependency_failed", "stopped")
export type SkipReason = typeof SkipReason.Type

/** A task that did not complete and did not fail itself. */
export class TaskSkipped extends Schema.Class<TaskSkipped>("TaskSkipped")({
  id: TaskId,
  processor: ProcessorType,
  reason: SkipReason,
  /** For `dependency_failed`: the dependency that did not complete. */
  dependency: Schema.optional(TaskId),
  /** Whether it was running when it was stopped. */
  interrupted: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  message: Schema.String
}) {}

/** How the run was made and went. */
export class OrchestratorMetadata extends Schema.Class<OrchestratorMetadata>("OrchestratorMetadata")({
  /** The plan: task ids per phase, in order. */
  phases: Schema.Array(Schema.Array(TaskId)),
  scheduling: Scheduling,
  failurePolicy: FailurePolicy,
  maxConcurrent: Schema.Int,
  taskCount: Schema.NonNegativeInt,
  /** Analyzer replies asked for (0 when the tasks were given). */
  analyzerAttempts: Schema.NonNegativeInt,
  /** The tokens the analyzer's replies used (absent when the tasks were given). */
  analyzerUsage: Schema.optional(TokenUsage),
  /** Clock time from the start of execution to its end, milliseconds. */
  durationMs: Schema.Number
}) {}

/** What the orchestrator returns. */
export class OrchestratorResult extends Schema.Class<OrchestratorResult>("OrchestratorResult")({
  completed: Schema.Array(TaskResult),
  failed: Schema.Array(TaskFailure),
  skipped: Schema.Array(TaskSkipped),
  analysis: Schema.String,
  metadata: OrchestratorMetadata
}) {}

/** Whether every task completed. */
export const isComplete = (result: OrchestratorResult): boolean =>
  result.failed.length === 0 && result.skipped.length === 0
