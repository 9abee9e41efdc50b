/**
 * Durable runs on a SQLite file: the workflow engine of @effect/cluster (one
 * SingleRunner) with its journal in the file, and the runs' own tables next to
 * it. One process owns a file at a time (`<file>.owner`; a second one fails fast
 * with ORCHESTRATION_STATE_UNAVAILABLE naming the owner; `prune` works beside
 * it, owning nothing); the tables are created
 * before the runner starts; on start, the runs a killed process left going are
 * re-driven from their records. The file is created with mode 0600.
 */
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SingleRunner from "@effect/cluster/SingleRunner"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Config from "effect/Config"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as path from "node:path"
import type { ConfigurationFailure } from "../domain/Failure.js"
import { OrchestrationFailure } from "../domain/Failure.js"
import type { AnyDefinition, Requirements } from "../services/Runs.js"
import { Runs } from "../services/Runs.js"
import * as Compact from "./durable/Compact.js"
import { workflowName } from "./durable/Encoding.js"
import * as Engine from "./durable/Engine.js"
import * as Purge from "./durable/Purge.js"
import * as Owner from "./durable/Owner.js"
import * as Store from "./durable/Store.js"
import * as Tables from "./durable/Tables.js"

/** Where the state lives when nothing says otherwise. */
export const defaultFilename = ".pagantic/state.db"

export interface Options<Defs extends AnyDefinition> {
  /** The SQLite file (created 0600 with its folder); default `.pagantic/state.db`. */
  readonly filename?: string | undefined
  /** The run definitions this process runs (a run of a definition not listed is left as is). */
  readonly definitions: ReadonlyArray<Defs>
  /** How often the runner looks for messages it was not told about (default 1 second). */
  readonly pollInterval?: number | undefined
  /** Threads of runs that ended longer ago than this are pruned at start and hourly; default kept. */
  readonly retention?: Duration.DurationInput | undefined
  /**
   * How long closing the layer waits for a run inside a step before interrupting
   * it (default 15 seconds); an interrupted run is re-driven at the next start.
   */
  readonly drain?: Duration.DurationInput | undefined
  /**
   * How a commit reaches the disk. "full" (default): the write-ahead log is synced
   * at every commit, so a recorded step survives a power loss or an OS crash.
   * "normal": it is synced at checkpoints only, so a step survives a killed
   * process but may be lost with the machine, for a cheaper commit.
   */
  readonly synchronous?: Synchronous | undefined
}

export type Synchronous = "full" | "normal"

const unavailable = (what: string) => (error: { readonly message: string }) =>
  OrchestrationFailure.stateUnavailable(`${what}: ${error.message}`, { cause: error })

/**
 * The SQL client a SqliteRuns layer keeps its runs on: `filename` created 0600 and
 * owned by this process, in WAL mode, each commit synced as `synchronous` says
 * (default "full"), its tables created.
 */
export const clientLayer = (filename: string, synchronous: Synchronous = "full") =>
  Layer.unwrapScoped(
    Effect.gen(function* () {
      yield* Effect.try({
        try: () => {
          fs.mkdirSync(path.dirname(path.resolve(filename)), { recursive: true })
          fs.closeSync(fs.openSync(filename, "a", 0o600))
        },
        catch: (error) => OrchestrationFailure.stateUnavailable(`cannot create the state file ${filename}: ${String(error)}`)
      })
      yield* Owner.acquire(filename)
      const client = SqliteClient.layer({ filename }).pipe(Layer.mapError(unavailable(`cannot open ${filename}`)))
      // the client opens in WAL mode, where the driver's default syncs at checkpoints only
      const durability = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`PRAGMA synchronous = ${sql.literal(synchronous.toUpperCase())}`)
      // a new file gives pruned pages back in steps (see Compact)
      const created = Compact.incrementalOnCreate
      return Layer.effectDiscard(
        Effect.zipRight(Effect.mapError(Effect.zipRight(durability, created), unavailable(`cannot set up ${filename}`)), Tables.migrate)
      ).pipe(Layer.provideMerge(client))
    })
  )

/** `Compact.compact` on `filename`, said in the log; a failure to shrink is a warning (the runs are pruned). */
const shrink = (filename: string) =>
  Compact.compact.pipe(
    Effect.tap((done) =>
      done === undefined ? Effect.void : Effect.logInfo(`${filename} ${Compact.describe(done)}`)
    ),
    Effect.catchAll((error) => Effect.logWarning(`cannot shrink ${filename} after a prune: ${error.message}`)),
    Effect.asVoid
  )

/** Durable runs of `definitions` on a SQLite file. */
export const layer = <Defs extends AnyDefinition>(
  options: Options<Defs>
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Requirements<Defs>> => {
  const filename = options.filename ?? defaultFilename
  const runner = ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(
      SingleRunner.layer({
        runnerStorage: "memory",
        shardingConfig: {
          entityMessagePollInterval: options.pollInterval ?? 1000,
          entityTerminationTimeout: options.drain ?? Engine.defaultDrain
        }
      })
    ),
    Layer.mapError(unavailable("cannot start the workflow runner")),
    Layer.provideMerge(clientLayer(filename, options.synchronous))
  )
  return Layer.scoped(
    Runs,
    Effect.gen(function* () {
      const storage = yield* MessageStorage.MessageStorage
      const sharding = yield* Sharding.Sharding
      const sql = yield* SqlClient.SqlClient
      return yield* Engine.make(options.definitions, {
        owner: `${process.pid}:${globalThis.crypto.randomUUID()}`,
        retention: options.retention,
        purge: Purge.purger(storage, sharding),
        compact: shrink(filename).pipe(Effect.provideService(SqlClient.SqlClient, sql))
      })
    })
  ).pipe(Layer.provide(runner))
}

/** What `prune` did: the runs it removed, and the file's shrinking (undefined when it was left as it was). */
export interface Pruned {
  readonly pruned: number
  readonly compacted: Compact.Compacted | undefined
}

/** How long `prune` waits for the file's write lock: the owner holds it for one short write at a time. */
const busyTimeoutMillis = 10_000

/**
 * Prunes the runs of a SQLite file that ended more than `olderThan` ago without
 * owning the file: beside the process that owns it (a server) or none. No runner
 * starts and nothing is re-driven (the runs going stay with their owner). The
 * rows go in one transaction that waits for the write lock under a busy timeout
 * (the owner's writes wait for it likewise), the runs' messages in the engine's
 * storage next, then the file is shrunk if the prune freed a large share of it
 * (Compact). A missing file has nothing to prune and is not created.
 */
export const prune = (options: {
  readonly filename?: string | undefined
  readonly olderThan: Duration.DurationInput
}): Effect.Effect<Pruned, OrchestrationFailure> => {
  const filename = options.filename ?? defaultFilename
  const program = Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`PRAGMA busy_timeout = ${sql.literal(String(busyTimeoutMillis))}`.pipe(Effect.mapError(unavailable(`cannot open ${filename}`)))
    yield* Tables.migrate
    const store = yield* Store.make
    const before = (yield* Clock.currentTimeMillis) - Duration.toMillis(Duration.decode(options.olderThan))
    const gone = yield* store.prune(before)
    if (gone.length === 0) return { pruned: 0, compacted: undefined }
    yield* Effect.gen(function* () {
      const purge = Purge.sqlPurger(yield* MessageStorage.MessageStorage)
      for (const run of gone) yield* purge(workflowName(run.definition), run.id)
    }).pipe(Effect.provide(SqlMessageStorage.layer.pipe(Layer.provide(ShardingConfig.layer()))))
    const compacted = yield* Compact.compact.pipe(Effect.mapError(unavailable(`cannot shrink ${filename}`)))
    return { pruned: gone.length, compacted }
  })
  return fs.existsSync(filename)
    ? program.pipe(Effect.provide(SqliteClient.layer({ filename }).pipe(Layer.mapError(unavailable(`cannot open ${filename}`)))))
    : Effect.succeed({ pruned: 0, compacted: undefined })
}

/**
 * As `layer`, the file from `PAGANTIC_STATE` (default `.pagantic/state.db`) and the
 * retention of ended runs from `PAGANTIC_RETENTION_DAYS` (default: kept).
 */
export const layerConfig = <Defs extends AnyDefinition>(options: {
  readonly definitions: ReadonlyArray<Defs>
  readonly filename?: Config.Config<string> | undefined
}): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Requirements<Defs>> =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const filename = yield* Effect.orElseSucceed(
        options.filename ?? Config.withDefault(Config.string("PAGANTIC_STATE"), defaultFilename),
        () => defaultFilename
      )
      const retention = yield* Engine.retentionConfig
      const drain = yield* Engine.drainConfig
      return layer({ filename, definitions: options.definitions, retention, drain })
    })
  )
