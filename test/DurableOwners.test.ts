/**
 * Who owns and who answers, in the Runs service (issue #42). A run records the
 * owner its caller gives `start` (the `principal` column, apart from the process
 * column `owner`), read back by `poll`, filtered on by `list`, kept by an export
 * and an import; a database from before the columns gets them on open (SQLite
 * here; Postgres in test/PostgresRuns). A slot is answered by its secret, by the
 * responder it names, or by the operator, and refused alike for anyone else and
 * for a slot that does not exist; an accept is bounded in count and by the slot's
 * bound; and no secret is written to the state file (the engine's journal
 * included), before or after a restart, while the one handed out still opens the slot.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import type { Slot } from "../src/services/Durable.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Probe, Reference, Review } from "./support/durable-runs.js"
import { tempCase } from "./support/durable-spawn.js"

const probe = Layer.succeed(Probe, { work: (_, value) => Effect.succeed(value), between: () => Effect.void, notify: () => Effect.void })

/** The slots a run hands its program, on every replay too (kept outside any step). */
class Handed extends Context.Tag("test/Handed")<Handed, Ref.Ref<ReadonlyArray<Slot>>>() {}
const handedLayer = Layer.effect(Handed, Ref.make<ReadonlyArray<Slot>>([]))

/** Until the run waits on slot `key` (its resume after an answer takes a moment), bounded. */
const waitingOn = (runs: Runs.Service, id: string, key: string) =>
  Effect.repeat(runs.poll(id), { until: (info) => info.waitingOn === key, schedule: Schedule.spaced("20 millis") }).pipe(
    Effect.timeout("10 seconds")
  )

/**
 * Two slots asked of alice one after the other (the second opens on the replay
 * that the first's answer resumes), each accepted at most within 10 s of opening.
 */
const Asked = Runs.define({
  name: "asked",
  payload: Schema.Struct({}),
  success: Schema.Array(Schema.Boolean),
  answers: [Review],
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const handed = yield* Handed
      const results: Array<boolean> = []
      for (const key of ["first", "second"]) {
        const slot = yield* durable.slot(Review, { key, sla: "5 seconds", bound: "10 seconds", responder: "alice" })
        yield* Ref.update(handed, (all) => [...all, slot])
        const outcome = yield* durable.awaitAnswer(Review, slot)
        results.push(outcome._tag === "Answered" && outcome.value.approved)
      }
      return results
    })
})

/** The slot `key` once the program has been handed it, bounded. */
const handedOut = (handed: Ref.Ref<ReadonlyArray<Slot>>, key: string) =>
  Effect.repeat(Ref.get(handed), { until: (all) => all.some((slot) => slot.key === key), schedule: Schedule.spaced("20 millis") }).pipe(
    Effect.zipRight(Ref.get(handed)),
    Effect.map((all) => all.find((slot) => slot.key === key)!),
    Effect.timeout("10 seconds")
  )

const secretOf = (slot: Slot) => Redacted.value(slot.secret)

interface Database {
  readonly exec: (sql: string) => void
  readonly prepare: (sql: string) => { readonly all: () => Array<unknown> }
  readonly close: () => void
}
// better-sqlite3 (the driver under @effect/sql-sqlite-node) ships no types; this is the part used here
const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string) => Database

describe("durable runs record their owner", () => {
  it.live("start records the owner; poll reads it; list filters on it; an unowned run has none", () =>
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const alice = yield* runs.start(Reference, { seed: 1 }, { owner: "alice" })
      const bob = yield* runs.start(Reference, { seed: 2 }, { owner: "bob" })
      const nobody = yield* runs.start(Reference, { seed: 3 })
      for (const id of [alice, bob, nobody]) yield* runs.await(id)
      expect((yield* runs.poll(alice)).owner).toBe("alice")
      expect((yield* runs.poll(nobody)).owner).toBeUndefined()
      expect((yield* runs.list({ owner: "alice" })).map((r) => r.id)).toEqual([alice])
      expect((yield* runs.list({ owner: "bob", status: "completed" })).map((r) => r.id)).toEqual([bob])
      expect((yield* runs.list({ owner: "carol" })).length).toBe(0)
      expect(new Set((yield* runs.list()).map((r) => r.id))).toEqual(new Set([alice, bob, nobody]))
      // the process that goes a run is not its owner
      expect((yield* runs.list({ owner: "memory" })).length).toBe(0)
    }).pipe(
      Effect.provide(InMemoryRuns.layer({ definitions: [Reference] }).pipe(Layer.provide(probe))),
      Effect.timeout("20 seconds")
    ))

  it.live("an exported thread carries its owner and an import keeps it", () =>
    Effect.gen(function* () {
      const thread = yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Reference, { seed: 4 }, { owner: "alice" })
        yield* runs.await(id)
        return yield* runs.exportThread(id)
      }).pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Reference] }).pipe(Layer.provide(probe))))
      expect(thread.owner).toBe("alice")
      const decoded = yield* Schema.decodeUnknown(Runs.Thread)(JSON.parse(JSON.stringify(Schema.encodeSync(Runs.Thread)(thread))))
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.importThread(decoded)
        expect((yield* runs.await(id)).owner).toBe("alice")
        expect((yield* runs.list({ owner: "alice" })).map((r) => r.id)).toEqual([id])
      }).pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Reference] }).pipe(Layer.provide(probe))))
    }).pipe(Effect.timeout("20 seconds")))

  it.live("a state file from before owners gets the column on open (twice: the migration is idempotent) and keeps its runs", () => {
    const { db, dir } = tempCase("owners-migrate")
    // the tables as the first release created them
    const old = new Database(db)
    old.exec(`CREATE TABLE pagantic_runs (id TEXT PRIMARY KEY, definition TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL,
      waiting_on TEXT, result TEXT, error TEXT, owner TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)`)
    old.exec(`CREATE TABLE pagantic_slots (run_id TEXT NOT NULL, key TEXT NOT NULL, shape TEXT NOT NULL, secret_hash TEXT NOT NULL,
      status TEXT NOT NULL, deadline INTEGER NOT NULL, answer TEXT, closed_at INTEGER, delivered INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (run_id, key))`)
    old.exec(`INSERT INTO pagantic_runs VALUES ('old-run', 'reference', '{"seed":1}', 'completed', NULL, '{"total":1,"trail":[]}', NULL,
      'gone:1', 1000, 1000)`)
    old.exec(`INSERT INTO pagantic_slots VALUES ('old-run', 'review', 'review', 'abc', 'expired', 2000, NULL, 2000, 1)`)
    old.close()
    const columns = (table: string) => {
      const sqlite = new Database(db)
      try {
        return (sqlite.prepare(`SELECT name FROM pragma_table_info('${table}')`).all() as Array<{ name: string }>).map((c) => c.name)
      } finally {
        sqlite.close()
      }
    }
    const open = <A, E>(body: Effect.Effect<A, E, Runs.Runs>) =>
      Effect.provide(body, SqliteRuns.layer({ filename: db, definitions: [Reference, Approval] }).pipe(Layer.provide(probe)))
    return Effect.gen(function* () {
      yield* open(Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const kept = yield* runs.poll("old-run")
        expect(kept.status).toBe("completed")
        expect(kept.owner).toBeUndefined()
        const id = yield* runs.start(Reference, { seed: 5 }, { owner: "alice" })
        yield* runs.await(id)
        expect((yield* runs.list({ owner: "alice" })).map((r) => r.id)).toEqual([id])
        const [slot] = (yield* runs.exportThread("old-run")).slots
        expect(slot).toMatchObject({ key: "review", status: "expired", accepts: 0 })
        expect(slot!.responder).toBeUndefined()
      }))
      expect(columns("pagantic_runs")).toContain("principal")
      expect(columns("pagantic_slots")).toEqual(expect.arrayContaining(["responder", "terms", "latest", "accepts"]))
      // opened again: nothing to add, nothing lost
      yield* open(Effect.gen(function* () {
        const runs = yield* Runs.Runs
        expect((yield* runs.list()).length).toBe(2)
        expect((yield* runs.list({ owner: "alice" })).length).toBe(1)
      }))
    }).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)
})

describe("who answers a slot", () => {
  const answer = { approved: true, note: "ok" }

  it.live("the responder it names, the holder of its secret and the operator answer it; another responder, a wrong secret and a missing slot are refused alike", () =>
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const handed = yield* Handed
      const id = yield* runs.start(Asked, {})
      yield* runs.await(id, { untilSuspended: true })
      const refusals = yield* Effect.forEach(
        [
          ["first", { responder: "bob" }],
          ["first", "not-the-secret"],
          ["missing", { responder: "alice" }],
          ["missing", "not-the-secret"]
        ] as const,
        ([key, answerer]) => Effect.flip(runs.respond(id, key, answerer, answer))
      )
      expect(refusals.map((r) => r.code)).toEqual(Array(4).fill("ORCHESTRATION_SLOT_FORBIDDEN"))
      expect(new Set(refusals.map((r) => r.message.replace(`"missing"`, `"first"`))).size).toBe(1)
      expect((yield* runs.exportThread(id)).records.filter((r) => r.kind === "DO")).toEqual([])
      const [first] = yield* Ref.get(handed)
      expect(first!.key).toBe("first")
      expect(yield* runs.respond(id, "first", { responder: "alice" }, answer)).toBe("Accepted")
      yield* waitingOn(runs, id, "second")
      expect(yield* runs.respond(id, "second", { operator: true }, { approved: false, note: "no" })).toBe("Accepted")
      expect((yield* runs.await(id)).result).toEqual([true, false])
      // every replay handed the program the same secret for the first slot
      const again = (yield* Ref.get(handed)).filter((slot) => slot.key === "first")
      expect(again.length).toBeGreaterThan(1)
      expect(new Set(again.map(secretOf))).toEqual(new Set([secretOf(first!)]))
      expect((yield* runs.exportThread(id)).slots.map((slot) => slot.responder)).toEqual(["alice", "alice"])
    }).pipe(
      Effect.provide(InMemoryRuns.layer({ definitions: [Asked] }).pipe(Layer.provideMerge(handedLayer))),
      Effect.timeout("20 seconds")
    ))

  it.effect("an accept is refused past the slot's bound (etaSeconds) and past three accepts (kind); the slot stays open and takes the answer", () =>
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const id = yield* runs.start(Asked, {})
      yield* runs.await(id, { untilSuspended: true })
      const alice = { responder: "alice" } as const
      yield* TestClock.adjust("2 seconds")
      const late = yield* Effect.flip(runs.accept(id, "first", alice, 9))
      expect(late.code).toBe("CONFIG_INVALID_REQUEST")
      expect(late.details).toMatchObject({ field: "etaSeconds" })
      expect(late.message).toContain("1970-01-01T00:00:10.000Z")
      // 2 s + 8 s: the bound exactly
      for (let n = 1; n <= Runs.maxAcceptsPerSlot; n++) expect(yield* runs.accept(id, "first", alice, 8)).toBe("Accepted")
      const more = yield* Effect.flip(runs.accept(id, "first", alice, 1))
      expect(more.code).toBe("CONFIG_INVALID_REQUEST")
      expect(more.details).toMatchObject({ field: "kind" })
      const [slot] = (yield* runs.exportThread(id)).slots
      expect(slot).toMatchObject({ status: "open", deadline: 10_000, latest: 10_000, accepts: 3 })
      // past the first deadline (5 s), before the accepted one
      yield* TestClock.adjust("6 seconds")
      expect(yield* runs.respond(id, "first", alice, answer)).toBe("Accepted")
    }).pipe(
      Effect.provide(InMemoryRuns.layer({ definitions: [Asked] }).pipe(Layer.provideMerge(handedLayer))),
      Effect.timeout("20 seconds")
    ))
})

describe("slot secrets at rest", () => {
  /** Every byte of the state file and its WAL, as text (what anyone reading the file finds). */
  const stateText = (db: string) =>
    [db, `${db}-wal`].filter((file) => fs.existsSync(file)).map((file) => fs.readFileSync(file).toString("latin1")).join("")
  /** Every row of every table, as JSON. */
  const rows = (db: string) => {
    const sqlite = new Database(db)
    try {
      const tables = sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>
      return JSON.stringify(tables.map(({ name }) => sqlite.prepare(`SELECT * FROM "${name}"`).all()), (_, v) =>
        typeof v === "object" && v !== null && ArrayBuffer.isView(v) ? Buffer.from(v.buffer).toString("latin1") : v)
    } finally {
      sqlite.close()
    }
  }

  it.live("no secret is in the state file, the engine's journal included, before or after a restart; the secret handed out still opens the slot after it", () => {
    const { db, dir } = tempCase("secrets-at-rest")
    const open = <A, E>(handed: Ref.Ref<ReadonlyArray<Slot>>, body: Effect.Effect<A, E, Runs.Runs>) =>
      Effect.provide(
        body,
        SqliteRuns.layer({ filename: db, definitions: [Asked] }).pipe(Layer.provide(Layer.succeed(Handed, handed)))
      )
    return Effect.gen(function* () {
      const before = yield* Ref.make<ReadonlyArray<Slot>>([])
      const id = yield* open(before, Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Asked, {}, { owner: "alice" })
        yield* runs.await(id, { untilSuspended: true })
        return id
      }))
      const [first] = yield* Ref.get(before)
      const secret = secretOf(first!)
      expect(secret.length).toBeGreaterThan(20)
      expect(stateText(db)).not.toContain(secret)
      expect(rows(db)).not.toContain(secret)
      // a restart re-drives the run: the journal has no secret to hand out, so the program gets a new one; both open the slot
      const after = yield* Ref.make<ReadonlyArray<Slot>>([])
      yield* open(after, Effect.gen(function* () {
        const runs = yield* Runs.Runs
        // the re-driven run replays up to its slot again
        const redrawn = yield* handedOut(after, "first")
        expect(secretOf(redrawn)).not.toBe(secret)
        expect(yield* runs.accept(id, "first", secretOf(redrawn), 0)).toBe("Accepted")
        const wrong = yield* Effect.flip(runs.respond(id, "first", "not-the-secret", { approved: true, note: "" }))
        expect(wrong.code).toBe("ORCHESTRATION_SLOT_FORBIDDEN")
        expect(yield* runs.respond(id, "first", secret, { approved: true, note: "by the link sent before the restart" })).toBe("Accepted")
        const second = yield* handedOut(after, "second")
        expect(yield* runs.respond(id, "second", secretOf(second), { approved: true, note: "" })).toBe("Accepted")
        expect((yield* runs.await(id)).status).toBe("completed")
        const text = stateText(db) + rows(db)
        for (const s of [secret, ...(yield* Ref.get(after)).map(secretOf)]) expect(text).not.toContain(s)
      }))
    }).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)
})
