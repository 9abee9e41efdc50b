/**
 * Orchestrator: a request broken into tasks by a model, the tasks run by
 * processors, in dependency order, under deterministic control.
 *
 * `process(task, context)` goes through four phases. Analysis: the analyzer (a
 * model behind the Engine) writes a TaskList; with the JSON parser (the default)
 * through Structured.run under a schema whose `processor` is an enum of the
 * registered processors, with the XML parser as text that is parsed and, when it
 * does not parse, answered with what was wrong and asked again. Parsing: the
 * reply becomes Tasks. Planning: the PlanCreator (dependency-based by default)
 * checks the graph (duplicate ids, unknown dependencies, cycles) and groups the
 * tasks into phases. Execution: the tasks are compiled to a PlanExecutor plan
 * (task -> step, processor -> step handler, dependencies -> dependsOn) and run:
 * "dataflow" (a task starts when its dependencies are done; the default) or
 * "phases" (a barrier between phases), at most `maxConcurrent` at once across
 * phases, the ready tasks by priority; a retryable failure is retried on the
 * exponential schedule of `retry`, a task past `defaultTimeout` fails with
 * CANCELLED_TIMEOUT; "fail-fast" (the default) interrupts the running tasks at
 * the first failure, "continue" lets independent branches finish and skips the
 * dependents of a failure. `execute(taskList, context)` runs a list a client
 * gives, from parsing on.
 *
 * Before anything runs, a task list longer than `maxTasks` fails the call
 * (ORCHESTRATION_ITERATION_LIMIT), a task naming a processor that is not
 * registered fails it (ORCHESTRATION_STEP_MISMATCH naming the registered ones),
 * as does a rejected graph. Once tasks run the call succeeds with an OrchestratorResult:
 * completed tasks with their outputs, failed tasks with their typed failure,
 * skipped tasks with the reason, the analysis, and metadata with the phases.
 *
 * Processors receive the task (description included) and the outputs of its
 * dependencies (see TaskProcessor); an Agent becomes one with
 * `TaskProcessor.fromAgent`. Services are taken from the context once, in `make`:
 * the processors' own, and the Engine and Constraint the analyzer needs (without
 * them `process` fails with CONFIG_NO_ENGINE; `execute` needs neither).
 *
 * Durable mode: called inside a durable run (the Durable service in the context
 * of the call), the analysis is a journaled step (`<key>/analysis`) and so is
 * each attempt of each task (`<key>/task/<id>/<attempt>`; `key` is
 * `RunOptions.durableKey`, default "orchestrator"). A run re-driven after a crash
 * takes the analysis and the tasks that completed (or failed) from the journal
 * and runs only the others: their processors are not invoked again; the task in
 * flight at the crash runs again. Task outputs are journaled as JSON, so a
 * processor's output must be a JSON value to come back the same; a processor
 * runs inside its task's step and must not journal steps of its own. A journal
 * failure (the state store down, a record the code no longer reads) fails the
 * task like any other failure.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"
import * as Construct from "../domain/Construct.js"
import * as Event from "../domain/Event.js"
import type { ConstraintFailure, Failure, InferenceFailure } from "../domain/Failure.js"
import { ConfigurationFailure, OrchestrationFailure } from "../domain/Failure.js"
import * as Plan from "../domain/Plan.js"
import type { FailurePolicy, OrchestratorResult, Scheduling, TaskList } from "../domain/Task.js"
import { OrchestratorMetadata, ProcessorType, TaskList as TaskListSchema } from "../domain/Task.js"
import { TokenUsage } from "../domain/TokenUsage.js"
import { Constraint } from "../services/Constraint.js"
import { Durable } from "../services/Durable.js"
import { Engine } from "../services/Engine.js"
import { recordEvent } from "../services/EventLog.js"
import * as Analyzer from "./orchestrator/Analyzer.js"
import * as Compile from "./orchestrator/Compile.js"
import * as PlanCreator from "./orchestrator/PlanCreator.js"
import * as Retry from "./orchestrator/Retry.js"
import type * as TaskParser from "./orchestrator/TaskParser.js"
import { json } from "./orchestrator/TaskParser.js"
import type { ProcessorsContext, TaskProcessor } from "./orchestrator/TaskProcessor.js"
import * as PlanExecutor from "./PlanExecutor.js"
import * as Observed from "./internal/Observed.js"

export type { AnalyzerConfig } from "./orchestrator/Analyzer.js"
export type { RetryConfig } from "./orchestrator/Retry.js"

export const defaultMaxConcurrent = 4

/** The most tasks one run takes by default. */
export const defaultMaxTasks = 1_000

export interface Options<P extends Readonly<Record<string, TaskProcessor<any>>>> {
  /** The processors by name: the names a task's `processor` may take. At least one. */
  readonly processors: P
  /** Tasks running at once, across phases. A positive integer. Default 4. */
  readonly maxConcurrent?: number | undefined
  /** A task list longer than this is refused before anything runs (ORCHESTRATION_ITERATION_LIMIT). Default 1,000. */
  readonly maxTasks?: number | undefined
  /** Each task's deadline, its retries included: past it, CANCELLED_TIMEOUT. Default none. */
  readonly defaultTimeout?: Duration.DurationInput | undefined
  /** Retries of retryable task failures. Default 3 attempts, 1 s then 2 s. */
  readonly retry?: Retry.RetryConfig | undefined
  /** How the analyzer's reply is read. Default the JSON parser. */
  readonly parser?: TaskParser.TaskParser | undefined
  /** How tasks become phases. Default the dependency plan creator (10 tasks per phase). */
  readonly planCreator?: PlanCreator.PlanCreator | undefined
  readonly analyzer?: Analyzer.AnalyzerConfig | undefined
  /** Default "dataflow". */
  readonly scheduling?: Scheduling | undefined
  /** Default "fail-fast". */
  readonly failurePolicy?: FailurePolicy | undefined
}

export interface RunOptions {
  /** When this effect completes, no further task starts; running tasks finish; the rest are skipped. */
  readonly stop?: Effect.Effect<void> | undefined
  /**
   * In a durable run: the prefix of this call's step keys, unique among the
   * orchestrator calls of one run. Default "orchestrator".
   */
  readonly durableKey?: string | undefined
}

/** The prefix of an orchestrator call's step keys in a durable run, by default. */
export const defaultDurableKey = "orchestrator"

const isProcessError = (failure: Failure): failure is ProcessError =>
  failure._tag === "OrchestrationFailure" || failure._tag === "ConfigurationFailure" ||
  failure._tag === "InferenceFailure" || failure._tag === "ConstraintFailure"

/** An analysis as it is journaled. */
const AnalysisSchema = Schema.Struct({ list: TaskListSchema, attempts: Schema.Number, usage: TokenUsage })

/** Each attempt of each task as a step of the durable run, keyed by the task id and the attempt. */
const journalOf = (durable: Option.Option<Context.Tag.Service<Durable>>, prefix: string): Compile.Journal | undefined =>
  Option.match(durable, {
    onNone: () => undefined,
    onSome: (d) => (task, attempt, run) => d.step(`${prefix}/task/${task.id}/${attempt}`, Schema.Unknown, run)
  })

/** What `execute` can fail with before any task runs. */
export type ExecuteError = OrchestrationFailure | ConfigurationFailure
/** What `process` can fail with: the analysis' failures too. */
export type ProcessError = ExecuteError | InferenceFailure | ConstraintFailure

export interface Orchestrator {
  /** The registered processor names, sorted. */
  readonly processorTypes: ReadonlyArray<string>
  /** The analyzer's instruction, as sent. */
  readonly instruction: string
  /** Analyzes `task`, then parses, plans and executes. */
  readonly process: (
    task: string,
    context?: Readonly<Record<string, unknown>>,
    options?: RunOptions
  ) => Effect.Effect<OrchestratorResult, ProcessError>
  /** Plans and executes a given task list. */
  readonly execute: (
    list: TaskList,
    context?: Readonly<Record<string, unknown>>,
    options?: RunOptions
  ) => Effect.Effect<OrchestratorResult, ExecuteError>
}

/** Builds an orchestrator; a bad option is CONFIG_INVALID_REQUEST naming it. */
export const make = <const P extends Readonly<Record<string, TaskProcessor<any>>>>(
  options: Options<P>
): Effect.Effect<Orchestrator, ConfigurationFailure, ProcessorsContext<P>> =>
  Effect.gen(function* () {
    const settings = yield* checkOptions(options)
    // the span the orchestrator is made in is not the parent of its runs' spans
    const context = Context.omit(Tracer.ParentSpan)(yield* Effect.context<ProcessorsContext<P>>()) as Context.Context<never>
    const processors = new Map<string, TaskProcessor<never>>(
      Object.entries<TaskProcessor<unknown>>(options.processors).map(([name, processor]) => {
        const provided: TaskProcessor<never> = {
          process: (task, taskContext) =>
            Effect.provide(processor.process(task, taskContext), context) as Effect.Effect<unknown, Failure>
        }
        return [name, provided] as const
      })
    )
    return build(settings, processors, context, Context.getOption(context, Engine), Context.getOption(context, Constraint))
  })

interface Settings {
  readonly names: readonly [string, ...Array<string>]
  readonly maxConcurrent: number
  readonly maxTasks: number
  readonly timeout: Option.Option<Duration.Duration>
  readonly retry: Schedule.Schedule<unknown>
  readonly parser: TaskParser.TaskParser
  readonly planCreator: PlanCreator.PlanCreator
  readonly analyzer: Analyzer.AnalyzerConfig
  readonly scheduling: Scheduling
  readonly failurePolicy: FailurePolicy
}

const invalid = (field: string, message: string, value: unknown) =>
  ConfigurationFailure.invalidRequest(`${field} ${message}`, { details: { field, value } })

const checkOptions = <P extends Readonly<Record<string, TaskProcessor<any>>>>(
  options: Options<P>
): Effect.Effect<Settings, ConfigurationFailure> =>
  Effect.gen(function* () {
    const names = Object.keys(options.processors).sort()
    if (!isNonEmpty(names)) return yield* invalid("processors", "must name at least one processor", names)
    const badName = names.find((n) => Either.isLeft(Schema.decodeUnknownEither(ProcessorType)(n)))
    if (badName !== undefined) {
      return yield* invalid("processors", `has the name ${JSON.stringify(badName)}; a name is 1 to 64 characters without surrounding spaces`, badName)
    }
    const maxConcurrent = options.maxConcurrent ?? defaultMaxConcurrent
    if (!Number.isSafeInteger(maxConcurrent) || maxConcurrent < 1) {
      return yield* invalid("maxConcurrent", `must be a positive integer, got ${String(maxConcurrent)}`, maxConcurrent)
    }
    const maxTasks = options.maxTasks ?? defaultMaxTasks
    if (!Number.isSafeInteger(maxTasks) || maxTasks < 1) {
      return yield* invalid("maxTasks", `must be a positive integer, got ${String(maxTasks)}`, maxTasks)
    }
    const timeout = options.defaultTimeout === undefined ? Option.none() : Duration.decodeUnknown(options.defaultTimeout)
    if (options.defaultTimeout !== undefined && (Option.isNone(timeout) || Duration.toMillis(timeout.value) <= 0)) {
      return yield* invalid("defaultTimeout", `must be a positive duration, got ${String(options.defaultTimeout)}`, String(options.defaultTimeout))
    }
    const attempts = options.analyzer?.attempts
    if (attempts !== undefined && (!Number.isSafeInteger(attempts) || attempts < 1)) {
      return yield* invalid("analyzer.attempts", `must be a positive integer, got ${String(attempts)}`, attempts)
    }
    return {
      names,
      maxConcurrent,
      maxTasks,
      timeout,
      retry: yield* Retry.schedule(options.retry ?? Retry.defaultRetry),
      parser: options.parser ?? json(),
      planCreator: options.planCreator ?? PlanCreator.dependency(),
      analyzer: options.analyzer ?? {},
      scheduling: options.scheduling ?? "dataflow",
      failurePolicy: options.failurePolicy ?? "fail-fast"
    }
  })

const isNonEmpty = <A>(as: ReadonlyArray<A>): as is readonly [A, ...Array<A>] => as.length > 0

const build = (
  settings: Settings,
  processors: ReadonlyMap<string, TaskProcessor<never>>,
  context: Context.Context<never>,
  engine: Option.Option<Context.Tag.Service<Engine>>,
  constraint: Option.Option<Context.Tag.Service<Constraint>>
): Orchestrator => {
  const execute = (
    list: TaskList,
    taskContext: Readonly<Record<string, unknown>>,
    analysis: Option.Option<Analyzer.Analysis>,
    options: RunOptions
  ) => executeList(settings, processors, list, taskContext, analysis, options)
  return {
    processorTypes: settings.names,
    instruction: Analyzer.renderInstruction(settings.analyzer, settings.parser),
    execute: (list, taskContext = {}, options = {}) => execute(list, taskContext, Option.none(), options),
    process: Observed.fn("Orchestrator.process")(function* (
      task: string,
      taskContext: Readonly<Record<string, unknown>> = {},
      options: RunOptions = {}
    ) {
      if (Option.isNone(engine) || Option.isNone(constraint)) {
        return yield* ConfigurationFailure.noEngine(
          "the orchestrator's analyzer needs an Engine and a Constraint in the context Orchestrator.make ran in"
        )
      }
      const services = context.pipe(Context.add(Engine, engine.value), Context.add(Constraint, constraint.value))
      const analyze = Effect.provide(
        Analyzer.analyze(task, taskContext, {
          config: settings.analyzer,
          parser: settings.parser,
          processors: settings.names
        }),
        services
      )
      const durable = yield* Effect.serviceOption(Durable)
      const analysis: Analyzer.Analysis = Option.isNone(durable)
        ? yield* analyze
        : yield* durable.value.step(`${options.durableKey ?? defaultDurableKey}/analysis`, AnalysisSchema, analyze).pipe(
          Effect.catchAll((failure) => (isProcessError(failure) ? Effect.fail(failure) : Effect.die(failure)))
        )
      return yield* execute(analysis.list, taskContext, Option.some(analysis), options)
    })
  }
}

const executeList = Observed.fn("Orchestrator.execute")(function* (
  settings: Settings,
  processors: ReadonlyMap<string, TaskProcessor<never>>,
  list: TaskList,
  context: Readonly<Record<string, unknown>>,
  analysis: Option.Option<Analyzer.Analysis>,
  options: RunOptions
) {
  if (list.tasks.length > settings.maxTasks) {
    return yield* OrchestrationFailure.iterationLimit(
      `the task list has ${list.tasks.length} tasks, more than the ${settings.maxTasks} allowed`,
      { details: { rule: "maxTasks", taskCount: list.tasks.length, maxTasks: settings.maxTasks } }
    )
  }
  const unknown = list.tasks.filter((t) => !processors.has(t.processor))
  if (unknown.length > 0) {
    const named = unknown.slice(0, 5).map((t) => `"${t.processor}" (task "${t.id}")`).join(", ")
    const more = unknown.length > 5 ? ` and ${unknown.length - 5} more` : ""
    return yield* OrchestrationFailure.stepMismatch(
      `no processor is registered for ${named}${more}; the processors are ${settings.names.join(", ")}`,
      { details: { rule: "unknownProcessor", tasks: unknown.slice(0, 32).map((t) => t.id), available: settings.names } }
    )
  }
  const phases = yield* settings.planCreator.createPlan(list.tasks)
  const durable = yield* Effect.serviceOption(Durable)
  const compiled = Compile.compile(phases, processors, context, journalOf(durable, options.durableKey ?? defaultDurableKey))
  yield* recordEvent((base) =>
    new Event.Custom({
      ...base,
      layer: "orchestrate",
      action: "orchestrator.plan",
      data: {
        taskCount: list.tasks.length,
        phases: compiled.phases,
        analyzerAttempts: Option.match(analysis, { onNone: () => 0, onSome: (a) => a.attempts }),
        scheduling: settings.scheduling,
        failurePolicy: settings.failurePolicy
      }
    })
  )
  const executor = yield* PlanExecutor.make({
    handlers: compiled.handlers,
    concurrency: settings.maxConcurrent,
    retry: settings.retry,
    retryOn: "retryable",
    failurePolicy: settings.failurePolicy
  })
  const startedAt = yield* Clock.currentTimeMillis
  const outcome = yield* executor.execute(compiled.plan, {
    policy: Option.match(settings.timeout, {
      onNone: () => Plan.permissive,
      onSome: (timeoutPerStep) => new Plan.PlanPolicy({ timeoutPerStep })
    }),
    priorities: compiled.priorities,
    phases: settings.scheduling === "phases" ? compiled.phases : undefined,
    stop: options.stop
  })
  const finishedAt = yield* Clock.currentTimeMillis
  return Compile.toResult(
    outcome,
    new Map(list.tasks.map((t) => [t.id, t])),
    Construct.unchecked(OrchestratorMetadata, {
      phases: compiled.phases,
      scheduling: settings.scheduling,
      failurePolicy: settings.failurePolicy,
      maxConcurrent: settings.maxConcurrent,
      taskCount: list.tasks.length,
      analyzerAttempts: Option.match(analysis, { onNone: () => 0, onSome: (a) => a.attempts }),
      ...Option.match(analysis, { onNone: () => ({}), onSome: (a) => ({ analyzerUsage: a.usage }) }),
      durationMs: finishedAt - startedAt
    }),
    list.analysis
  )
})
