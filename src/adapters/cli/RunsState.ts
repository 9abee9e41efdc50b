/**
 * RunsState: how a command reaches the durable runs. The state file is `--state`,
 * else PAGANTIC_STATE, else `.pagantic/state.db`; the durable layer
 * (`DurableState.ts`: the workflow engine, the runner, SQLite) is imported
 * dynamically when a command opens it, so the other commands never load it.
 *
 * One process owns a state file at a time: a command run while a server holds the
 * file fails with ORCHESTRATION_STATE_UNAVAILABLE naming the owner's pid. Opening
 * the file re-drives the runs a killed process left going, for the definitions
 * this CLI has (the demo's, and those an embedding application adds through
 * `CliRuns`); the engine those runs need is loaded only if one of them asks it.
 */
import * as Options from "@effect/cli/Options"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../../domain/Failure.js"
import * as Text from "../../domain/Text.js"
import { Engine } from "../../services/Engine.js"
import type { AnyDefinition, RunsError, Service as RunsService } from "../../services/Runs.js"
import { Runs } from "../../services/Runs.js"
import { CliFailure } from "./CliFailure.js"
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

export const stateOption = textFlag("state").pipe(
  Options.withPseudoName("file.db"),
  Options.withDescription("the SQLite state file (default: PAGANTIC_STATE, else .pagantic/state.db)"),
  Options.optional
)

/** The state file: the flag, else PAGANTIC_STATE, else `.pagantic/state.db`. */
export const stateFile = (flag: Option.Option<string>, fallback: string): Effect.Effect<string> =>
  Option.match(flag, {
    onSome: Effect.succeed,
    onNone: () =>
      Effect.orElseSucceed(Config.withDefault(Config.string("PAGANTIC_STATE"), fallback), () => fallback)
  })

/** The definitions the CLI runs: the demo's and the application's (`CliRuns`). */
export const definitionsOf = (durable: DurableModule): Effect.Effect<ReadonlyArray<AnyDefinition>> =>
  Effect.map(Effect.serviceOption(CliRuns), (extra) => [
    durable.demoRun,
    ...Option.match(extra, { onNone: () => [], onSome: (e) => e.definitions })
  ])

/** The state file `serve` keeps runs in: the flag, else PAGANTIC_STATE; none when neither is set. */
export const serveStateFile = (flag: Option.Option<string>): Effect.Effect<Option.Option<string>> =>
  Option.isSome(flag)
    ? Effect.succeed(flag)
    : Effect.orElseSucceed(Config.option(Config.string("PAGANTIC_STATE")), () => Option.none())

/** A failure of the Runs API as one line for the user. */
export const runsFailure = (error: RunsError): CliFailure =>
  new CliFailure({ message: `${error.code}: ${Text.excerpt(error.message, 600)}` })

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
        stream: (request) => Stream.unwrap(Effect.map(engine, (e) => e.stream(request))),
        modelInfo: Effect.orDie(Effect.flatMap(engine, (e) => e.modelInfo))
      })
    })
  )

/** What a command gets: the runs, the file they are on and the durable module. */
export interface Opened {
  readonly runs: RunsService
  readonly file: string
  readonly durable: DurableModule
}

/**
 * Opens the runs on the state file for the scope: the demo's definition and the
 * application's (`CliRuns`), the engine of `settings` loaded only when a run needs
 * it, or `engine` when given (already loaded). A file another process holds is a
 * CliFailure naming it.
 */
export const openRuns = (
  flag: Option.Option<string>,
  settings: EngineSettings,
  engine?: Layer.Layer<Engine> | undefined
) =>
  Effect.gen(function* () {
    const durable = yield* loadDurable
    const file = yield* stateFile(flag, durable.defaultFilename)
    const definitions = yield* definitionsOf(durable)
    const engineLayer = engine ?? lazyEngine((yield* CliEngine).make(settings))
    const context = yield* Layer.build(durable.layer(file, definitions, engineLayer)).pipe(Effect.mapError(runsFailure))
    return { runs: Context.get(context, Runs), file, durable } satisfies Opened
  })

/** Runs `program` on the runs of the state file, closed after it. */
export const withRuns = <A, E, R>(
  flag: Option.Option<string>,
  settings: EngineSettings,
  program: (opened: Opened) => Effect.Effect<A, E, R>
) => Effect.scoped(Effect.flatMap(openRuns(flag, settings), program))
