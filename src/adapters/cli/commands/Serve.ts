/**
 * `pagantic serve`: the HTTP API (/v1/run, /v1/chat/completions, /health) on the
 * chosen engine. `--port` and `--host` win over the environment's configuration.
 * With `--state FILE` (or PAGANTIC_STATE set) it also keeps durable runs in that
 * SQLite file and serves them under /v1/runs; the durable layer is imported only
 * then, so a server without state starts without it.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import type * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Http from "../../Http.js"
import * as Orchestration from "../../../programs/Orchestration.js"
import * as Live from "../../Live.js"
import { CliFailure, fromLayerFailure } from "../CliFailure.js"
import { globalOptions, integerIn, textFlag } from "../Flags.js"
import { definitionsOf, loadDurable, runsFailure, serveStateFile, stateOption } from "../RunsState.js"
import { CliEngine, settingsOf } from "../Wiring.js"

/** The flags `serve` takes, as parsed. */
export interface ServeFlags {
  readonly port: Option.Option<number>
  readonly host: Option.Option<string>
}

/** The flags given, as overrides of the server's configuration (the flags not given are undefined). */
const serveOverrides = (flags: ServeFlags): Http.Options => ({
  port: Option.getOrUndefined(flags.port),
  host: Option.getOrUndefined(flags.host)
})

/**
 * The options `serve` listens with: each flag given wins, the others come from the
 * environment (PAGANTIC_PORT, PAGANTIC_HOST, PAGANTIC_API_KEY, ...) or the
 * defaults, as `Http.optionsConfig` reads them.
 */
export const serveOptions = (flags: ServeFlags): Config.Config<Http.Options> => Http.optionsConfig(serveOverrides(flags))

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
    state: stateOption.pipe(
      Options.withDescription("keep durable runs in this SQLite file and serve them under /v1/runs (default: PAGANTIC_STATE; none when unset)")
    )
  },
  (args) =>
    Effect.gen(function* () {
      const engines = yield* CliEngine
      const settings = yield* settingsOf(args)
      // the engine as it is (not the recording one): a server runs for long
      const engine = engines.make(settings)
      const file = yield* serveStateFile(args.state)
      if (Option.isNone(file)) return yield* Http.serve(Live.layer({ engine }), serveOverrides(args))
      // with state, queries are durable runs too (their responders: the served engine)
      const queries = Orchestration.definition({ aliases: Live.engineResponderAliases })
      const durable = yield* loadDurable
      const runs = durable.serverLayer(file.value, [...(yield* definitionsOf(durable)), queries])
      return yield* Http.serve(Live.layer({ engine, runs, facade: { queries: { definition: queries } } }), serveOverrides(args))
    }).pipe(
      Effect.mapError((e) =>
        e._tag === "ServeError"
          ? new CliFailure({ message: `cannot listen: ${String(e.cause)}` })
          : e._tag === "OrchestrationFailure" || e._tag === "ConfigurationFailure"
          ? runsFailure(e)
          : fromLayerFailure(e)
      )
    )
).pipe(Command.withDescription("serve the HTTP API (/v1/run, /v1/chat/completions, /health) on the model, on 127.0.0.1"))
