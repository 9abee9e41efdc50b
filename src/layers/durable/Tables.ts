/**
 * The runs' own tables, next to the workflow engine's, and what a row of each
 * reads as: one row per run, one per human slot, and the thread of records per
 * run (the operations on them are in Store). Store errors are retried on a short
 * named schedule, then become ORCHESTRATION_STATE_UNAVAILABLE.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { OrchestrationFailure } from "../../domain/Failure.js"
import type { RecordKind, RunStatus } from "../../services/Runs.js"

/** Store errors: three quick retries (50 ms doubling, jittered) before the store counts as down. */
export const storeRetry: Schedule.Schedule<unknown> = Schedule.exponential("50 millis").pipe(
  Schedule.jittered,
  Schedule.intersect(Schedule.recurs(3)),
  Schedule.asVoid
)

const unavailable = (what: string) => (error: SqlError) =>
  OrchestrationFailure.stateUnavailable(`the run store failed to ${what}: ${error.message}`, { cause: error })

export const guarded = (what: string) => <A, R>(effect: Effect.Effect<A, SqlError, R>) =>
  effect.pipe(Effect.retry(storeRetry), Effect.mapError(unavailable(what)))

/**
 * The tables, created if missing. Run before any runner starts. On Postgres the
 * times (epoch milliseconds) are DOUBLE PRECISION, exact for whole milliseconds,
 * which the driver reads as numbers (it reads BIGINT as strings); `seq` is a BIGINT
 * identity, read back as a number. The columns added since the tables were
 * first released are added to a database that lacks them (idempotent).
 */
export const migrate: Effect.Effect<void, OrchestrationFailure, SqlClient.SqlClient> = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const time = sql.onDialectOrElse({ pg: () => sql.literal("DOUBLE PRECISION"), orElse: () => sql.literal("INTEGER") })
  const seq = sql.onDialectOrElse({
    pg: () => sql.literal("seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    orElse: () => sql.literal("seq INTEGER PRIMARY KEY AUTOINCREMENT")
  })
  yield* sql`CREATE TABLE IF NOT EXISTS pagantic_runs (
    id TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL,
    waiting_on TEXT,
    result TEXT,
    error TEXT,
    owner TEXT,
    created_at ${time} NOT NULL,
    updated_at ${time} NOT NULL
  )`
  yield* sql`CREATE INDEX IF NOT EXISTS pagantic_runs_status ON pagantic_runs (status, updated_at)`
  yield* sql`CREATE TABLE IF NOT EXISTS pagantic_slots (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    shape TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    deadline ${time} NOT NULL,
    answer TEXT,
    closed_at ${time},
    delivered INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key)
  )`
  yield* sql`CREATE TABLE IF NOT EXISTS pagantic_records (
    ${seq},
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    at ${time} NOT NULL,
    body TEXT,
    UNIQUE (run_id, kind, key)
  )`
  const added: ReadonlyArray<readonly [table: string, column: string, type: Statement.Fragment]> = [
    ["pagantic_runs", "principal", sql.literal("TEXT")],
    ["pagantic_slots", "responder", sql.literal("TEXT")],
    ["pagantic_slots", "terms", sql.literal("TEXT")],
    ["pagantic_slots", "latest", time],
    ["pagantic_slots", "accepts", sql.literal("INTEGER NOT NULL DEFAULT 0")]
  ]
  for (const [table, column, type] of added) {
    yield* sql.onDialectOrElse({
      pg: () => sql`ALTER TABLE ${sql(table)} ADD COLUMN IF NOT EXISTS ${sql(column)} ${type}`.pipe(Effect.asVoid),
      orElse: () =>
        Effect.flatMap(sql<{ name: string }>`SELECT name FROM pragma_table_info(${table})`, (columns) =>
          columns.some((c) => c.name === column) ? Effect.void : Effect.asVoid(sql`ALTER TABLE ${sql(table)} ADD COLUMN ${sql(column)} ${type}`))
    })
  }
  yield* sql`CREATE INDEX IF NOT EXISTS pagantic_runs_principal ON pagantic_runs (principal, created_at)`
}).pipe(guarded("create its tables"))

export interface RunRow {
  readonly id: string
  readonly definition: string
  readonly payload: string
  readonly status: Exclude<RunStatus, "stale">
  readonly waiting_on: string | null
  readonly result: string | null
  readonly error: string | null
  readonly owner: string | null
  readonly principal: string | null
  readonly created_at: number
  readonly updated_at: number
}

export type SlotStatus = "open" | "answered" | "declined" | "expired" | "cancelled"

export interface SlotRow {
  readonly run_id: string
  readonly key: string
  readonly shape: string
  readonly secret_hash: string
  readonly status: SlotStatus
  readonly deadline: number
  readonly answer: string | null
  readonly closed_at: number | null
  readonly delivered: number
  readonly responder: string | null
  readonly terms: string | null
  readonly latest: number | null
  readonly accepts: number
}

export interface RecordRow {
  readonly seq: number
  readonly run_id: string
  readonly kind: RecordKind
  readonly key: string
  readonly at: number
  readonly body: string | null
}
