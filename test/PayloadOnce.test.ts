/**
 * A durable run's input is stored once: N async requests of a large body on a
 * real server over a real SQLite file grow the file by about N bodies, not by a
 * copy per table (the run's row, its INTEND record, the engine's message). The
 * thread still shows the payload in its INTEND, the result in its KNOW.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RequestRun from "../src/programs/facade/RequestRun.js"
import * as Runs from "../src/services/Runs.js"
import { tempCase } from "./support/durable-spawn.js"
import { post } from "./support/server.js"

interface Database {
  readonly prepare: (sql: string) => { readonly get: () => unknown; readonly all: () => Array<unknown> }
  readonly close: () => void
}
// better-sqlite3 (the driver under @effect/sql-sqlite-node) ships no types; this is the part used here
const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string) => Database

/** The bytes the file's tables and indexes take (pages in use, the WAL's included), by table. */
const usedBytes = (db: string): Record<string, number> => {
  const sqlite = new Database(db)
  try {
    const rows = sqlite.prepare("SELECT name, SUM(pgsize) AS bytes FROM dbstat GROUP BY name").all() as Array<{ name: string; bytes: number }>
    return Object.fromEntries(rows.map((row) => [row.name, row.bytes]))
  } finally {
    sqlite.close()
  }
}
const sum = (bytes: Record<string, number>) => Object.values(bytes).reduce((a, b) => a + b, 0)

const runs = 8
const bodyChars = 900_000

describe("durable payloads", () => {
  it.live(`${runs} async /v1/run of ${bodyChars / 1000} KB grow the state file by about one copy of each body`, () => {
    const { db, dir } = tempCase("payload-once")
    return Effect.scoped(
      Effect.gen(function* () {
        const requests = yield* RequestRun.make
        const engine = ScriptedEngine.layer([ScriptedEngine.reply("ok")], { whenExhausted: "repeat-last" })
        const system = requests.layer.pipe(
          Layer.provideMerge(Live.layer({ engine, tools: [], runs: SqliteRuns.layer({ filename: db, definitions: [requests.definition] }) }))
        )
        const context = yield* Layer.build(Http.layer({ port: 0 }).pipe(Layer.provideMerge(system))).pipe(Effect.orDie)
        const address = Context.get(context, HttpServer.HttpServer).address
        if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
        const url = `http://127.0.0.1:${address.port}`
        const service = Context.get(context as unknown as Context.Context<Runs.Runs>, Runs.Runs)

        const before = sum(usedBytes(db))
        const ids: Array<string> = []
        for (let i = 0; i < runs; i++) {
          const content = `${i} ${"lorem ipsum ".repeat(bodyChars / 12)}`.slice(0, bodyChars)
          const reply = yield* post(`${url}/v1/run`, { mode: "chat", messages: [{ role: "user", content }] }, { prefer: "respond-async" })
          expect(reply.status).toBe(202)
          ids.push(reply.json.runId)
        }
        for (const id of ids) expect((yield* service.await(id)).status).toBe("completed")
        const after = usedBytes(db)
        const grown = sum(after) - before
        // one copy of each body, and the runs' small rows; a second copy anywhere is past the bound
        expect(grown).toBeGreaterThan(runs * bodyChars)
        expect(grown).toBeLessThan(runs * bodyChars * 1.3)

        // the thread reads as before: the payload in its INTEND, the result in its KNOW
        const thread = yield* service.exportThread(ids[0]!)
        const intend = thread.records.find((r) => r.kind === "INTEND")
        expect(JSON.stringify(intend?.body)).toContain("lorem ipsum")
        expect(intend?.body).toEqual(thread.payload)
        expect(thread.records.find((r) => r.kind === "KNOW")?.body).toEqual((yield* service.poll(ids[0]!)).result)
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("90 seconds")
    )
  }, 120_000)
})
