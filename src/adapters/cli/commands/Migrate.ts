/**
 * `pagantic migrate`: creates the state tables in the chosen store (see
 * RunsState: `--state-url` or PAGANTIC_STATE_URL for Postgres, else `--state`,
 * PAGANTIC_STATE or `.pagantic/state.db`), so that the processes that later open
 * it start without creating them. On Postgres the cluster's tables and the runs'
 * are created under the database's migration lock (several at once wait for each
 * other) and no runner is started; on SQLite no run is re-driven.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { print } from "../Output.js"
import { loadDurable, runsFailure, stateOption, storeOf } from "../RunsState.js"

export const migrate = Command.make("migrate", { state: stateOption }, (args) =>
  Effect.gen(function* () {
    const store = yield* storeOf(args.state)
    const durable = yield* loadDurable
    yield* print(yield* durable.migrate(store).pipe(Effect.mapError(runsFailure)))
  })).pipe(Command.withDescription("create the durable state tables (SQLite file, or Postgres with --state-url)"))
