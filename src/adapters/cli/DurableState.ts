/**
 * DurableState: the durable runs a command opens, on the store `RunsState`
 * chose: a SQLite state file, or a Postgres database on which this process is
 * one of the runners or a client of them (holding no shard). The commands import this module only when they use it
 * (`RunsState.ts` does, with a dynamic `import()`), and it imports the store's
 * layer (SqliteRuns or PostgresRuns, with their drivers) only when it builds it:
 * `pagantic chat` loads neither, a command on SQLite never loads the Postgres
 * client.
 *
 * The CLI's own run definition is the demo's (`demoRun`: a calculator step and a
 * model step, each journaled); an application embedding the CLI adds its own
 * through `CliRuns`.
 */
import * as net from "node:net"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import { SystemMessage, UserMessage } from "../../domain/Message.js"
import * as Compact from "../../layers/durable/Compact.js"
import * as Calculator from "../../layers/tools/Calculator.js"
import { Durable } from "../../services/Durable.js"
import { Engine, InferenceRequest } from "../../services/Engine.js"
import type { AnyDefinition, Runs } from "../../services/Runs.js"
import * as RunsModule from "../../services/Runs.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../layers/llama/PaganticChatWrapper.js"
import { DEMO_REVIEW, SENTIMENT_SYSTEM } from "./commands/DemoData.js"

const Labelled = Schema.parseJson(Schema.Struct({ sentiment: Schema.String }))

/** The label of a sentiment reply (`{"sentiment": "positive"}`), or the reply itself when it has none. */
const labelOf = (content: string): string =>
  Either.match(Schema.decodeUnknownEither(Labelled)(content), { onLeft: () => content, onRight: (r) => r.sentiment })

/**
 * The demo's durable run: the calculator sums, then the model classifies a
 * review; each step is journaled, so a run re-driven after a crash does not ask
 * the model again for a step it answered.
 */
export const demoRun = RunsModule.define({
  name: "pagantic.demo",
  payload: Schema.Struct({ expression: Schema.String, review: Schema.String }),
  success: Schema.Struct({ sum: Schema.String, sentiment: Schema.String }),
  program: ({ expression, review }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const engine = yield* Engine
      const sum = yield* durable.step(
        "sum",
        Schema.String,
        Effect.map(Calculator.evaluate(expression), Calculator.format).pipe(
          Effect.mapError((error) => ConfigurationFailure.invalidRequest(`expression: ${error.message}`))
        )
      )
      const sentiment = yield* durable.step(
        "classify",
        Schema.String,
        Effect.map(
          engine.infer(
            new InferenceRequest({
              messages: [new SystemMessage({ role: "system", content: SENTIMENT_SYSTEM }), new UserMessage({ role: "user", content: review })],
              schema: BUNDLED_SENTIMENT_SCHEMA,
              temperature: 0
            })
          ),
          (result) => labelOf(result.content)
        )
      )
      return { sum, sentiment }
    })
})

/** The demo run's input. */
export const demoPayload = { expression: "12 + 7", review: DEMO_REVIEW }

// ---------------------------------------------------------------------------
// The store: a SQLite file or a Postgres database
// ---------------------------------------------------------------------------

/** Where durable runs are kept: a SQLite file, or a Postgres database (`shown` is its URL without the password). */
export type Store =
  | { readonly _tag: "Sqlite"; readonly file: string }
  | { readonly _tag: "Postgres"; readonly url: Redacted.Redacted<string>; readonly shown: string }

/** The password of a Postgres URL ("" when it has none). */
export const passwordOf = (url: Redacted.Redacted<string>): string =>
  Either.match(Either.try(() => new URL(Redacted.value(url))), {
    onLeft: () => "",
    onRight: (parsed) => decodeURIComponent(parsed.password)
  })


/**
 * What a CLI process on Postgres is: a runner (where the other runners reach it,
 * default 127.0.0.1:34431), or with `client` a process that holds no shard and
 * executes no run (the database's runners execute what it sends).
 */
export interface Runner {
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly client?: boolean | undefined
}

type Definitions = ReadonlyArray<RunsModule.Definition<any, any, any, any, Engine>>

/**
 * What a server adds to the runs: how long the threads of ended runs are kept
 * (pruned at start, then hourly), and how long closing waits for a run inside a step.
 */
export interface ServerOptions {
  readonly retention?: Duration.Duration | undefined
  readonly drain?: Duration.Duration | undefined
}

/**
 * `PAGANTIC_RETENTION_DAYS` as a server keeps it (unset: ended runs are kept); a
 * malformed value is CONFIG_INVALID_REQUEST naming the variable. Read before the
 * server starts.
 */
export const retention: Effect.Effect<Duration.Duration | undefined, ConfigurationFailure> = Effect.flatMap(
  Effect.promise(() => import("../../layers/durable/Engine.js")),
  (Engine) => Engine.retentionConfig
)

/** `PAGANTIC_DRAIN_SECONDS` as a server keeps it (unset: 15 s); malformed is CONFIG_INVALID_REQUEST. Read before the server starts. */
export const drain: Effect.Effect<Duration.Duration, ConfigurationFailure> = Effect.flatMap(
  Effect.promise(() => import("../../layers/durable/Engine.js")),
  (Engine) => Engine.drainConfig
)

/**
 * Durable runs of `definitions` on `store`. The store's driver is imported here,
 * when the layer is built: a command on a SQLite file never loads the Postgres
 * client, nor the other way round. On Postgres this process is one of the
 * database's runners, at `runner`, or a client of them (`runner.client`).
 */
const runsOn = (
  store: Store,
  definitions: ReadonlyArray<AnyDefinition>,
  runner: Runner | undefined,
  server: ServerOptions = {}
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Engine> =>
  store._tag === "Sqlite"
    ? Layer.unwrapEffect(
      Effect.map(
        Effect.promise(() => import("../../layers/SqliteRuns.js")),
        (SqliteRuns) => SqliteRuns.layer({ filename: store.file, definitions: definitions as Definitions, retention: server.retention, drain: server.drain })
      )
    )
    : Layer.unwrapEffect(
      Effect.map(
        Effect.promise(() => import("../../layers/PostgresRuns.js")),
        (PostgresRuns) =>
          PostgresRuns.layer({
            url: store.url,
            definitions: definitions as Definitions,
            runnerHost: runner?.host,
            runnerPort: runner?.port,
            role: runner?.client === true ? "client" : "runner",
            retention: server.retention,
            drain: server.drain
          })
      )
    ).pipe(Layer.mapError((error) => scrubbed(store, error)))

/**
 * Durable runs on `store` for `definitions`, the engine the ones that infer need
 * taken from the context. The runner's notes about runs of definitions it does
 * not have are not printed: a command that only lists runs has none of them.
 */
export const layerWith = (
  store: Store,
  definitions: ReadonlyArray<AnyDefinition>,
  runner?: Runner | undefined
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Engine> =>
  runsOn(store, definitions, runner).pipe(Layer.provide(Logger.minimumLogLevel(LogLevel.Error)))

/**
 * As `layerWith`, for a server: its logs are not turned down (the level a layer
 * sets reaches the layers built after it, and a server's "Listening on" and
 * every 5xx must be logged), and the ended runs older than `server.retention`
 * are pruned (see `retention`).
 */
export const serverLayer = (
  store: Store,
  definitions: ReadonlyArray<AnyDefinition>,
  runner?: Runner | undefined,
  server: ServerOptions = {}
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Engine> => runsOn(store, definitions, runner, server)

/** As `layerWith`, on `engine`. */
export const layer = (
  store: Store,
  definitions: ReadonlyArray<AnyDefinition>,
  engine: Layer.Layer<Engine>,
  runner?: Runner | undefined
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure> =>
  layerWith(store, definitions, runner).pipe(Layer.provide(engine))

/**
 * Creates the state tables of `store` and says what it did: on a SQLite file its
 * tables (the runs recorded left as they are); on Postgres the cluster's and the
 * runs' tables, under the database's migration lock, without starting a runner.
 */
export const migrate = (store: Store): Effect.Effect<string, OrchestrationFailure | ConfigurationFailure> =>
  store._tag === "Sqlite"
    ? Effect.flatMap(Effect.promise(() => import("../../layers/SqliteRuns.js")), (SqliteRuns) =>
      // no definitions: the tables are created, and the runs recorded are left as they are
      Effect.scoped(Layer.build(SqliteRuns.layer({ filename: store.file, definitions: [] }))).pipe(
        Effect.provide(Logger.minimumLogLevel(LogLevel.Error)),
        Effect.as(`state tables ready in ${store.file}`)
      ))
    : Effect.flatMap(Effect.promise(() => import("../../layers/PostgresRuns.js")), (PostgresRuns) =>
      PostgresRuns.migrate({ url: store.url }).pipe(
        Effect.mapError((error) => scrubbed(store, error)),
        Effect.as(`state tables ready in ${store.shown} (the cluster's and the runs', created under the migration lock where missing)`)
      ))

/** A Postgres failure's message without the URL's password (a driver may quote its connection string). */
const scrubbed = <E extends OrchestrationFailure | ConfigurationFailure>(store: Store, error: E): E => {
  if (store._tag !== "Postgres") return error
  const password = passwordOf(store.url)
  if (password === "" || !error.message.includes(password)) return error
  const message = error.message.split(password).join("***")
  return (error._tag === "OrchestrationFailure"
    ? OrchestrationFailure.stateUnavailable(message, { details: error.details })
    : ConfigurationFailure.invalidRequest(message, { details: error.details })) as E
}

/**
 * Prunes the runs of the SQLite `file` that ended more than `olderThan` ago, beside
 * the server that owns it if one does (SqliteRuns.prune); what it did as lines.
 */
export const pruneFile = (file: string, olderThan: Duration.Duration): Effect.Effect<ReadonlyArray<string>, OrchestrationFailure> =>
  Effect.flatMap(Effect.promise(() => import("../../layers/SqliteRuns.js")), (SqliteRuns) =>
    Effect.map(SqliteRuns.prune({ filename: file, olderThan }), (done) => [
      `pruned ${done.pruned} run(s) that ended more than ${Duration.format(olderThan)} ago`,
      ...(done.compacted === undefined ? [] : [`${file} ${Compact.describe(done.compacted)}`])
    ]))

/** A TCP port free on `host` right now: where a short-lived runner listens. */
export const freePort = (host: string): Effect.Effect<number, OrchestrationFailure> =>
  Effect.async<number, OrchestrationFailure>((resume) => {
    const server = net.createServer()
    server.once("error", (error) =>
      resume(Effect.fail(OrchestrationFailure.stateUnavailable(`cannot find a free port for this runner on ${host}: ${error.message}`))))
    server.listen(0, host, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resume(Effect.succeed(port)))
    })
  })
