/**
 * Durable runs on a SQLite file, in this process: the owner file, slots on the
 * cluster engine, and the rows a run leaves (bounded per step, removed by prune).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as SqlClient from "@effect/sql/SqlClient"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as Duration from "effect/Duration"
import * as Engine from "../src/layers/durable/Engine.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import { answerShape, Durable } from "../src/services/Durable.js"
import type { Slot } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Probe, Reference, secretOf } from "./support/durable-runs.js"
import { tempCase } from "./support/durable-spawn.js"

const Steps = Runs.define({
  name: "steps",
  payload: Schema.Struct({ n: Schema.Number }),
  success: Schema.Number,
  program: ({ n }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      let total = 0
      for (let i = 0; i < n; i++) total += yield* durable.step(`s${i}`, Schema.Number, Effect.succeed(i))
      return total
    })
})

// the first attempt at its step never ends (the process stops while it runs); the next returns 7
let drainAttempts = 0
const Stuck = Runs.define({
  name: "stuck",
  payload: Schema.Struct({}),
  success: Schema.Number,
  program: () =>
    Effect.flatMap(Durable, (durable) =>
      durable.step("wait", Schema.Number, Effect.suspend(() => ++drainAttempts === 1 ? Effect.never : Effect.succeed(7)))
    )
})

// another execution of the run (a second runner during a takeover) records the step while this one computes it
const Raced = Runs.define({
  name: "raced",
  payload: Schema.Struct({ db: Schema.String }),
  success: Schema.Number,
  program: ({ db }) =>
    Effect.flatMap(Durable, (durable) =>
      durable.step("answer", Schema.Number, Effect.sync(() => {
        const other = new Database(db, { readonly: false })
        try {
          other.prepare(`INSERT INTO pagantic_records (run_id, kind, key, at, body) VALUES ('raced', 'DO', 'answer', 0, '{"value":41}')`).run()
        } finally {
          other.close()
        }
        return 1
      }))
    )
})

const inFile = <A, E>(db: string, body: (slots: Ref.Ref<ReadonlyArray<Slot>>) => Effect.Effect<A, E, Runs.Runs>) =>
  Effect.gen(function* () {
    const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
    const probe = Layer.succeed(Probe, {
      work: (_, value) => Effect.succeed(value),
      between: () => Effect.void,
      notify: (slot) => Ref.update(slots, (s) => [...s, slot])
    })
    return yield* body(slots).pipe(
      Effect.provide(SqliteRuns.layer({ filename: db, definitions: [Reference, Approval, Steps, Raced] }).pipe(Layer.provide(probe)))
    )
  })

interface ReadOnlyDatabase {
  readonly prepare: (sql: string) => { readonly all: () => Array<unknown>; readonly get: () => unknown; readonly run: () => unknown }
  readonly close: () => void
}
// better-sqlite3 (the driver under @effect/sql-sqlite-node) ships no types; this is the part used here
const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string, options: { readonly readonly: boolean }) => ReadOnlyDatabase

const rowCounts = (db: string) => {
  const sqlite = new Database(db, { readonly: true })
  try {
    const tables = sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string }>
    return Object.fromEntries(tables.map(({ name }) => [name, (sqlite.prepare(`SELECT COUNT(*) AS n FROM "${name}"`).get() as { n: number }).n]))
  } finally {
    sqlite.close()
  }
}
const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0)

describe("SqliteRuns", () => {
  it.live("the state file is created 0600; a second layer on it fails fast naming the owning process", () => {
    const { db, dir } = tempCase("sql-owner")
    return inFile(db, () =>
      Effect.gen(function* () {
        expect(fs.statSync(db).mode & 0o777).toBe(0o600)
        const second = yield* Effect.exit(Effect.provide(Runs.Runs, SqliteRuns.layer({ filename: db, definitions: [Steps] })))
        expect(Exit.isFailure(second)).toBe(true)
        const failure = Exit.isFailure(second) ? second.cause : undefined
        expect(String(failure)).toContain(`owned by process ${process.pid}`)
      })
    ).pipe(
      Effect.zipRight(
        // released with the first layer: a new one opens the file
        Effect.provide(Effect.asVoid(Runs.Runs), SqliteRuns.layer({ filename: db, definitions: [Steps] }))
      ),
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a slot answered in time and one left to expire, on the cluster engine", () => {
    const { db, dir } = tempCase("sql-slots")
    return inFile(db, (slots) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const answered = yield* runs.start(Approval, { slaMillis: 60_000 })
        const expires = yield* runs.start(Approval, { slaMillis: 1_500 })
        yield* runs.await(answered, { untilSuspended: true })
        yield* runs.await(expires, { untilSuspended: true })
        const slot = (yield* Ref.get(slots)).find((s) => s.runId === answered)!
        expect(yield* runs.respond(answered, slot.key, secretOf(slot), { approved: false, note: "no" })).toBe("Accepted")
        expect((yield* runs.await(answered)).result).toMatchObject({ outcome: "rejected", note: "no" })
        const expired = yield* runs.await(expires)
        expect(expired.result).toMatchObject({ outcome: "expired" })
        const other = (yield* Ref.get(slots)).find((s) => s.runId === expires)!
        const late = yield* Effect.flip(runs.respond(expires, other.key, secretOf(other), { approved: true, note: "late" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a step writes one row, and prune removes a completed run's rows", () => {
    const { db, dir } = tempCase("sql-rows")
    return inFile(db, () =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const empty = total(rowCounts(db))
        const small = yield* runs.start(Steps, { n: 5 })
        yield* runs.await(small)
        const afterSmall = total(rowCounts(db))
        const large = yield* runs.start(Steps, { n: 25 })
        yield* runs.await(large)
        const afterLarge = total(rowCounts(db))
        const perStep = (afterLarge - afterSmall - (afterSmall - empty)) / 20
        // one DO record in the run's thread, nothing in the engine's tables
        expect(perStep).toBe(1)
        expect(yield* runs.prune({ olderThan: 0 })).toBe(2)
        const counts = rowCounts(db)
        expect(counts.pagantic_runs).toBe(0)
        expect(counts.pagantic_records).toBe(0)
        expect(total(counts)).toBeLessThanOrEqual(empty + 2)
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("retention: a process started with PAGANTIC_RETENTION_DAYS prunes the runs that ended before it; unset keeps them", () => {
    const { db, dir } = tempCase("sql-retention")
    const opened = (env: Record<string, string>) =>
      Layer.provide(
        SqliteRuns.layerConfig({ definitions: [Reference, Approval, Steps], filename: Config.succeed(db) }),
        Layer.succeed(Probe, { work: (_, value) => Effect.succeed(value), between: () => Effect.void, notify: () => Effect.void })
      ).pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))
    const listed = (env: Record<string, string>) =>
      Effect.scoped(Effect.flatMap(Runs.Runs, (runs) => runs.list()).pipe(Effect.provide(opened(env))))
    return Effect.gen(function* () {
      const id = yield* Effect.scoped(
        Effect.flatMap(Runs.Runs, (runs) => Effect.tap(runs.start(Steps, { n: 2 }), (id) => runs.await(id))).pipe(
          Effect.provide(opened({}))
        )
      )
      expect((yield* listed({})).map((r) => r.id)).toEqual([id])
      // ended a moment ago: kept by a retention of a day, gone with a retention of a millisecond
      expect((yield* listed({ PAGANTIC_RETENTION_DAYS: "1" })).map((r) => r.id)).toEqual([id])
      yield* Effect.sleep("5 millis")
      expect(yield* listed({ PAGANTIC_RETENTION_DAYS: String(1 / 86_400_000) })).toEqual([])
      const bad = yield* Effect.exit(listed({ PAGANTIC_RETENTION_DAYS: "-3" }))
      expect(Exit.isFailure(bad) && JSON.stringify(bad.cause)).toContain("PAGANTIC_RETENTION_DAYS")
    }).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a recorded value the code no longer reads fails the run with ORCHESTRATION_REPLAY_DIVERGED naming the record", () => {
    const { db, dir } = tempCase("sql-diverged")
    const Go = answerShape("go", Schema.Struct({}))
    const version = <A, I>(schema: Schema.Schema<A, I>, value: A) =>
      Runs.define({
        name: "counted",
        payload: Schema.Struct({}),
        success: Schema.String,
        answers: [Go],
        program: () =>
          Effect.gen(function* () {
            const durable = yield* Durable
            const counted = yield* durable.step("count", schema, Effect.succeed(value))
            yield* durable.awaitAnswer(Go, yield* durable.slot(Go, { sla: "1 hour" }))
            return String(counted)
          })
      })
    const open = <A, E>(definition: Runs.AnyDefinition, body: Effect.Effect<A, E, Runs.Runs>) =>
      // the versions' programs need nothing but Durable
      Effect.provide(body, SqliteRuns.layer({ filename: db, definitions: [definition] }) as Layer.Layer<Runs.Runs, Runs.RunsError>)
    return Effect.gen(function* () {
      const first = version(Schema.Number, 41)
      const id = yield* open(
        first,
        Effect.flatMap(Runs.Runs, (runs) =>
          Effect.flatMap(runs.start(first, {}), (id) => Effect.as(runs.await(id, { untilSuspended: true }), id)))
      )
      // the same definition, its step now recording strings: the restart replays the run
      const second = version(Schema.String, "forty-one")
      const info = yield* open(second, Effect.flatMap(Runs.Runs, (runs) => runs.await(id)))
      expect(info.status).toBe("failed")
      expect(info.error?.code).toBe("ORCHESTRATION_REPLAY_DIVERGED")
      expect(info.error?.message).toContain('step "count"')
    }).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a completed thread exported and imported into an empty store re-drives to the same KNOW without running a step", () => {
    const from = tempCase("sql-export")
    const to = tempCase("sql-import")
    return Effect.gen(function* () {
      const threads = yield* inFile(from.db, (slots) =>
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const reference = yield* runs.start(Reference, { seed: 9 })
          yield* runs.await(reference)
          const approval = yield* runs.start(Approval, { slaMillis: 60_000 })
          yield* runs.await(approval, { untilSuspended: true })
          const slot = (yield* Ref.get(slots))[0]!
          yield* runs.respond(approval, slot.key, secretOf(slot), { approved: true, note: "exported" })
          yield* runs.await(approval)
          return [yield* runs.exportThread(reference), yield* runs.exportThread(approval)] as const
        })
      )
      const encoded = JSON.parse(JSON.stringify(yield* Effect.forEach(threads, (t) => Schema.encode(Runs.Thread)(t))))
      const work = yield* Ref.make(0)
      const counting = Layer.succeed(Probe, {
        work: (_, value) => Effect.as(Ref.update(work, (n) => n + 1), value),
        between: () => Effect.void,
        notify: () => Ref.update(work, (n) => n + 1)
      })
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        for (const [index, thread] of (yield* Schema.decodeUnknown(Schema.Array(Runs.Thread))(encoded)).entries()) {
          const id = yield* runs.importThread(thread)
          const info = yield* runs.await(id)
          const know = (exported: Runs.Thread) => exported.records.find((r) => r.kind === "KNOW")?.body
          expect(info.status).toBe("completed")
          expect(info.result).toEqual(know(threads[index]!))
          expect(know(yield* runs.exportThread(id))).toEqual(know(threads[index]!))
        }
        expect(yield* Ref.get(work)).toBe(0)
        const again = yield* Effect.flip(runs.importThread(threads[0]))
        expect(again.message).toContain("exists")
      }).pipe(
        Effect.provide(SqliteRuns.layer({ filename: to.db, definitions: [Reference, Approval] }).pipe(Layer.provide(counting)))
      )
    }).pipe(
      Effect.ensuring(Effect.sync(() => {
        fs.rmSync(from.dir, { recursive: true, force: true })
        fs.rmSync(to.dir, { recursive: true, force: true })
      })),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a store that stays locked is ORCHESTRATION_STATE_UNAVAILABLE after the bounded retry, and the runs go on when it is back", () => {
    const { db, dir } = tempCase("sql-locked")
    return inFile(db, () =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const intruder = new Database(db, { readonly: false })
        intruder.prepare("BEGIN EXCLUSIVE").run()
        const started = Date.now()
        const down = yield* Effect.flip(runs.start(Steps, { n: 2 }))
        expect(down.code).toBe("ORCHESTRATION_STATE_UNAVAILABLE")
        expect(down.retryable).toBe(true)
        expect(down.message).toContain("record run")
        // bounded: the driver's busy wait (5 s) per attempt, four attempts
        expect(Date.now() - started).toBeLessThan(40_000)
        intruder.prepare("COMMIT").run()
        intruder.close()
        const info = yield* runs.await(yield* runs.start(Steps, { n: 2 }))
        expect(info.status).toBe("completed")
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it("closing waits 15 seconds by default for a run inside a step (the cluster's entity termination timeout)", () => {
    expect(Duration.toMillis(Engine.defaultDrain)).toBe(15_000)
  })

  it.effect("the store syncs every commit by default (synchronous FULL in WAL mode); \"normal\" only at checkpoints", () =>
    Effect.gen(function* () {
      const { db, dir } = tempCase("sql-synchronous")
      const read = (synchronous?: SqliteRuns.Synchronous) =>
        Effect.scoped(Effect.flatMap(Layer.build(SqliteRuns.clientLayer(db, synchronous)), (context) =>
          Effect.gen(function* () {
            const sql = Context.get(context, SqlClient.SqlClient)
            const [mode] = yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`
            const [sync] = yield* sql<{ synchronous: number }>`PRAGMA synchronous`
            return [mode!.journal_mode, sync!.synchronous] as const
          })))
      expect(yield* read()).toEqual(["wal", 2])
      expect(yield* read("normal")).toEqual(["wal", 1])
      expect(yield* read("full")).toEqual(["wal", 2])
      fs.rmSync(dir, { recursive: true, force: true })
    }))

  it.effect("PAGANTIC_DRAIN_SECONDS: unset is the 15 s default, seconds may be fractional, a negative or non-number value names the variable", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Engine.drainConfig.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
      expect(Duration.toMillis(yield* read({}))).toBe(15_000)
      expect(Duration.toMillis(yield* read({ PAGANTIC_DRAIN_SECONDS: "2.5" }))).toBe(2_500)
      expect(Duration.toMillis(yield* read({ PAGANTIC_DRAIN_SECONDS: "0" }))).toBe(0)
      for (const bad of ["-1", "soon"]) {
        const failure = yield* Effect.flip(read({ PAGANTIC_DRAIN_SECONDS: bad }))
        expect(failure.code).toBe("CONFIG_INVALID_REQUEST")
        expect(failure.message).toContain("PAGANTIC_DRAIN_SECONDS")
        expect(failure.details["variable"]).toBe("PAGANTIC_DRAIN_SECONDS")
      }
    }))

  it.live("closing waits `drain` for a run inside a step, then interrupts it; the next start re-drives the run to its end", () => {
    const { db, dir } = tempCase("sql-drain")
    const open = Effect.map(
      Layer.build(SqliteRuns.layer({ filename: db, definitions: [Stuck], drain: "1 second" })),
      Context.get(Runs.Runs)
    )
    return Effect.gen(function* () {
      drainAttempts = 0
      const started = yield* Effect.scoped(
        Effect.gen(function* () {
          const runs = yield* open
          yield* runs.start(Stuck, {}, { id: "stuck" })
          yield* Effect.sleep("300 millis").pipe(Effect.repeat({ until: () => drainAttempts > 0, times: 50 }))
          return Date.now()
        })
      )
      const closed = Date.now() - started
      expect(drainAttempts).toBe(1)
      expect(closed).toBeGreaterThanOrEqual(1_000)
      expect(closed).toBeLessThan(8_000)
      const info = yield* Effect.scoped(Effect.flatMap(open, (runs) => runs.await("stuck")))
      expect(info).toMatchObject({ status: "completed", result: 7 })
      expect(drainAttempts).toBe(2)
    }).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)

  it.live("a step another execution of the run recorded first ends as that record says (its own result is dropped)", () => {
    const { db, dir } = tempCase("sql-raced")
    return inFile(db, () =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const info = yield* runs.await(yield* runs.start(Raced, { db }, { id: "raced" }))
        expect(info).toMatchObject({ status: "completed", result: 41 })
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))),
      Effect.timeout("60 seconds")
    )
  }, 90_000)
})
