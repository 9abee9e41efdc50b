/**
 * The state the parts of the durable runs share in one process: the engine, the
 * store, the registered definitions with their workflows, the change feed every
 * write publishes a run id on (for `await` and `events`), the SLA timers, the runs
 * cancelled here and the secrets of the slots it opened (in memory only).
 * With several processes on one store (`Shared`), the feed carries their changes
 * too, and a run recorded running by another live process is not stale.
 */
import { WorkflowEngine } from "@effect/workflow/WorkflowEngine"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import type { AnyDefinition } from "../../services/Runs.js"
import type { Store } from "./Store.js"
import type { RunRow } from "./Tables.js"
import * as StoreModule from "./Store.js"
import type { RunWorkflow } from "./Encoding.js"
import { makeWorkflow } from "./Encoding.js"

export interface Entry {
  readonly definition: AnyDefinition
  readonly workflow: RunWorkflow
}

export interface Change {
  readonly runId: string
  readonly status: boolean
}

/** Several processes on one store (a shared database). */
export interface Shared {
  /** Tells the other processes that a run changed (never fails: a lost notice only delays a waiter elsewhere). */
  readonly publish: (change: Change) => Effect.Effect<void>
  /** The same notice as the NOTIFY a record carries along (Store.record). */
  readonly notice: (change: Change) => StoreModule.Notice
  /** The changes the processes publish (this one's may come back too). */
  readonly changes: Stream.Stream<Change>
  /** Whether an owner recorded on a run is a process alive now. */
  readonly isLive: Effect.Effect<(owner: string) => boolean>
}

export interface Runtime {
  readonly engine: WorkflowEngine["Type"]
  readonly store: Store
  readonly owner: string
  readonly scope: Scope.Scope
  /** Run ids as they change: `status` when the run's row moved, else a record was appended. */
  readonly changes: PubSub.PubSub<Change>
  readonly timers: FiberMap.FiberMap<string>
  /** Runs cancelled by this process: their next step fails CANCELLED_SIGNAL. */
  readonly cancelled: Set<string>
  /**
   * The secrets of the slots this process drew or re-drew, by run then slot key,
   * while the run goes: a replay of the run hands the program the same one.
   * Never written anywhere.
   */
  readonly secrets: Map<string, Map<string, string>>
  readonly byName: ReadonlyMap<string, Entry>
  readonly shared: Shared | undefined
  /** The run's row moved (status, waiting slot, end). */
  readonly changed: (runId: string) => Effect.Effect<boolean>
  /** A record was appended to the run's thread. */
  readonly appended: (runId: string) => Effect.Effect<boolean>
  /**
   * Appends DO `key` to a run's thread and says so, in one commit (the notice to
   * the other processes goes with the record's statement); false when the thread
   * has one already (another execution of the run wrote it first).
   */
  readonly recordDone: (runId: string, key: string, body: unknown) => Effect.Effect<boolean, OrchestrationFailure>
  readonly now: Effect.Effect<number>
  readonly findRun: (
    runId: string
  ) => Effect.Effect<Entry & { readonly row: RunRow }, OrchestrationFailure | ConfigurationFailure>
}

/** The runtime of `definitions` (names and answer shapes checked unique). */
/** What a Runs layer has, for a run of a definition it does not: the names, at most 12. */
export const describeDefinitions = (byName: ReadonlyMap<string, unknown>): string => {
  const names = [...byName.keys()]
  return names.length === 0
    ? "it has none"
    : `it has ${names.slice(0, 12).map((n) => JSON.stringify(n)).join(", ")}${names.length > 12 ? `, and ${names.length - 12} more` : ""}`
}

export const make = (
  definitions: ReadonlyArray<AnyDefinition>,
  owner: string,
  shared?: Shared | undefined
): Effect.Effect<Runtime, OrchestrationFailure | ConfigurationFailure, WorkflowEngine | SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function* () {
    const engine = yield* WorkflowEngine
    const store: Store = yield* StoreModule.make
    const scope = yield* Effect.scope
    const changes = yield* PubSub.unbounded<Change>()
    const timers = yield* FiberMap.make<string>()
    const cancelled = new Set<string>()
    const secrets = new Map<string, Map<string, string>>()

    const byName = new Map<string, Entry>()
    for (const definition of definitions) {
      if (byName.has(definition.name)) {
        return yield* ConfigurationFailure.invalidRequest(`two run definitions are named "${definition.name}"`)
      }
      const shapes = new Set<string>()
      for (const shape of definition.answers ?? []) {
        if (shapes.has(shape.name)) {
          return yield* ConfigurationFailure.invalidRequest(
            `run definition "${definition.name}" lists the answer shape "${shape.name}" twice`
          )
        }
        shapes.add(shape.name)
      }
      byName.set(definition.name, { definition, workflow: makeWorkflow(definition) })
    }

    const publish = (change: Change) =>
      shared === undefined
        ? PubSub.publish(changes, change)
        : Effect.zipLeft(PubSub.publish(changes, change), shared.publish(change))
    const changed = (runId: string) => publish({ runId, status: true })
    const appended = (runId: string) => publish({ runId, status: false })
    const recordDone = (runId: string, key: string, body: unknown) => {
      const change = { runId, status: false }
      return Effect.flatMap(Clock.currentTimeMillis, (at) => store.record(runId, "DO", key, at, body, shared?.notice(change))).pipe(
        Effect.tap(() => PubSub.publish(changes, change))
      )
    }
    if (shared !== undefined) {
      yield* Effect.forkIn(Stream.runForEach(shared.changes, (change) => PubSub.publish(changes, change)), scope)
    }
    const now = Clock.currentTimeMillis

    const entryOf = (runId: string, row: RunRow | undefined) =>
      row === undefined
        ? Effect.fail(ConfigurationFailure.invalidRequest(`no run has the id "${runId}"`))
        : Option.match(Option.fromNullable(byName.get(row.definition)), {
          onNone: () =>
            Effect.fail(
              ConfigurationFailure.invalidRequest(
                `run ${runId} is of definition "${row.definition}", which this Runs layer does not have (${describeDefinitions(byName)})`,
                { details: { definition: row.definition } }
              )
            ),
          onSome: (entry) => Effect.succeed({ row, ...entry })
        })

    const findRun = (runId: string) => Effect.flatMap(store.getRun(runId), (row) => entryOf(runId, row))

    return { engine, store, owner, scope, changes, timers, cancelled, secrets, byName, shared, changed, appended, recordDone, now, findRun } satisfies Runtime
  })
