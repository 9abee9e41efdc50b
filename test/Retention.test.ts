/**
 * Retention on a SQLite state file: `pagantic serve --state` prunes the runs
 * that ended before PAGANTIC_RETENTION_DAYS at its start (a malformed value stops
 * it before it listens), `pagantic runs prune` works beside a running server, and
 * a prune that frees a large share of the file shrinks it (Compact). The runs are
 * made by the test on the file (SqliteRuns) and backdated in it (better-sqlite3).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { root } from "./support/child.js"
import * as ServeLog from "./support/serve-log.js"

const launcher = path.join(root, "bin", "pagantic.js")

/** A run whose payload is `text`: it is kept in the run's row, as large as it is. */
const Big = Runs.define({
  name: "big",
  payload: Schema.Struct({ text: Schema.String }),
  success: Schema.Number,
  program: ({ text }) => Effect.flatMap(Durable, (durable) => durable.step("length", Schema.Number, Effect.succeed(text.length)))
})

interface Database {
  readonly prepare: (sql: string) => { readonly all: (...params: Array<unknown>) => Array<unknown>; readonly run: (...params: Array<unknown>) => unknown }
  readonly pragma: (sql: string, options?: { readonly simple: boolean }) => unknown
  readonly exec: (sql: string) => void
  readonly close: () => void
}
// better-sqlite3 (the driver under @effect/sql-sqlite-node) ships no types; this is the part used here
const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string, options?: { readonly readonly?: boolean }) => Database

const withDb = <A>(file: string, body: (db: Database) => A, readonly = false): A => {
  const db = new Database(file, { readonly })
  try {
    return body(db)
  } finally {
    db.close()
  }
}

const tempState = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-retention-")), "state.db")

/** Ends `count` Big runs of `size` characters each on `file` (this process holding it meanwhile); their ids. */
const endRuns = (file: string, count: number, size: number) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const context = yield* Layer.build(SqliteRuns.layer({ filename: file, definitions: [Big] }))
    const runs = Context.get(context, Runs.Runs)
    const ids: Array<string> = []
    for (let i = 0; i < count; i++) {
      const id = yield* runs.start(Big, { text: `${i}:`.padEnd(size, "x") })
      expect((yield* runs.await(id)).status).toBe("completed")
      ids.push(id)
    }
    return ids
  })).pipe(Effect.orDie))

/** Moves the end of runs `ids` back by `days`. */
const backdate = (file: string, ids: ReadonlyArray<string>, days: number) =>
  withDb(file, (db) => {
    const update = db.prepare("UPDATE pagantic_runs SET updated_at = updated_at - ? WHERE id = ?")
    for (const id of ids) update.run(days * 86_400_000, id)
  })

const runIds = (file: string): ReadonlyArray<string> =>
  withDb(file, (db) => (db.prepare("SELECT id FROM pagantic_runs ORDER BY id").all() as Array<{ id: string }>).map((r) => r.id), true)

/** The bytes of the state file and its write-ahead log. */
const bytes = (file: string) => [file, `${file}-wal`].reduce((sum, f) => sum + (fs.existsSync(f) ? fs.statSync(f).size : 0), 0)

interface Completed {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const launch = (args: ReadonlyArray<string>, env: Record<string, string>, timeout = 40_000): Promise<Completed> =>
  new Promise((resolve) => {
    execFile(process.execPath, [launcher, ...args], { cwd: root, timeout, env: { ...process.env, NO_COLOR: "1", ...env } }, (error, stdout, stderr) =>
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr }))
  })

/** `pagantic serve --no-auth --state FILE` on a free port of 127.0.0.1, and its address once it listens (within 40 s). */
const serve = (file: string, env: Record<string, string>) =>
  ServeLog.spawnServe(launcher, ["--threads", "1", "--no-auth", "--state", file], {
    cwd: root,
    env: { ...process.env, NO_COLOR: "1", PAGANTIC_PORT: "0", PAGANTIC_HOME: path.dirname(file), PAGANTIC_STATE_URL: "", ...env }
  })

const listed = async (address: string): Promise<ReadonlyArray<string>> => {
  const reply = await fetch(`${address}/v1/runs`, { signal: AbortSignal.timeout(10_000) })
  expect(reply.status).toBe(200)
  return ((await reply.json()) as { runs: Array<{ id: string }> }).runs.map((r) => r.id)
}

describe("retention on a SQLite state file", () => {
  it("serve --state with PAGANTIC_RETENTION_DAYS prunes the runs ended before it at start and shrinks the file; a malformed value stops it before it listens", async () => {
    const file = tempState()
    const old = await endRuns(file, 12, 900_000)
    const [recent] = await endRuns(file, 1, 100)
    backdate(file, old, 3)
    const before = bytes(file)

    const bad = await launch(["serve", "--no-auth", "--state", file], { PAGANTIC_PORT: "0", PAGANTIC_HOME: path.dirname(file), PAGANTIC_RETENTION_DAYS: "-3" })
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain("error: CONFIG_INVALID_REQUEST: PAGANTIC_RETENTION_DAYS")
    expect(bad.stdout + bad.stderr).not.toContain("Listening on")
    expect(runIds(file)).toHaveLength(13)
    const badDrain = await launch(["serve", "--no-auth", "--state", file], { PAGANTIC_PORT: "0", PAGANTIC_HOME: path.dirname(file), PAGANTIC_DRAIN_SECONDS: "soon" })
    expect(badDrain.code).toBe(1)
    expect(badDrain.stderr).toContain("error: CONFIG_INVALID_REQUEST: PAGANTIC_DRAIN_SECONDS")
    expect(badDrain.stdout + badDrain.stderr).not.toContain("Listening on")

    const server = serve(file, { PAGANTIC_RETENTION_DAYS: "2" })
    try {
      const address = await server.listening
      expect(server.output.text).toContain("retention: pruned 12 ended run(s)")
      expect(await listed(address)).toEqual([recent])
      expect(runIds(file)).toEqual([recent])
      // twelve payloads of 900 KB were most of the file
      expect(bytes(file)).toBeLessThan(before / 10)
    } finally {
      await server.stop()
    }
  }, 120_000)

  it("runs prune beside a running serve: the ended runs go, the server keeps serving and writing", async () => {
    const file = tempState()
    const old = await endRuns(file, 3, 100)
    const [recent] = await endRuns(file, 1, 100)
    backdate(file, old, 10)
    const server = serve(file, {})
    try {
      const address = await server.listening
      expect(fs.existsSync(`${file}.owner`)).toBe(true)
      const pruned = await launch(["runs", "prune", "--older-than", "7d", "--state", file], {})
      expect(pruned.stderr).toBe("")
      expect(pruned.stdout).toContain("pruned 3 run(s) that ended more than 7d ago")
      expect(pruned.code).toBe(0)
      expect(runIds(file)).toEqual([recent])
      expect(await listed(address)).toEqual([recent])
      // the server still owns the file, and writes to it: a query is a durable run
      const reply = await fetch(`${address}/v1/queries`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          kind: "infer.query.v1",
          input: { inline: "The soup was cold." },
          responders: [{ kind: "llm", model: "~model" }],
          answer_shape: { kind: "core.classification.v1", labels: ["positive", "negative", "neutral"] }
        }),
        signal: AbortSignal.timeout(40_000)
      })
      const body = await reply.json() as { query?: { runId?: string } }
      expect(reply.status, JSON.stringify(body).slice(0, 600)).toBe(200)
      expect(await listed(address)).toContain(body.query?.runId)
      expect(fs.existsSync(`${file}.owner`)).toBe(true)
    } finally {
      await server.stop()
    }
  }, 120_000)

  it("a prune that frees most of the file shrinks it (incremental on a file made so, VACUUM on an older one); a small one leaves it", async () => {
    const file = tempState()
    const ids = await endRuns(file, 20, 900_000)
    expect(withDb(file, (db) => db.pragma("auto_vacuum", { simple: true }))).toBe(2)
    // one run of twenty: below the threshold, the file is left as it is
    backdate(file, ids.slice(0, 1), 2)
    const full = bytes(file)
    const small = await Effect.runPromise(SqliteRuns.prune({ filename: file, olderThan: "1 day" }))
    expect(small).toEqual({ pruned: 1, compacted: undefined })
    expect(bytes(file)).toBe(full)
    const messages = () => (withDb(file, (db) => db.prepare("SELECT COUNT(*) AS n FROM cluster_messages").all(), true) as Array<{ n: number }>)[0]!.n
    expect(messages()).toBeGreaterThan(0)
    // the rest: the file gives its pages back
    const large = await Effect.runPromise(SqliteRuns.prune({ filename: file, olderThan: 0 }))
    expect(large.pruned).toBe(19)
    expect(large.compacted?.how).toBe("incremental_vacuum")
    // the engine's messages of the runs went with them
    expect(messages()).toBe(0)
    expect(bytes(file)).toBeLessThan(full / 20)

    // a file made before (auto_vacuum NONE): VACUUMed, by the command, and incremental after
    const older = tempState()
    await endRuns(older, 20, 900_000)
    withDb(older, (db) => db.exec("PRAGMA auto_vacuum = NONE; VACUUM"))
    expect(withDb(older, (db) => db.pragma("auto_vacuum", { simple: true }))).toBe(0)
    const olderFull = bytes(older)
    const run = await launch(["runs", "prune", "--older-than", "0s", "--state", older], {})
    expect(run.stdout).toMatch(/pruned 20 run\(s\)[\s\S]*shrunk from \d+\.\d MiB to \d+\.\d MiB \(VACUUM\)/)
    expect(run.code).toBe(0)
    expect(bytes(older)).toBeLessThan(olderFull / 20)
    expect(withDb(older, (db) => db.pragma("auto_vacuum", { simple: true }))).toBe(2)
  }, 120_000)
})
