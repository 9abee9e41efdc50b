/**
 * The one module that touches @effect/workflow: durable runs on a WorkflowEngine
 * (the cluster's SingleRunner over SQL, or the engine's in-memory layer), with the
 * engine's known hazards out of reach of the programs:
 *
 * - Two activities with one name in a run share the first one's result: step keys
 *   are claimed per execution, and a key claimed twice is a defect naming both
 *   call sites.
 * - A sleep's countdown restarts on replay: there are no sleeps. Deadlines are
 *   absolute times computed once inside a step; a slot's SLA is a timer of this
 *   module, armed from the stored deadline (again after a restart).
 * - `raceAll` of an await and a timer returns the timer: never raced. A slot is one
 *   deferred that either the answer or the SLA timer completes; the store's
 *   conditional UPDATE decides who was first, and only the winner completes it.
 * - A deferred completed twice drops the second answer silently, and its token is
 *   derived from the payload: answers go through `respond`, which checks who
 *   answers (a random secret drawn in a step, stored hashed and never journaled;
 *   or the responder the slot names) and the slot's status first.
 * - A resume can be lost when a deferred completes before the run's suspension is
 *   stored: after delivering an answer the run is resumed again until it moves.
 * - Recorded values are decoded with the program's schemas: a record the code no
 *   longer reads is ORCHESTRATION_REPLAY_DIVERGED naming the record.
 *
 * Each run is one workflow execution whose id is the run id. The program's
 * failures and defects end the run (recorded) and complete the workflow with an
 * outcome value. (The engine's SuspendOnFailure is not used: it applies to every
 * activity too, so a step's typed failure would suspend the run instead of being
 * journaled.) A store that fails under a run's own bookkeeping is a defect of
 * that execution.
 */
import { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { ConfigurationFailure } from "../../domain/Failure.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import type { AnyDefinition, Requirements, Service as RunsService } from "../../services/Runs.js"
import * as Api from "./Api.js"
import * as InRun from "./InRun.js"
import * as Runtime from "./Runtime.js"
import * as Slots from "./Slots.js"

/**
 * `PAGANTIC_RETENTION_DAYS`: how long the threads of ended runs are kept (a
 * positive number of days; unset: until pruned by hand). A malformed value is a
 * CONFIG_INVALID_REQUEST naming the variable.
 */
export const retentionConfig: Effect.Effect<Duration.Duration | undefined, ConfigurationFailure> = Config.option(
  Config.number("PAGANTIC_RETENTION_DAYS").pipe(Config.validate({ message: "a positive number of days", validation: (n) => n > 0 }))
).pipe(
  Effect.map((days) => Option.isSome(days) ? Duration.days(days.value) : undefined),
  Effect.mapError((error) => ConfigurationFailure.invalidRequest(`PAGANTIC_RETENTION_DAYS: ${String(error)}`, { details: { variable: "PAGANTIC_RETENTION_DAYS" } }))
)

/**
 * How long closing a runner waits for a run inside a step to finish before it
 * interrupts it (the run is re-driven from its records at the next start):
 * @effect/cluster's entity termination timeout, 15 seconds.
 */
export const defaultDrain: Duration.Duration = Duration.seconds(15)

/**
 * `PAGANTIC_DRAIN_SECONDS`: how long closing a runner waits for a run inside a
 * step (a number of seconds, 0 or more; unset: `defaultDrain`). A malformed value
 * is a CONFIG_INVALID_REQUEST naming the variable.
 */
export const drainConfig: Effect.Effect<Duration.Duration, ConfigurationFailure> = Config.number("PAGANTIC_DRAIN_SECONDS").pipe(
  Config.validate({ message: "a number of seconds, 0 or more", validation: (n) => n >= 0 }),
  Config.map((seconds) => Duration.millis(Math.round(seconds * 1000))),
  Config.withDefault(defaultDrain)
).pipe(
  Effect.mapError((error) => ConfigurationFailure.invalidRequest(`PAGANTIC_DRAIN_SECONDS: ${String(error)}`, { details: { variable: "PAGANTIC_DRAIN_SECONDS" } }))
)

export interface Options extends Api.Options {
  /** Identifies this process's hold on the runs (a run recorded running by another owner is stale). */
  readonly owner: string
  /** Several processes share the store: their changes reach this one's waiters, and their live runs are theirs. */
  readonly shared?: Runtime.Shared | undefined
  /**
   * With a shared store: how often this process looks at the open slots (arming
   * their SLA timers) and the slots closed but not delivered (delivering them), so
   * that a slot of a run whose process died still expires and is still handed over.
   */
  readonly rescan?: Duration.DurationInput | undefined
  /**
   * Threads of runs that ended longer ago than this are pruned: at start, then
   * every `retentionEvery` (default hourly). Default: kept until pruned by hand.
   */
  readonly retention?: Duration.DurationInput | undefined
  readonly retentionEvery?: Duration.DurationInput | undefined
}

/**
 * Registers `definitions` with the WorkflowEngine in context and returns the
 * Runs service over them, after re-driving what a previous process left going:
 * runs recorded as going are started (or resumed) again, slots closed but not
 * delivered are delivered, and the SLA timers of open slots are armed from their
 * stored deadlines.
 */
export const make = <Defs extends AnyDefinition>(
  definitions: ReadonlyArray<Defs>,
  options: Options
): Effect.Effect<
  RunsService,
  OrchestrationFailure | ConfigurationFailure,
  WorkflowEngine | SqlClient.SqlClient | Scope.Scope | Requirements<Defs>
> =>
  Effect.gen(function* () {
    const engine = yield* WorkflowEngine
    const runtime = yield* Runtime.make(definitions, options.owner, options.shared)
    const slots = Slots.make(runtime)
    const requirements = yield* Effect.context<Requirements<Defs>>()
    const { byName, store } = runtime
    const { arm, deliver } = slots
    const execute = InRun.execute(runtime, slots, requirements as never)

    for (const { definition, workflow } of byName.values()) {
      yield* engine.register(workflow, execute(definition))
    }

    // -- re-drive what a previous process left going ------------------------------

    const isLive = options.shared === undefined ? () => false : yield* options.shared.isLive
    for (const row of yield* store.activeRuns) {
      // going in another live process (one store shared by several)
      if (row.owner !== null && row.owner !== options.owner && isLive(row.owner)) continue
      const entry = byName.get(row.definition)
      if (entry === undefined) {
        yield* Effect.logWarning(`run ${row.id} is of definition "${row.definition}", not registered here: left as is`)
        continue
      }
      yield* engine.execute(entry.workflow, { executionId: row.id, payload: {}, discard: true })
      yield* engine.resume(entry.workflow, row.id)
    }
    const slotsLeft = Effect.gen(function* () {
      for (const slot of yield* store.undelivered) yield* deliver(slot)
      for (const slot of yield* store.openSlots) yield* arm(slot.run_id, slot.key, slot.deadline)
    })
    yield* slotsLeft
    if (options.shared !== undefined && options.rescan !== undefined) {
      yield* slotsLeft.pipe(
        Effect.catchAll((error) => Effect.logWarning(`looking for slots left by other processes failed: ${error.message}`)),
        Effect.repeat(Schedule.spaced(Duration.decode(options.rescan))),
        Effect.delay(Duration.decode(options.rescan)),
        Effect.forkIn(runtime.scope)
      )
    }

    const runs = Api.make(runtime, slots, options)
    if (options.retention !== undefined) {
      const olderThan = options.retention
      const prune = runs.prune({ olderThan }).pipe(
        Effect.tap((gone) => gone > 0 ? Effect.logInfo(`retention: pruned ${gone} ended run(s)`) : Effect.void),
        Effect.catchAll((error) => Effect.logWarning(`retention: pruning ended runs failed: ${error.message}`))
      )
      // once before the service is handed out, then in the background
      yield* prune
      const every = Duration.decode(options.retentionEvery ?? "1 hour")
      yield* prune.pipe(Effect.repeat(Schedule.spaced(every)), Effect.delay(every), Effect.forkIn(runtime.scope))
    }
    return runs
  })
