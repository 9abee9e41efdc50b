/**
 * Durable runs on Postgres, shared by several runner processes: the workflow
 * engine of @effect/cluster (`ClusterWorkflowEngine`) on sharded runners that
 * keep their messages and shard locks in the database and talk to each other
 * over TCP, with the runs' own tables in the same database.
 *
 * Each run is an entity of one shard; one runner at a time holds a shard (a
 * Postgres advisory lock, its heartbeat refreshed every `shardLockExpiration / 3`).
 * When a runner dies, the others drop it once its heartbeat is older than
 * `shardLockExpiration` (default 10 s; a runner answering no pings is dropped
 * earlier by the health check), take its shards and re-drive its runs from their
 * journal: completed steps are not run again. Any runner can start, await, answer
 * or cancel any run; waiters follow runs going elsewhere through LISTEN/NOTIFY.
 *
 * A process may also join as a client (`role: "client"`): it registers as no
 * runner and holds no shard, so the runs in flight never move to it; it reads the
 * runs' tables and sends to the runs' entities (start, resume, answer a slot,
 * cancel), which the runner holding their shard executes. Short commands join so.
 *
 * The tables (the cluster's and the runs') are created by `migrate`, under an
 * advisory lock, before the runner starts: several processes starting at once on
 * an empty database all come up.
 */
import * as ClusterWorkflowEngine from "@effect/cluster/ClusterWorkflowEngine"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as RunnerHealth from "@effect/cluster/RunnerHealth"
import * as Runners from "@effect/cluster/Runners"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SocketRunner from "@effect/cluster/SocketRunner"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import type * as SocketServer from "@effect/platform/SocketServer"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { ConfigurationFailure } from "../domain/Failure.js"
import { OrchestrationFailure } from "../domain/Failure.js"
import type { AnyDefinition, Requirements } from "../services/Runs.js"
import { Runs } from "../services/Runs.js"
import * as Engine from "./durable/Engine.js"
import * as Purge from "./durable/Purge.js"
import * as PgShared from "./durable/PgShared.js"
import * as Tables from "./durable/Tables.js"

/** The runner's port when nothing says otherwise (the cluster's default). */
export const defaultRunnerPort = 34431

/** How long a silent runner keeps its shards (its runs) before the others take them. */
export const defaultShardLockExpiration: Duration.Duration = Duration.seconds(10)

export interface Options<Defs extends AnyDefinition> {
  /** The database, `postgres://user:password@host:port/database`. */
  readonly url: Redacted.Redacted<string> | string
  /** The run definitions this process runs (every runner on the database should list the same). */
  readonly definitions: ReadonlyArray<Defs>
  /** The host the other runners reach this one at (default 127.0.0.1: one machine). */
  readonly runnerHost?: string | undefined
  /** The port the other runners reach this one at (default 34431). */
  readonly runnerPort?: number | undefined
  /** Where this runner listens, when not at its advertised address (behind NAT, in a container). */
  readonly listenHost?: string | undefined
  readonly listenPort?: number | undefined
  /**
   * How long a runner that stopped refreshing its shard locks keeps them (default
   * 10 s): the failover time of a killed runner's runs is about this plus a second
   * or two. Its heartbeat is refreshed every third of it, so a runner stalled for
   * less than two thirds of it keeps its runs (no flapping).
   */
  readonly shardLockExpiration?: Duration.DurationInput | undefined
  /** Threads of runs that ended longer ago than this are pruned at start and hourly; default kept. */
  readonly retention?: Duration.DurationInput | undefined
  /** How often a runner looks for messages it was not told about (default 1 second). */
  readonly pollInterval?: Duration.DurationInput | undefined
  /**
   * How long closing the layer waits for a run inside a step before interrupting
   * it (default 15 seconds); another runner, or this one at its next start, takes
   * the run over from its records.
   */
  readonly drain?: Duration.DurationInput | undefined
  /** The most connections this process opens to the database (default 10). */
  readonly maxConnections?: number | undefined
  /**
   * `runner` (default): this process holds shards and executes runs. `client`: it
   * holds none, listens on no port and executes no run; what it starts, resumes,
   * answers or cancels is executed by the runners (a run started while none is up
   * waits for one). The runner's address, retention and rescan options do not apply.
   */
  readonly role?: "runner" | "client" | undefined
}

const unavailable = (what: string) => (error: { readonly message: string }) =>
  OrchestrationFailure.stateUnavailable(`${what}: ${error.message}`, { cause: error })

const redacted = (url: Redacted.Redacted<string> | string) => (typeof url === "string" ? Redacted.make(url) : url)

/** Whether `url` names a Postgres database (`postgres://` or `postgresql://`). */
export const isPostgresUrl = (url: string): boolean => /^postgres(ql)?:\/\//i.test(url.trim())

/**
 * The Postgres driver, loaded when a layer is built: `pagantic/durable` imports
 * without the optional peer @effect/sql-pg (SqliteRuns needs none of it).
 */
const driver: Effect.Effect<typeof PgClient, OrchestrationFailure> = Effect.tryPromise({
  try: () => import("@effect/sql-pg/PgClient"),
  catch: (error) =>
    OrchestrationFailure.stateUnavailable(
      `PostgresRuns needs the optional peer @effect/sql-pg (npm install @effect/sql-pg@0.53): ${error instanceof Error ? error.message : String(error)}`
    )
})

const client = (url: Redacted.Redacted<string> | string, maxConnections: number | undefined) => {
  const value = Redacted.value(redacted(url))
  return isPostgresUrl(value)
    ? Layer.unwrapEffect(Effect.map(driver, (Pg) =>
      Pg.layer({
        url: redacted(url),
        applicationName: "pagantic",
        connectTimeout: Duration.seconds(10),
        ...(maxConnections === undefined ? {} : { maxConnections })
      }).pipe(Layer.mapError(unavailable("cannot connect to the Postgres state database")))))
    : Layer.fail(
      OrchestrationFailure.stateUnavailable(
        // only the scheme is quoted: the rest may hold the password
        `the state URL is no Postgres URL (postgres://user:password@host:port/database), its scheme is "${(/^[a-z][a-z0-9+.-]{0,19}:/i.exec(value.trim())?.[0]) ?? "none"}"`
      )
    )
}

const shardingConfig = (options: Omit<Options<AnyDefinition>, "definitions" | "url">) => {
  const expiration = Duration.decode(options.shardLockExpiration ?? defaultShardLockExpiration)
  const host = options.runnerHost ?? "127.0.0.1"
  const port = options.runnerPort ?? defaultRunnerPort
  return {
    runnerAddress: Option.some(RunnerAddress.make(host, port)),
    runnerListenAddress: options.listenHost === undefined && options.listenPort === undefined
      ? Option.none()
      : Option.some(RunnerAddress.make(options.listenHost ?? host, options.listenPort ?? port)),
    shardLockExpiration: expiration,
    shardLockRefreshInterval: Duration.unsafeDivide(expiration, 3),
    refreshAssignmentsInterval: Duration.seconds(1),
    runnerHealthCheckInterval: Duration.seconds(5),
    entityMessagePollInterval: Duration.decode(options.pollInterval ?? Duration.seconds(1)),
    entityTerminationTimeout: Duration.decode(options.drain ?? Engine.defaultDrain),
    sendRetryInterval: Duration.millis(100)
  } satisfies Partial<ShardingConfig.ShardingConfig["Type"]>
}

// ---------------------------------------------------------------------------
// Migration
// ---------------------------------------------------------------------------

/** The advisory lock the migrations run under (a fixed key: "paga" in ASCII). */
export const migrationLockKey = 0x70616761

/** Waits for the migration lock: tried every 100 ms, for at most a minute. */
const lockRetry = Schedule.spaced("100 millis").pipe(Schedule.upTo("60 seconds"))

/**
 * Holds the migration lock for the scope: `pg_try_advisory_lock` on a reserved
 * connection, polled (a blocking `pg_advisory_lock` could not be bounded), released
 * at the end.
 */
const migrationLock = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const connection = yield* Effect.mapError(sql.reserve, unavailable("cannot reserve a connection to the state database"))
  const tryLock = connection.executeRaw(`SELECT pg_try_advisory_lock(${migrationLockKey}) AS locked`, []).pipe(
    Effect.flatMap((result) => {
      const rows = (result as { readonly rows?: ReadonlyArray<{ readonly locked?: unknown }> }).rows ??
        (result as ReadonlyArray<{ readonly locked?: unknown }>)
      return rows[0]?.locked === true ? Effect.void : Effect.fail("busy" as const)
    })
  )
  yield* Effect.acquireRelease(
    tryLock.pipe(
      Effect.retry({ schedule: lockRetry, while: (error) => error === "busy" }),
      Effect.mapError((error) =>
        error === "busy"
          ? OrchestrationFailure.stateUnavailable("another process held the migration lock of the state database for over a minute")
          : unavailable("cannot take the migration lock of the state database")(error)
      )
    ),
    () => Effect.ignore(connection.executeRaw(`SELECT pg_advisory_unlock(${migrationLockKey})`, []))
  )
})

/**
 * Creates the cluster's tables (messages, replies, runners, locks) and the runs'
 * (if missing), under the migration lock, with the database's SqlClient in context.
 */
export const migrateWith: Effect.Effect<void, OrchestrationFailure, SqlClient.SqlClient> = Effect.scoped(
  Effect.gen(function* () {
    yield* migrationLock
    yield* Layer.build(
      Layer.merge(SqlMessageStorage.layer, SqlRunnerStorage.layer).pipe(
        Layer.provide(ShardingConfig.layer(shardingConfig({})))
      )
    ).pipe(Effect.mapError(unavailable("cannot create the cluster's tables")))
    yield* Tables.migrate
  })
)

/** Creates every table durable runs on Postgres need, under a lock (what `pagantic migrate` runs). */
export const migrate = (options: {
  readonly url: Redacted.Redacted<string> | string
}): Effect.Effect<void, OrchestrationFailure> =>
  Effect.provide(migrateWith, client(options.url, 4))

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/**
 * Opens the database's LISTEN connection and waits (at most about 10 s) until it
 * listens, holding it for the scope: the runs' own listener then shares a
 * connection already open. The client's LISTEN connection is opened in a promise
 * its scope cannot interrupt: a process leaving while it connects kept it open
 * and never exited (seen with commands that end within a second of starting).
 */
const listening = (pg: PgClient.PgClient) =>
  Effect.gen(function* () {
    const channel = `pagantic_ready_${process.pid}`
    const ready = yield* Deferred.make<void>()
    yield* pg.listen(channel).pipe(
      Stream.runForEach(() => Deferred.succeed(ready, undefined)),
      Effect.ignore,
      Effect.forkScoped
    )
    yield* pg`SELECT pg_notify(${channel}, 'ready')`.pipe(
      Effect.zipRight(Deferred.await(ready).pipe(Effect.timeoutFail({ duration: "200 millis", onTimeout: () => "not yet" as const }))),
      Effect.retry(Schedule.recurs(50)),
      Effect.catchAll(() => Effect.logWarning("the state database's LISTEN connection did not come up in 10 s"))
    )
  })

/** Durable runs of `definitions` on the Postgres database at `url`, this process one of its runners (or a client, see `role`). */
export const layer = <Defs extends AnyDefinition>(
  options: Options<Defs>
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Requirements<Defs>> => {
  const isClient = options.role === "client"
  const config = shardingConfig(options)
  const host = Option.getOrThrow(config.runnerAddress)
  const database = Layer.effectDiscard(migrateWith).pipe(
    Layer.provideMerge(client(options.url, options.maxConnections))
  )
  const health = RunnerHealth.layerPing.pipe(
    Layer.provide(Runners.layerRpc),
    Layer.provide(NodeClusterSocket.layerClientProtocol)
  )
  const storage = Layer.merge(SqlMessageStorage.layer, SqlRunnerStorage.layer)
  const sharding: Layer.Layer<
    Sharding.Sharding | Runners.Runners | MessageStorage.MessageStorage | RunnerStorage.RunnerStorage,
    SqlError | SocketServer.SocketServerError,
    SqlClient.SqlClient
  > = isClient
    ? SocketRunner.layerClientOnly.pipe(
      Layer.provide(NodeClusterSocket.layerClientProtocol),
      Layer.provideMerge(storage),
      // no address: the cluster registers no runner and assigns this process no shard
      Layer.provide(ShardingConfig.layer({ ...config, runnerAddress: Option.none(), runnerListenAddress: Option.none() })),
      Layer.provide(RpcSerialization.layerMsgPack)
    )
    : SocketRunner.layer.pipe(
      Layer.provide(health),
      Layer.provide([NodeClusterSocket.layerSocketServer, NodeClusterSocket.layerClientProtocol]),
      Layer.provideMerge(storage),
      Layer.provide(ShardingConfig.layer(config)),
      Layer.provide(RpcSerialization.layerMsgPack)
    )
  const runner = ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(sharding),
    Layer.mapError(
      unavailable(isClient ? "cannot join the state database as a client" : `cannot start the workflow runner at ${host.host}:${host.port}`)
    ),
    Layer.provideMerge(database)
  )
  return Layer.scoped(
    Runs,
    Effect.gen(function* () {
      const storage = yield* MessageStorage.MessageStorage
      const sharding = yield* Sharding.Sharding
      const pg = yield* (yield* driver).PgClient
      const runners = yield* RunnerStorage.RunnerStorage
      yield* listening(pg)
      return yield* Engine.make(options.definitions, {
        // a client executes no run: a run it records (an import) reads stale until a runner takes it
        owner: isClient ? `client/${process.pid}` : PgShared.ownerOf(host.host, host.port),
        shared: PgShared.make(pg, runners),
        // the runners look for slots left by dead processes and prune; a client only once, at its start
        retention: isClient ? undefined : options.retention,
        rescan: isClient ? undefined : Duration.unsafeDivide(config.shardLockExpiration, 2),
        purge: Purge.purger(storage, sharding)
      })
    })
  ).pipe(Layer.provide(runner))
}

/**
 * As `layer`, from the environment: the database from `PAGANTIC_STATE_URL`
 * (required here; when it is unset the state is a SQLite file, see SqliteRuns),
 * the runner's address from `PAGANTIC_RUNNER_HOST` (default 127.0.0.1) and
 * `PAGANTIC_RUNNER_PORT` (default 34431), the retention of ended runs from
 * `PAGANTIC_RETENTION_DAYS` (default: kept).
 */
export const layerConfig = <Defs extends AnyDefinition>(options: {
  readonly definitions: ReadonlyArray<Defs>
  readonly url?: Config.Config<Redacted.Redacted<string>> | undefined
  readonly runnerHost?: Config.Config<string> | undefined
  readonly runnerPort?: Config.Config<number> | undefined
  readonly shardLockExpiration?: Config.Config<Duration.Duration> | undefined
}): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Requirements<Defs>> =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const url = yield* (options.url ?? Config.redacted("PAGANTIC_STATE_URL")).pipe(
        Effect.mapError((error) => OrchestrationFailure.stateUnavailable(`PAGANTIC_STATE_URL: ${String(error)}`))
      )
      const runnerHost = yield* (options.runnerHost ?? Config.withDefault(Config.string("PAGANTIC_RUNNER_HOST"), "127.0.0.1")).pipe(
        Effect.mapError((error) => OrchestrationFailure.stateUnavailable(`PAGANTIC_RUNNER_HOST: ${String(error)}`))
      )
      const runnerPort = yield* (options.runnerPort ?? Config.withDefault(Config.port("PAGANTIC_RUNNER_PORT"), defaultRunnerPort)).pipe(
        Effect.mapError((error) => OrchestrationFailure.stateUnavailable(`PAGANTIC_RUNNER_PORT: ${String(error)}`))
      )
      const shardLockExpiration = options.shardLockExpiration === undefined
        ? undefined
        : yield* options.shardLockExpiration.pipe(
          Effect.mapError((error) => OrchestrationFailure.stateUnavailable(`shard lock expiration: ${String(error)}`))
        )
      const retention = yield* Engine.retentionConfig
      const drain = yield* Engine.drainConfig
      return layer({ url, definitions: options.definitions, runnerHost, runnerPort, shardLockExpiration, retention, drain })
    })
  )
