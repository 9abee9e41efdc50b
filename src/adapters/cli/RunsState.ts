/**
 * RunsState: how a command reaches the durable runs, and the one place that
 * chooses their store. `--state-url URL` (else PAGANTIC_STATE_URL) is a Postgres
 * database shared by several processes; `--state FILE` (else PAGANTIC_STATE, else
 * `.pagantic/state.db`) is a SQLite file. A flag wins over the environment; with
 * both variables set the URL wins; both flags at once are refused. The durable
 * layer (`DurableState.ts`: the workflow engine, the runner, the store's driver)
 * is imported dynamically when a command opens it, so the other commands never
 * load it.
 *
 * One process owns a SQLite file at a time: a command run while a server holds
 * the file fails with ORCHESTRATION_STATE_UNAVAILABLE naming the owner's pid,
 * but `runs prune`, which owns nothing (SqliteRuns.prune). On
 * Postgres a command runs beside a server: the commands that only read or send
 * (list, show, cancel, respond, prune, thread export and import) join as clients,
 * holding no shard, so the runs in flight stay on the runners; those that execute
 * runs here (`runs resume`, `query`, `task`) join as runners on a free port.
 * Opening the store re-drives the runs
 * a killed process left going, for the definitions this CLI has (the demo's, and
 * those an embedding application adds through `CliRuns`); the engine those runs
 * need is loaded only if one of them asks it. A URL's password is never printed.
 */
import * as Options from "@effect/cli/Options"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { ConfigurationFailure, InferenceFailure } from "../../domain/Failure.js"
import * as Text from "../../domain/Text.js"
import * as EngineModule from "../../services/Engine.js"
import { Engine } from "../../services/Engine.js"
import type { AnyDefinition, RunsError, Service as RunsService } from "../../services/Runs.js"
import { Runs } from "../../services/Runs.js"
import * as DemoQuery from "./commands/DemoQuery.js"
import { CliFailure, fail } from "./CliFailure.js"
import type { Store } from "./DurableState.js"
export type { Store } from "./DurableState.js"
import { textFlag } from "./Flags.js"
import { CliEngine, type EngineSettings } from "./Wiring.js"

/** Run definitions an application embedding the CLI adds to the demo's (their requirements provided). */
export class CliRuns extends Context.Tag("pagantic/CliRuns")<CliRuns, {
  readonly definitions: ReadonlyArray<AnyDefinition>
}>() {}

/** The durable module, loaded on first use. */
export type DurableModule = typeof import("./DurableState.js")

/** Loads the durable layer's module (the workflow engine, the runner, SQLite). */
export const loadDurable: Effect.Effect<DurableModule> = Effect.promise(() => import("./DurableState.js"))

/** Loads what a command registers beside the demo's runs (the CLI's queries and requests, and the facade they need). */
const loadCommandRuns: Effect.Effect<typeof import("./CommandRuns.js")> = Effect.promise(() => import("./CommandRuns.js"))

/** The SQLite state file when nothing names one. */
export const defaultStateFile = ".pagantic/state.db"

// ---------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------

/** The store flags as parsed: `--state FILE`, `--state-url URL`. */
export interface StateFlags {
  readonly file: Option.Option<string>
  readonly url: Option.Option<string>
}

const fileFlag = textFlag("state").pipe(Options.withPseudoName("file.db"), Options.optional)
const urlFlag = textFlag("state-url").pipe(Options.withPseudoName("postgres://..."), Options.optional)

/** `--state FILE` and `--state-url URL`, for the commands that open the runs. */
export const stateOption: Options.Options<StateFlags> = Options.all({
  file: fileFlag.pipe(Options.withDescription("the SQLite state file (default: PAGANTIC_STATE, else .pagantic/state.db)")),
  url: urlFlag.pipe(Options.withDescription("the Postgres state database, postgres://user:password@host:port/db (default: PAGANTIC_STATE_URL); wins over a SQLite file"))
})

/** As `stateOption`, for `serve`: without either (and without PAGANTIC_STATE or PAGANTIC_STATE_URL) it keeps no runs. */
export const serveStateOption: Options.Options<StateFlags> = Options.all({
  file: fileFlag.pipe(Options.withDescription("keep durable runs in this SQLite file and serve them under /v1/runs (default: PAGANTIC_STATE; none when unset)")),
  url: urlFlag.pipe(Options.withDescription("keep durable runs in this Postgres database and serve them under /v1/runs (default: PAGANTIC_STATE_URL)"))
})

/** The store as a user reads it: the file, or the URL without its password. */
export const where = (store: Store): string => (store._tag === "Sqlite" ? store.file : store.shown)

/** A URL as it may be quoted: scheme, host and path, its user's password hidden, cut short. */
const masked = (url: URL): string => {
  const shown = `${url.protocol}//${url.username === "" ? "" : `${url.username}${url.password === "" ? "" : ":***"}@`}${url.host}${url.pathname}`
  return shown.length > 60 ? `${shown.slice(0, 60)}…` : shown
}

/**
 * The Postgres store of `text`, given by `source` (the flag or the variable):
 * a `postgres://` or `postgresql://` URL with a host. Anything else is
 * CONFIG_INVALID_REQUEST naming `source`, quoting the URL without its password.
 */
export const parseStateUrl = (text: string, source: string): Either.Either<Store, ConfigurationFailure> => {
  const invalid = (why: string) =>
    Either.left(ConfigurationFailure.invalidRequest(
      `${source}: ${why}; expected postgres://user:password@host:port/database`,
      { details: { field: source } }
    ))
  return Either.match(Either.try(() => new URL(text.trim())), {
    // the text is not quoted: where its password is cannot be told
    onLeft: () => invalid(`not a URL (${text.length} characters, not shown)`),
    onRight: (url) =>
      // nothing but the scheme is quoted: without a host the password's place is not known
      !/^postgres(ql)?:$/i.test(url.protocol)
        ? invalid(`not a Postgres URL (its scheme is ${JSON.stringify(url.protocol.slice(0, 20))})`)
        : url.hostname === ""
        ? invalid("the URL names no host")
        : Either.right({ _tag: "Postgres" as const, url: Redacted.make(text.trim()), shown: masked(url) })
  })
}

const variable = (name: string): Effect.Effect<Option.Option<string>> =>
  Effect.orElseSucceed(Config.option(Config.string(name)), () => Option.none<string>()).pipe(
    Effect.map(Option.filter((value) => value.trim().length > 0))
  )

const postgres = (text: string, source: string): Effect.Effect<Store, CliFailure> =>
  Either.match(parseStateUrl(text, source), {
    onLeft: (error) => Effect.fail(runsFailure(error)),
    onRight: Effect.succeed
  })

/**
 * The store the flags and the environment name, if any: a flag wins over the
 * environment, PAGANTIC_STATE_URL over PAGANTIC_STATE; both flags are refused.
 */
export const chosenStore = (flags: StateFlags): Effect.Effect<Option.Option<Store>, CliFailure> =>
  Effect.gen(function* () {
    if (Option.isSome(flags.file) && Option.isSome(flags.url)) {
      return yield* fail("give --state FILE (SQLite) or --state-url URL (Postgres), not both")
    }
    if (Option.isSome(flags.url)) return Option.some(yield* postgres(flags.url.value, "--state-url"))
    if (Option.isSome(flags.file)) return Option.some<Store>({ _tag: "Sqlite", file: flags.file.value })
    const url = yield* variable("PAGANTIC_STATE_URL")
    if (Option.isSome(url)) return Option.some(yield* postgres(url.value, "PAGANTIC_STATE_URL"))
    return Option.map(yield* variable("PAGANTIC_STATE"), (file): Store => ({ _tag: "Sqlite", file }))
  })

/** The store a command opens: the one named, else the default SQLite file. */
export const storeOf = (flags: StateFlags | Option.Option<string>): Effect.Effect<Store, CliFailure> =>
  Effect.map(
    chosenStore(Option.isOption(flags) ? { file: flags, url: Option.none() } : flags),
    Option.getOrElse((): Store => ({ _tag: "Sqlite", file: defaultStateFile }))
  )

/** The definitions the CLI runs: the demo's (its run and its queries) and the application's (`CliRuns`). */
export const definitionsOf = (durable: DurableModule): Effect.Effect<ReadonlyArray<AnyDefinition>> =>
  Effect.map(Effect.serviceOption(CliRuns), (extra) => [
    durable.demoRun,
    DemoQuery.definition(),
    ...Option.match(extra, { onNone: () => [], onSome: (e) => e.definitions })
  ])

/** How a command joins a Postgres database: as a runner executing runs, or as a client that executes none. */
export type Role = "runner" | "client"

/**
 * What a command is on Postgres: a runner listening on PAGANTIC_RUNNER_HOST
 * (default 127.0.0.1), on a port free now (a command runs beside a server, whose
 * port is PAGANTIC_RUNNER_PORT), or with role `client` a process holding no
 * shard. None on SQLite.
 */
export const commandRunner = (durable: DurableModule, store: Store, role: Role = "runner") =>
  store._tag === "Sqlite"
    ? Effect.succeed(undefined)
    : role === "client"
    ? Effect.succeed({ client: true })
    : Effect.gen(function* () {
      const host = Option.getOrElse(yield* variable("PAGANTIC_RUNNER_HOST"), () => "127.0.0.1")
      const port = yield* Effect.mapError(durable.freePort(host), runsFailure)
      return { host, port }
    })

/** A failure of the Runs API as one line for the user. */
export const runsFailure = (error: RunsError): CliFailure =>
  new CliFailure({
    message: `${error.code}: ${Text.excerpt(error.message, 600)}${
      // a run of a definition the CLI does not register: say where one comes from
      typeof error.details["definition"] === "string"
        ? "; the CLI registers its own commands' runs and the demo's, and an application embedding it adds its definitions through Cli.CliRuns (pagantic/cli)"
        : ""
    }`
  })

/**
 * The engine for `settings`, loaded the first time a run asks it (a command that
 * only lists runs never loads the model). Its failure to load is the step's
 * INFERENCE_MODEL_UNAVAILABLE.
 */
const lazyEngine = (layer: Layer.Layer<Engine, InferenceFailure | ConfigError.ConfigError>): Layer.Layer<Engine> =>
  Layer.scoped(
    Engine,
    Effect.gen(function* () {
      const scope = yield* Effect.scope
      const engine = yield* Effect.cached(
        Layer.buildWithScope(layer, scope).pipe(
          Effect.map(Context.get(Engine)),
          Effect.mapError((error) =>
            error._tag === "InferenceFailure" ? error : InferenceFailure.modelUnavailable(`invalid configuration: ${String(error)}`)
          )
        )
      )
      return Engine.of({
        infer: (request) => Effect.flatMap(engine, (e) => e.infer(request)),
        stream: (request) => EngineModule.unwrapParts(Effect.map(engine, (e) => e.stream(request))),
        modelInfo: Effect.orDie(Effect.flatMap(engine, (e) => e.modelInfo))
      })
    })
  )

/** How long a command's runner (not a client) stays on Postgres at least (see `openRuns`). */
const minimumRunnerMillis = 1_500

/** What a command gets: the runs, the store they are on (and where, as a user reads it) and the durable module. */
export interface Opened {
  readonly runs: RunsService
  readonly file: string
  readonly store: Store
  readonly durable: DurableModule
}

/**
 * Opens the runs on the chosen store for the scope: the demo's definition, the
 * application's (`CliRuns`) and the CLI's queries and requests (CommandRuns), the
 * engine of `settings` loaded only when a run needs it, or `engine` when given
 * (already loaded). A SQLite file another
 * process holds, or a database that cannot be reached, is a CliFailure naming it.
 * `flags` may be a `--state` value alone (the SQLite file, or the environment's choice).
 * On Postgres the process joins as `role` (default a runner).
 */
export const openRuns = (
  flags: StateFlags | Option.Option<string>,
  settings: EngineSettings,
  engine?: Layer.Layer<Engine> | undefined,
  role: Role = "runner"
) =>
  Effect.gen(function* () {
    const store = yield* storeOf(flags)
    const durable = yield* loadDurable
    const CommandRuns = yield* loadCommandRuns
    const runner = yield* commandRunner(durable, store, role)
    // one engine for every run of the command, loaded when one asks it
    const engineLayer = Layer.succeedContext(yield* Layer.build(engine ?? lazyEngine((yield* CliEngine).make(settings))))
    const commandRuns = yield* CommandRuns.make(yield* definitionsOf(durable), yield* Effect.provide(Engine, engineLayer))
    const context = yield* Layer.build(
      durable.layer(store, commandRuns.definitions, Layer.merge(engineLayer, CommandRuns.responders), runner)
    ).pipe(Effect.mapError(runsFailure))
    yield* CommandRuns.bindRequests(commandRuns, engineLayer, context)
    if (store._tag === "Postgres" && role === "runner") {
      // a runner that leaves within a second of joining could leave a database connection
      // open, and the command's process would not exit. The connection seen left open (the
      // LISTEN one, on a client) is now opened before the layer is handed out (PostgresRuns),
      // and clients leave at once; runners keep the margin until measured without it
      const joined = yield* Clock.currentTimeMillis
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sleep(Math.max(0, joined + minimumRunnerMillis - now)))
      )
    }
    return { runs: Context.get(context, Runs), file: where(store), store, durable } satisfies Opened
  })

/**
 * Runs `program` on the runs of the chosen store, closed after it. On Postgres the
 * process joins as a client unless `role` says `runner` (a command that drives
 * runs here).
 */
export const withRuns = <A, E, R>(
  flags: StateFlags | Option.Option<string>,
  settings: EngineSettings,
  program: (opened: Opened) => Effect.Effect<A, E, R>,
  role: Role = "client"
) => Effect.scoped(Effect.flatMap(openRuns(flags, settings, undefined, role), program))
