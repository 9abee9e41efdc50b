/**
 * The operations on the runs' own tables (Tables.ts): what the workflow engine
 * does not keep in a form the Runs API can read. One row per run (status, result, the
 * process going it (`owner`) and the principal who started it (`principal`)),
 * one per human slot (the secret's hash, the responder asked, the absolute
 * deadline and how late an accept may move it, how it closed),
 * and the thread of records per run. What the run's row keeps (its payload, its
 * result, its failure) is not copied into the records that show it (INTEND, KNOW,
 * STATE failed/cancelled): their body is read from the row. Every write that may race (closing a slot,
 * ending a run) is one conditional UPDATE: the first writer wins, the others see
 * that they lost. Store errors are retried on a short named schedule, then become
 * ORCHESTRATION_STATE_UNAVAILABLE.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import type { RecordKind, RunStatus } from "../../services/Runs.js"
import { guarded } from "./Tables.js"
import type { RecordRow, RunRow, SlotRow, SlotStatus } from "./Tables.js"

const json = (value: unknown): string | null => (value === undefined ? null : JSON.stringify(value))

/**
 * The records' columns, a body left empty because the run's row keeps it read
 * from the row: INTEND its payload, KNOW its result, STATE failed or cancelled its
 * failure. (Threads written before carry the copy, read as it is.)
 */
const recordColumns = (sql: SqlClient.SqlClient) => sql`seq, run_id, kind, key, at, CASE
    WHEN body IS NOT NULL THEN body
    WHEN kind = 'INTEND' THEN (SELECT payload FROM pagantic_runs WHERE pagantic_runs.id = pagantic_records.run_id)
    WHEN kind = 'KNOW' THEN (SELECT result FROM pagantic_runs WHERE pagantic_runs.id = pagantic_records.run_id)
    WHEN kind = 'STATE' AND key IN ('failed', 'cancelled') THEN (SELECT error FROM pagantic_runs WHERE pagantic_runs.id = pagantic_records.run_id)
    ELSE NULL END AS body`

/** The most hashes a slot keeps (the first, then the latest): one more per restart that finds it open. */
const maxSecretHashes = 8

/** A NOTIFY sent with a record (Postgres). */
export interface Notice {
  readonly channel: string
  readonly payload: string
}

/** A record row with its `seq` a number (Postgres reads a BIGINT as a string). */
const numbered = (row: RecordRow): RecordRow => (typeof row.seq === "number" ? row : { ...row, seq: Number(row.seq) })

/** The store's operations (every one guarded: retried, then ORCHESTRATION_STATE_UNAVAILABLE). */
export const make = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const greatest = sql.onDialectOrElse({ pg: () => sql.literal("GREATEST"), orElse: () => sql.literal("MAX") })
  const columns = recordColumns(sql)

  /**
   * Appends a record; false when the run has one of that kind and key already
   * (the first one stays). With a `notice` (Postgres) the record's NOTIFY is sent
   * by the same statement: one round trip, one commit, and no notice for a
   * record that was not new.
   */
  const record = (
    runId: string,
    kind: RecordKind,
    key: string,
    at: number,
    body?: unknown,
    notice?: Notice | undefined
  ) =>
    (notice === undefined
      ? sql<{ key: string }>`INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES (${runId}, ${kind}, ${key}, ${at}, ${json(body)})
          ON CONFLICT (run_id, kind, key) DO NOTHING RETURNING key`
      : sql<{ key: string }>`WITH inserted AS (
            INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES (${runId}, ${kind}, ${key}, ${at}, ${json(body)})
            ON CONFLICT (run_id, kind, key) DO NOTHING RETURNING key
          ) SELECT key, pg_notify(${notice.channel}, ${notice.payload}) FROM inserted`).pipe(
        Effect.map((rows) => rows.length > 0),
        guarded(`record ${kind} ${key} of run ${runId}`)
      )

  const getRun = (id: string) =>
    sql<RunRow>`SELECT * FROM pagantic_runs WHERE id = ${id}`.pipe(
      Effect.map((rows) => rows[0]),
      guarded(`read run ${id}`)
    )

  return {
    record,
    getRun,

    /** Records a new run and its INTEND; false when the id exists. */
    insertRun: (row: {
      readonly id: string
      readonly definition: string
      readonly payload: unknown
      readonly owner: string
      readonly principal: string | undefined
      readonly at: number
    }) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const inserted = yield* sql<{ id: string }>`INSERT INTO pagantic_runs (id, definition, payload, status, owner, principal, created_at, updated_at)
            VALUES (${row.id}, ${row.definition}, ${JSON.stringify(row.payload)}, 'running', ${row.owner}, ${row.principal ?? null}, ${row.at}, ${row.at})
            ON CONFLICT (id) DO NOTHING RETURNING id`
          if (inserted.length === 0) return false
          yield* sql`INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES (${row.id}, 'INTEND', 'payload', ${row.at}, NULL)`
          return true
        })
      ).pipe(guarded(`record run ${row.id}`)),

    /**
     * The run is going (again) in this process: running, owned by `owner`, waiting
     * on nothing. A run already over keeps its status; returns the row after.
     */
    markRunning: (id: string, owner: string, at: number) =>
      sql<RunRow>`UPDATE pagantic_runs SET status = 'running', waiting_on = NULL, owner = ${owner}, updated_at = ${at}
        WHERE id = ${id} AND status NOT IN ('completed', 'failed', 'cancelled') RETURNING *`.pipe(
        Effect.flatMap((rows) => (rows.length > 0 ? Effect.succeed(rows[0]) : getRun(id).pipe(Effect.orDie))),
        guarded(`mark run ${id} running`)
      ),

    /** The run waits for slot `key`; records STATE suspended once per slot. */
    markSuspended: (id: string, key: string, at: number) =>
      sql<{ id: string }>`UPDATE pagantic_runs SET status = 'suspended', waiting_on = ${key}, updated_at = ${at}
        WHERE id = ${id} AND status NOT IN ('completed', 'failed', 'cancelled') RETURNING id`.pipe(
        guarded(`mark run ${id} suspended`),
        Effect.flatMap((rows) => (rows.length > 0 ? record(id, "STATE", `suspended/${key}`, at, { waitingOn: key }) : Effect.void))
      ),

    /**
     * Ends the run, unless it has ended already (the first end wins): completed
     * with its encoded result (KNOW), or failed/cancelled with the encoded failure.
     */
    finish: (
      id: string,
      end:
        | { readonly status: "completed"; readonly result: unknown }
        | { readonly status: "failed" | "cancelled"; readonly error: unknown },
      at: number
    ) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const result = end.status === "completed" ? json(end.result) : null
          const error = end.status === "completed" ? null : json(end.error)
          const updated = yield* sql<{ id: string }>`UPDATE pagantic_runs SET status = ${end.status}, waiting_on = NULL,
              result = ${result}, error = ${error}, updated_at = ${at}
            WHERE id = ${id} AND status NOT IN ('completed', 'failed', 'cancelled') RETURNING id`
          if (updated.length === 0) return false
          const [kind, key] = end.status === "completed" ? (["KNOW", "result"] as const) : (["STATE", end.status] as const)
          yield* sql`INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES (${id}, ${kind}, ${key}, ${at}, NULL)
            ON CONFLICT (run_id, kind, key) DO NOTHING`
          return true
        })
      ).pipe(guarded(`end run ${id}`)),

    /** Records after `afterSeq`, in order. */
    records: (runId: string, afterSeq: number) =>
      sql<RecordRow>`SELECT ${columns} FROM pagantic_records WHERE run_id = ${runId} AND seq > ${afterSeq} ORDER BY seq`.pipe(
        Effect.map((rows) => rows.map(numbered)),
        guarded(`read the records of run ${runId}`)
      ),

    /** The keys of a run's DO records: the steps it has done. */
    doneKeys: (runId: string) =>
      sql<{ key: string }>`SELECT key FROM pagantic_records WHERE run_id = ${runId} AND kind = 'DO'`.pipe(
        Effect.map((rows): ReadonlySet<string> => new Set(rows.map((row) => row.key))),
        guarded(`read the steps of run ${runId}`)
      ),

    /** The record `kind` `key` of a run, if any. */
    findRecord: (runId: string, kind: RecordKind, key: string) =>
      sql<RecordRow>`SELECT ${columns} FROM pagantic_records WHERE run_id = ${runId} AND kind = ${kind} AND key = ${key}`.pipe(
        Effect.map((rows) => (rows[0] === undefined ? undefined : numbered(rows[0]))),
        guarded(`read record ${kind} ${key} of run ${runId}`)
      ),

    /** All slots of a run. */
    slotsOf: (runId: string) =>
      sql<SlotRow>`SELECT * FROM pagantic_slots WHERE run_id = ${runId} ORDER BY key`.pipe(
        guarded(`read the slots of run ${runId}`)
      ),

    /**
     * Writes a run exported elsewhere: its row (running, to be re-driven), its
     * records but the end, and its slots (closed ones to be delivered). False when
     * the id exists.
     */
    importRun: (thread: {
      readonly id: string
      readonly definition: string
      readonly payload: unknown
      readonly owner: string
      readonly principal: string | undefined
      readonly at: number
      readonly records: ReadonlyArray<{ readonly kind: RecordKind; readonly key: string; readonly at: number; readonly body: unknown }>
      readonly slots: ReadonlyArray<{
        readonly key: string
        readonly shape: string
        readonly status: SlotStatus
        readonly deadline: number
        readonly answer: unknown
        readonly closedAt: number | undefined
        readonly responder: string | undefined
        readonly terms: unknown
        readonly latest: number | undefined
        readonly accepts: number | undefined
      }>
    }) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const inserted = yield* sql<{ id: string }>`INSERT INTO pagantic_runs (id, definition, payload, status, owner, principal, created_at, updated_at)
            VALUES (${thread.id}, ${thread.definition}, ${JSON.stringify(thread.payload)}, 'running', ${thread.owner}, ${thread.principal ?? null}, ${thread.at}, ${thread.at})
            ON CONFLICT (id) DO NOTHING RETURNING id`
          if (inserted.length === 0) return false
          for (const r of thread.records) {
            // the payload is the row's
            const body = r.kind === "INTEND" && r.key === "payload" ? null : json(r.body)
            yield* sql`INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES (${thread.id}, ${r.kind}, ${r.key}, ${r.at}, ${body})
              ON CONFLICT (run_id, kind, key) DO NOTHING`
          }
          for (const slot of thread.slots) {
            yield* sql`INSERT INTO pagantic_slots (run_id, key, shape, secret_hash, status, deadline, answer, closed_at, delivered,
                responder, terms, latest, accepts)
              VALUES (${thread.id}, ${slot.key}, ${slot.shape}, '', ${slot.status}, ${slot.deadline}, ${json(slot.answer)},
                ${slot.closedAt ?? null}, 0, ${slot.responder ?? null}, ${json(slot.terms)}, ${slot.latest ?? null}, ${slot.accepts ?? 0})`
          }
          return true
        })
      ).pipe(guarded(`import run ${thread.id}`)),

    /** Whether a record exists (an at-most-once step's intent). */
    hasRecord: (runId: string, kind: RecordKind, key: string) =>
      sql<{ n: number }>`SELECT 1 AS n FROM pagantic_records WHERE run_id = ${runId} AND kind = ${kind} AND key = ${key} LIMIT 1`.pipe(
        Effect.map((rows) => rows.length > 0),
        guarded(`read record ${kind} ${key} of run ${runId}`)
      ),

    /**
     * Opens slot `key` with a secret's hash; if it is open already (a step re-run
     * after a crash) the new secret replaces the old, and the deadline stays (closed
     * or imported: nothing changes). Returns the deadline in force.
     */
    openSlot: (slot: {
      readonly runId: string
      readonly key: string
      readonly shape: string
      readonly secretHash: string
      readonly deadline: number
      readonly responder: string | undefined
      readonly terms: unknown
      readonly latest: number | undefined
    }) =>
      sql<{ deadline: number }>`INSERT INTO pagantic_slots (run_id, key, shape, secret_hash, status, deadline, responder, terms, latest)
          VALUES (${slot.runId}, ${slot.key}, ${slot.shape}, ${slot.secretHash}, 'open', ${slot.deadline},
            ${slot.responder ?? null}, ${json(slot.terms)}, ${slot.latest ?? null})
        ON CONFLICT (run_id, key) DO UPDATE SET secret_hash = CASE
          WHEN pagantic_slots.status = 'open' THEN excluded.secret_hash ELSE pagantic_slots.secret_hash END
        RETURNING deadline`.pipe(
        Effect.map((rows) => rows[0]?.deadline ?? slot.deadline),
        guarded(`open slot ${slot.key} of run ${slot.runId}`)
      ),

    /**
     * One more secret opens the open slot `key` (those it had still do): for a
     * process that re-drives the run and no longer knows the secret drawn before.
     * The first hash and the latest are kept, at most `maxSecretHashes`.
     */
    addSecretHash: (runId: string, key: string, hash: string) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const rows = yield* sql<{ secret_hash: string }>`SELECT secret_hash FROM pagantic_slots
            WHERE run_id = ${runId} AND key = ${key} AND status = 'open'`
          if (rows[0] === undefined) return
          const hashes = rows[0].secret_hash.split(" ").filter((h) => h.length > 0)
          const kept = [...hashes, hash]
          const bounded = kept.length <= maxSecretHashes ? kept : [kept[0]!, ...kept.slice(kept.length - maxSecretHashes + 1)]
          yield* sql`UPDATE pagantic_slots SET secret_hash = ${bounded.join(" ")}
            WHERE run_id = ${runId} AND key = ${key} AND status = 'open'`
        })
      ).pipe(guarded(`add a secret to slot ${key} of run ${runId}`)),

    getSlot: (runId: string, key: string) =>
      sql<SlotRow>`SELECT * FROM pagantic_slots WHERE run_id = ${runId} AND key = ${key}`.pipe(
        Effect.map((rows) => rows[0]),
        guarded(`read slot ${key} of run ${runId}`)
      ),

    /** Closes an open slot; false when it was closed already (someone else won). */
    closeSlot: (runId: string, key: string, status: Exclude<SlotStatus, "open">, answer: unknown, at: number) =>
      sql<{ key: string }>`UPDATE pagantic_slots SET status = ${status}, answer = ${json(answer)}, closed_at = ${at}
        WHERE run_id = ${runId} AND key = ${key} AND status = 'open' RETURNING key`.pipe(
        Effect.map((rows) => rows.length > 0),
        guarded(`close slot ${key} of run ${runId}`)
      ),

    /**
     * An accept of an open slot that took fewer than `maxAccepts`: counts it and
     * moves the deadline to `atLeast` if later; the deadline then, or undefined
     * when the slot is not open or took its accepts.
     */
    extendSlot: (runId: string, key: string, atLeast: number, maxAccepts: number) =>
      sql<{ deadline: number }>`UPDATE pagantic_slots SET deadline = ${greatest} (deadline, ${atLeast}), accepts = accepts + 1
        WHERE run_id = ${runId} AND key = ${key} AND status = 'open' AND accepts < ${maxAccepts} RETURNING deadline`.pipe(
        Effect.map((rows) => rows[0]?.deadline),
        guarded(`extend slot ${key} of run ${runId}`)
      ),

    markDelivered: (runId: string, key: string) =>
      sql`UPDATE pagantic_slots SET delivered = 1 WHERE run_id = ${runId} AND key = ${key}`.pipe(
        Effect.asVoid,
        guarded(`mark slot ${key} of run ${runId} delivered`)
      ),

    /** Slots closed but not yet handed to their run (a crash came in between). */
    undelivered: sql<SlotRow>`SELECT * FROM pagantic_slots WHERE status <> 'open' AND delivered = 0`.pipe(
      guarded("read the undelivered slots")
    ),

    openSlots: sql<SlotRow>`SELECT * FROM pagantic_slots WHERE status = 'open'`.pipe(guarded("read the open slots")),

    openSlotsOf: (runId: string) =>
      sql<SlotRow>`SELECT * FROM pagantic_slots WHERE run_id = ${runId} AND status = 'open'`.pipe(
        guarded(`read the open slots of run ${runId}`)
      ),

    /** Runs not over (running or suspended), oldest first. */
    activeRuns: sql<RunRow>`SELECT * FROM pagantic_runs WHERE status IN ('running', 'suspended') ORDER BY created_at`.pipe(
      guarded("read the active runs")
    ),

    list: (status: RunStatus | undefined, limit: number, principal: string | undefined) => {
      const conditions = [
        ...(status === undefined ? [] : [sql`status = ${status === "stale" ? "running" : status}`]),
        ...(principal === undefined ? [] : [sql`principal = ${principal}`])
      ]
      return sql<RunRow>`SELECT * FROM pagantic_runs ${conditions.length === 0 ? sql`` : sql`WHERE ${sql.and(conditions)}`}
        ORDER BY created_at DESC, id LIMIT ${limit}`.pipe(guarded("list runs"))
    },

    /**
     * Deletes runs over before `before` with their slots and records, in one
     * transaction whose first statement writes (on SQLite it waits for the write
     * lock under the busy timeout, and no other writer slips in between); returns
     * their ids. A run over stays over, so the three statements see the same runs.
     */
    prune: (before: number) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const ended = sql`SELECT id FROM pagantic_runs WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at < ${before}`
          yield* sql`DELETE FROM pagantic_records WHERE run_id IN (${ended})`
          yield* sql`DELETE FROM pagantic_slots WHERE run_id IN (${ended})`
          return yield* sql<{ id: string; definition: string }>`DELETE FROM pagantic_runs
            WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at < ${before} RETURNING id, definition`
        })
      ).pipe(guarded("prune runs"))
  }
})

/** The store's operations. */
export type Store = Effect.Effect.Success<typeof make>
