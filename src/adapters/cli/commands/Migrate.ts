/**
 * `pagantic migrate`: creates the state tables (the runs' and the workflow
 * engine's) in the SQLite state file (`--state`, else PAGANTIC_STATE, else
 * `.pagantic/state.db`), so that the processes that later open it start without
 * creating them. No run is re-driven by it.
 */
import * as Command from "@effect/cli/Command"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { fail } from "../CliFailure.js"
import { print } from "../Output.js"
import { loadDurable, runsFailure, stateFile, stateOption } from "../RunsState.js"

export const migrate = Command.make("migrate", { state: stateOption }, (args) =>
  Effect.gen(function* () {
    const url = yield* Effect.orElseSucceed(Config.option(Config.redacted("PAGANTIC_STATE_URL")), () => Option.none())
    if (Option.isSome(url)) {
      return yield* fail("PAGANTIC_STATE_URL is set, but this build keeps durable runs on SQLite only (Postgres is not available yet); unset it to migrate a SQLite file")
    }
    const durable = yield* loadDurable
    const file = yield* stateFile(args.state, durable.defaultFilename)
    // no definitions: the tables are created, and the runs recorded are left as they are
    yield* Effect.scoped(Layer.build(durable.bare(file))).pipe(Effect.mapError(runsFailure))
    yield* print(`state tables ready in ${file}`)
  })).pipe(Command.withDescription("create the durable state tables in the SQLite state file"))
