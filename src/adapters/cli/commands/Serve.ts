/**
 * `pagantic serve`: the HTTP API (/v1/run, /v1/chat/completions, /health) on the
 * chosen engine. `--port` and `--host` win over the environment's configuration.
 * With a store (`--state FILE` or `--state-url URL`, else PAGANTIC_STATE or
 * PAGANTIC_STATE_URL: see RunsState) its queries are durable runs of that store,
 * served under /v1/runs; on Postgres the server is a runner of the database at
 * PAGANTIC_RUNNER_HOST:PAGANTIC_RUNNER_PORT (default 127.0.0.1:34431). The
 * durable layer is imported only then, so a server without state starts without it.
 *
 * `--app FILE` hosts an application (App): its tools beside the calculator, its
 * query responders (humans told in their inbox) beside the served engine, and,
 * with a store, its durable definitions, startable by name at `POST /v1/runs`.
 */
import * as Command from "@effect/cli/Command"
import * as HttpServer from "@effect/platform/HttpServer"
import * as Options from "@effect/cli/Options"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { ConfigurationFailure } from "../../../domain/Failure.js"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as App from "../../App.js"
import * as Http from "../../Http.js"
import * as NotificationChannels from "../../../layers/NotificationChannels.js"
import * as Notification from "../../../programs/query/Notification.js"
import { Notifications } from "../../../services/Notifications.js"
import * as RequestRun from "../../../programs/facade/RequestRun.js"
import * as Orchestration from "../../../programs/Orchestration.js"
import type { PaganticSystem } from "../../../programs/Facade.js"
import type { Engine } from "../../../services/Engine.js"
import type { AnyDefinition } from "../../../services/Runs.js"
import * as Live from "../../Live.js"
import { CliFailure, fromLayerFailure } from "../CliFailure.js"
import { globalOptions, integerIn, textFlag } from "../Flags.js"
import { chosenStore, definitionsOf, loadDurable, runsFailure, serveStateOption } from "../RunsState.js"
import * as ServeAuth from "../ServeAuth.js"
import { CliEngine, settingsOf } from "../Wiring.js"

/** The flags `serve` takes, as parsed. */
export interface ServeFlags {
  readonly port: Option.Option<number>
  readonly host: Option.Option<string>
  readonly noAuth?: boolean
  readonly keys?: Option.Option<string>
}

/** The flags given, as overrides of the server's configuration (the flags not given are undefined). */
const serveOverrides = (flags: ServeFlags): Http.Options => ({
  port: Option.getOrUndefined(flags.port),
  host: Option.getOrUndefined(flags.host)
})

/** Logs the page's URL with the server's own key, once it listens. */
const announce = (key: string, file: string) =>
  Layer.effectDiscard(HttpServer.addressFormattedWith((address) =>
    Effect.logInfo(`Runs page: ${ServeAuth.pageUrl(address, key)} (the admin key, kept in ${file})`)
  ))

/**
 * Serves `system` with the options of `flags` and the environment, and the
 * key `ServeAuth` finds or makes for them.
 */
const served = <E>(
  system: Layer.Layer<PaganticSystem | Engine, E>,
  flags: ServeFlags,
  store: ServeAuth.StoreLocation,
  definitions: ReadonlyArray<AnyDefinition> = []
) =>
  Effect.gen(function* () {
    const configured = yield* serveOptions(flags)
    const auth = yield* ServeAuth.resolve(configured, { noAuth: flags.noAuth ?? false, keys: flags.keys ?? Option.none() }, store)
    // the application's definitions may be started by name at POST /v1/runs
    const server = Http.layerConfig({ ...auth.options, definitions }).pipe(Layer.provide(system))
    return yield* Layer.launch(auth.announce === undefined ? server : announce(auth.announce.key, auth.announce.file).pipe(Layer.provideMerge(server)))
  })

/**
 * The options `serve` listens with: each flag given wins, the others come from the
 * environment (PAGANTIC_PORT, PAGANTIC_HOST, PAGANTIC_API_KEY, ...) or the
 * defaults, as `Http.optionsConfig` reads them.
 */
export const serveOptions = (flags: ServeFlags): Config.Config<Http.Options> => Http.optionsConfig(serveOverrides(flags))

/**
 * Where a server's runner listens on Postgres: PAGANTIC_RUNNER_HOST (default
 * 127.0.0.1) and PAGANTIC_RUNNER_PORT (default 34431); a malformed value is
 * CONFIG_INVALID_REQUEST naming the variable.
 */
const serveRunner = Effect.gen(function* () {
  const host = yield* Config.option(Config.string("PAGANTIC_RUNNER_HOST")).pipe(
    Effect.mapError((error) => runsFailure(ConfigurationFailure.invalidRequest(`PAGANTIC_RUNNER_HOST: ${String(error)}`, { details: { field: "PAGANTIC_RUNNER_HOST" } })))
  )
  const port = yield* Config.option(Config.port("PAGANTIC_RUNNER_PORT")).pipe(
    Effect.mapError((error) => runsFailure(ConfigurationFailure.invalidRequest(`PAGANTIC_RUNNER_PORT: ${String(error)}`, { details: { field: "PAGANTIC_RUNNER_PORT" } })))
  )
  return { host: Option.getOrUndefined(host), port: Option.getOrUndefined(port) }
})

export const serve = Command.make(
  "serve",
  {
    ...globalOptions,
    port: integerIn("port", 0, 65535).pipe(
      Options.withDescription("TCP port, 0 for any free one (default: PAGANTIC_PORT, else 8080)"),
      Options.optional
    ),
    host: textFlag("host").pipe(
      Options.withDescription("interface to listen on (default: PAGANTIC_HOST, else 127.0.0.1)"),
      Options.optional
    ),
    state: serveStateOption,
    noAuth: Options.boolean("no-auth").pipe(
      Options.withDescription("serve without a key (loopback only); by default the server makes an admin key at its first start and keeps it")
    ),
    keys: textFlag("keys").pipe(
      Options.withDescription("a keys file of principals (default: PAGANTIC_KEYS_FILE, else $PAGANTIC_HOME/keys.json when it exists)"),
      Options.optional
    ),
    app: textFlag("app").pipe(
      Options.withDescription("an application module (JavaScript) whose default export, made with App.make, adds tools, query responders and durable definitions"),
      Options.optional
    )
  },
  (args) =>
    Effect.gen(function* () {
      const engines = yield* CliEngine
      const settings = yield* settingsOf(args)
      // the engine as it is (not the recording one): a server runs for long
      const engine = engines.make(settings)
      // the application's tools, responders and definitions, beside the bundled ones
      const app = Option.isSome(args.app) ? yield* App.load(args.app.value) : App.none
      const tools = App.toolsOf(app)
      const responders = App.responders(app)
      const store = yield* chosenStore(args.state)
      // on the bundled model, mode task runs with what it was taught, as `pagantic task` does
      if (Option.isNone(store)) return yield* served(Live.layer({ engine, tools, responders, bundledTasks: true }), args, undefined)
      // with state, queries are durable runs too (their responders: the served engine and the app's),
      // and so is a /v1/run request asked with Prefer: respond-async
      const requests = yield* RequestRun.make
      const durable = yield* loadDurable
      const runner = store.value._tag === "Postgres" ? yield* serveRunner : undefined
      // PAGANTIC_RETENTION_DAYS: the ended runs older than it are pruned at start, then hourly
      const retention = yield* durable.retention
      // PAGANTIC_DRAIN_SECONDS: how long stopping waits for a run inside a step before interrupting it
      const drain = yield* durable.drain
      const own = yield* definitionsOf(durable)
      // a human asked by a query is told in its inbox (or its webhook, push channel, digest), where the page listens
      const system = Layer.unwrapEffect(Effect.map(Notifications, (notifications) => {
        const queries = Orchestration.definition({ aliases: App.engineAliases, notify: Notification.notifyThrough(notifications) })
        const definitions = [...own, queries, requests.definition, ...(app.definitions ?? [])]
        const runs = durable.serverLayer(store.value, definitions, runner, { retention, drain })
        return requests.layer.pipe(
          Layer.provideMerge(Live.layer({ engine, tools, responders, runs, bundledTasks: true, facade: { queries: { definition: queries } } }))
        )
      })).pipe(Layer.provideMerge(NotificationChannels.layer().pipe(Layer.provide(NodeHttpClient.layerUndici))))
      const location: ServeAuth.StoreLocation = store.value._tag === "Sqlite" ? { _tag: "Sqlite", file: store.value.file } : { _tag: "Postgres" }
      return yield* served(system, args, location, app.definitions)
    }).pipe(
      Effect.mapError((e) =>
        e._tag === "ServeError"
          ? new CliFailure({ message: `cannot listen: ${String(e.cause)}` })
          : e._tag === "CliFailure"
          ? e
          : e._tag === "OrchestrationFailure" || e._tag === "ConfigurationFailure"
          ? runsFailure(e)
          : fromLayerFailure(e)
      )
    )
).pipe(Command.withDescription("serve the HTTP API (/v1/run, /v1/chat/completions, /health) on the model, and the runs page at /, on 127.0.0.1"))
