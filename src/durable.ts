/**
 * `pagantic/durable`: runs that survive a crash, apart from the main entry so that
 * importing `pagantic` never loads the workflow engine, the cluster runner or the
 * SQLite driver. SqlMemory keeps chat sessions (ConversationStore, SessionState)
 * on SQL across restarts. The services they provide (`Runs`, and `Durable` inside a run)
 * are concepts of the main entry; they are re-exported here for convenience.
 *
 * @example
 * import { Durable, Runs, SqliteRuns } from "pagantic/durable"
 *
 * const Greet = Runs.define({
 *   name: "greet",
 *   payload: Schema.Struct({ name: Schema.String }),
 *   success: Schema.String,
 *   program: ({ name }) =>
 *     Effect.flatMap(Durable.Durable, (durable) => durable.step("greet", Schema.String, Effect.succeed(`hi ${name}`)))
 * })
 * const RunsLive = SqliteRuns.layer({ filename: ".pagantic/state.db", definitions: [Greet] })
 */
export * as Durable from "./services/Durable.js"
export * as InMemoryRuns from "./layers/InMemoryRuns.js"
export * as Runs from "./services/Runs.js"
export * as PostgresRuns from "./layers/PostgresRuns.js"
export * as SqliteRuns from "./layers/SqliteRuns.js"
export * as SqlMemory from "./layers/SqlMemory.js"
