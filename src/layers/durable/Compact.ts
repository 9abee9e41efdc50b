/**
 * Giving the pages a prune freed in a SQLite state file back to the file system.
 * Deleted rows leave free pages that SQLite reuses but does not return: after a
 * prune that freed a large share of the file, the file is shrunk. A file created
 * with `auto_vacuum = INCREMENTAL` (the state files are, since this module) is
 * shrunk by `incremental_vacuum` in short steps, each a brief write transaction
 * a server beside it waits out under its busy timeout; an older file is VACUUMed
 * once (a copy of its live pages, holding the write lock meanwhile), which also
 * turns it incremental. The write-ahead log is then truncated.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"

/**
 * Shrink when at least this share of the file's pages is free: VACUUM copies every
 * live page, and below a quarter the free pages are soon reused by new runs anyway.
 */
export const threshold = 0.25

/** Pages given back per transaction (8 MiB of 4 KiB pages): each is one short write, tens of milliseconds. */
const step = 2048

/** The file's size (its pages, in bytes) before and after, and how it was shrunk. */
export interface Compacted {
  readonly before: number
  readonly after: number
  readonly how: "incremental_vacuum" | "VACUUM"
}

const pragma = (sql: SqlClient.SqlClient, name: string) =>
  Effect.map(sql<Record<string, unknown>>`PRAGMA ${sql.literal(name)}`, (rows) => Number(Object.values(rows[0] ?? {})[0] ?? 0))

const mib = (bytes: number): string => `${(bytes / 1_048_576).toFixed(1)} MiB`

/** "shrunk from 52.3 MiB to 0.1 MiB (VACUUM)". */
export const describe = (done: Compacted): string => `shrunk from ${mib(done.before)} to ${mib(done.after)} (${done.how})`

/**
 * Sets `auto_vacuum = INCREMENTAL` on a file that has no tables yet (one that has
 * is left as it is). The VACUUM applies it: the file is written already (its
 * switch to WAL), and a written file takes the mode only from a VACUUM.
 */
export const incrementalOnCreate: Effect.Effect<void, SqlError, SqlClient.SqlClient> = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const tables = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM sqlite_master`
  if (Number(tables[0]?.n ?? 0) > 0 || (yield* pragma(sql, "auto_vacuum")) === 2) return
  yield* sql`PRAGMA auto_vacuum = INCREMENTAL`
  yield* sql`VACUUM`
})

/**
 * Shrinks the SQLite file of the client when at least `threshold` of its pages are
 * free; undefined when it was left as it is. Not inside a transaction.
 */
export const compact: Effect.Effect<Compacted | undefined, SqlError, SqlClient.SqlClient> = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const pageSize = yield* pragma(sql, "page_size")
  const pages = yield* pragma(sql, "page_count")
  const free = yield* pragma(sql, "freelist_count")
  if (pages === 0 || free < pages * threshold) return undefined
  const incremental = (yield* pragma(sql, "auto_vacuum")) === 2
  if (incremental) {
    // the driver steps a statement once, and a step of incremental_vacuum gives back
    // one page: `step` of them per transaction, while each transaction gives pages back
    let left = free
    while (left > 0) {
      yield* sql.withTransaction(Effect.gen(function* () {
        for (let i = Math.min(left, step); i > 0; i--) yield* sql`PRAGMA incremental_vacuum`
      }))
      const now = yield* pragma(sql, "freelist_count")
      if (now >= left) break
      left = now
    }
  } else {
    // the VACUUM applies it: the next shrink of this file is incremental
    yield* sql`PRAGMA auto_vacuum = INCREMENTAL`
    yield* sql`VACUUM`
  }
  // the log holds the moved pages until a checkpoint; TRUNCATE empties it (or does what a reader allows)
  yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
  return { before: pages * pageSize, after: (yield* pragma(sql, "page_count")) * pageSize, how: incremental ? "incremental_vacuum" : "VACUUM" }
})
