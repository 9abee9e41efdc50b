/**
 * One commit of a store, the floor a durable step is measured against: a row
 * inserted (autocommit) into a table of the same database through the same SQL
 * client, each insert timed, after a few to warm the connection.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"

export const commitTimes = (count: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE IF NOT EXISTS bench_commit (k TEXT PRIMARY KEY, v TEXT)`
    const times: Array<number> = []
    for (let i = -10; i < count; i++) {
      const start = performance.now()
      yield* sql`INSERT INTO bench_commit (k, v) VALUES (${`k${i}`}, ${JSON.stringify({ value: i })})`
      if (i >= 0) times.push(performance.now() - start)
    }
    yield* sql`DROP TABLE bench_commit`
    return times
  })
