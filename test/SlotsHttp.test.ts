/**
 * Human slots over HTTP on a real SQLite state file (issue #42): `pagantic serve`
 * as test/support/server.ts starts it on 127.0.0.1, its queries durable runs that
 * ask alice (a human responder), every caller a real HTTP client with its own key.
 *
 * - One refusal for every slot the caller may not answer: a slot that does not
 *   exist, a slot with a wrong secret, a slot of another principal's run, a run
 *   that does not exist and a run of a definition this server does not have (one
 *   another process left in the file) get the same status, code, message and
 *   details, and record nothing.
 * - Accepts are bounded: `{ kind: "accept" }` at most `Runs.maxAcceptsPerSlot`
 *   times per slot and never past the query's latency bound, an
 *   `infer.accept.v1` answer at most `Orchestration.maxAccepts` times per call; past
 *   either, 422 naming the field, and the slot still takes the answer.
 * - A slot's secret reaches its webhook only: no table of the state file holds
 *   it (every text and blob column, and the file's bytes), while it opens the
 *   slot (Postgres: test/PostgresRuns).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import type * as Http from "../src/adapters/Http.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as NotificationChannels from "../src/layers/NotificationChannels.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import * as Notification from "../src/programs/query/Notification.js"
import { Notifications } from "../src/services/Notifications.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"
import { tempCase } from "./support/durable-spawn.js"
import * as Loopback from "./support/loopback.js"
import type { Reply } from "./support/server.js"
import { post, send, serve } from "./support/server.js"

const humans: ReadonlyArray<Responder> = [
  { id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 60 } }
]

const responders = Layer.merge(Layer.orDie(InMemoryResponders.layer({ responders: humans })), LexicalReranker.layer())

/** A query asking alice, answered within 600 s (its latency bound). */
const humanQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "actor", did: "did:example:alice" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
  max_latency_secs: 600
}

const research = { kind: "submit", answer: { kind: "core.classification.v1", category: "research" } }

const keys: NonNullable<Http.Options["keys"]> = [
  { name: "carol", role: "client", key: Redacted.make("k-carol") },
  { name: "bob", role: "client", key: Redacted.make("k-bob") },
  { name: "alice", role: "responder", responder: "alice", key: Redacted.make("k-alice") }
]
const as = (name: "carol" | "bob" | "alice") => ({ authorization: `Bearer k-${name}` })

/** The server on `db`, its queries telling alice through `notify`. */
const serveOn = (db: string, notify: NonNullable<Orchestration.Options["notify"]>) => {
  const queries = Orchestration.definition({ notify })
  return serve({
    engine: ScriptedEngine.layer([]),
    responders,
    facade: { queries: { definition: queries } },
    runs: SqliteRuns.layer({ filename: db, definitions: [queries] }),
    http: { keys }
  })
}

const runOf = (url: string, id: string) =>
  Effect.map(send(`${url}/v1/runs/${id}`, { headers: as("carol") }), (reply) => reply.json as { status: string; waitingOn?: string })

/** `effect` again every 20 ms until `done` holds of its value, bounded (10 s); that value. */
const until = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean) =>
  Effect.zipLeft(effect, Effect.sleep("20 millis")).pipe(Effect.repeat({ until: done }), Effect.timeout("10 seconds"))

/** Until the run is suspended on a slot other than `after` (or has ended: a failed expectation); the slot. */
const waitsOn = (url: string, id: string, after?: string) =>
  Effect.map(
    until(runOf(url, id), (run) =>
      (run.status === "suspended" && run.waitingOn !== undefined && run.waitingOn !== after) ||
      !["running", "suspended"].includes(run.status)),
    (run) => {
      expect(run, `run ${id} after slot ${after}`).toMatchObject({ status: "suspended" })
      return run.waitingOn!
    }
  )

/** Starts the query as `who` over HTTP; its run id once it waits on alice's slot, and that slot. */
const ask = (url: string, who: "carol" | "bob") =>
  Effect.gen(function* () {
    const started = yield* post(`${url}/v1/queries`, humanQuery, as(who))
    expect(started.status, started.text).toBe(202)
    const runId: string = started.json.query.runId
    const run = yield* until(
      Effect.map(send(`${url}/v1/runs/${runId}`, { headers: as(who) }), (reply) => reply.json as { status: string; waitingOn?: string }),
      (run) => run.status === "suspended" && run.waitingOn !== undefined
    )
    return { runId, slot: run.waitingOn! }
  })

const slotUrl = (url: string, runId: string, slot: string) => `${url}/v1/runs/${encodeURIComponent(runId)}/slots/${encodeURIComponent(slot)}`

/** A refusal with what names the request taken out (its request id, run id and slot key). */
const shapeOf = (reply: Reply, runId: string, slot: string) => {
  const { requestId: _, ...rest } = reply.json ?? {}
  return { status: reply.status, body: JSON.stringify(rest).replaceAll(runId, "<run>").replaceAll(slot, "<slot>") }
}

interface Database {
  readonly prepare: (sql: string) => { readonly all: () => Array<Record<string, unknown>> }
  readonly close: () => void
}
// better-sqlite3 (the driver under @effect/sql-sqlite-node) ships no types; this is the part used here
const Database = createRequire(import.meta.url)("better-sqlite3") as new (file: string, options?: { readonly readonly?: boolean }) => Database

/** Every text and blob value of every table of the SQLite file `db`, as `table.column: value` lines. */
const cellsOf = (db: string): ReadonlyArray<string> => {
  const sqlite = new Database(db, { readonly: true })
  try {
    const tables = sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all().map((row) => String(row.name))
    return tables.flatMap((table) =>
      sqlite.prepare(`SELECT * FROM "${table}"`).all().flatMap((row) =>
        Object.entries(row).flatMap(([column, value]) =>
          typeof value === "string"
            ? [`${table}.${column}: ${value}`]
            : value instanceof Uint8Array
            ? [`${table}.${column}: ${Buffer.from(value).toString("latin1")}`]
            : [])))
  } finally {
    sqlite.close()
  }
}

/** The bytes of the state file and its WAL, as text (what anyone reading the files finds, free pages included). */
const bytesOf = (db: string) =>
  [db, `${db}-wal`].filter((file) => fs.existsSync(file)).map((file) => fs.readFileSync(file).toString("latin1")).join("")

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

const noNotify: NonNullable<Orchestration.Options["notify"]> = () => Effect.void

describe("human slots over HTTP on a SQLite state file", () => {
  it.scopedLive("a missing slot, a wrong secret, another principal's run, a missing run and a run this server cannot run are one refusal; nothing is recorded", () => {
    const { db, dir } = tempCase("slots-refused")
    return Effect.gen(function* () {
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
      // another process left a run of a definition this server does not have, waiting on alice
      const elsewhere = Orchestration.definition({ name: "elsewhere.query", notify: noNotify })
      const foreign = yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, elsewhere, humanQuery as never, { owner: "carol" })
        const info = yield* runs.await(id, { untilSuspended: true })
        return { runId: id, slot: info.waitingOn! }
      }).pipe(
        Effect.provide(SqliteRuns.layer({ filename: db, definitions: [elsewhere] }).pipe(Layer.provide(responders))),
        Effect.scoped
      )
      const { url } = yield* serveOn(db, noNotify)
      const carols = yield* ask(url, "carol")
      const bobs = yield* ask(url, "bob")
      const wrong = "w".repeat(32)
      const cases: ReadonlyArray<readonly [string, string, string, Record<string, unknown>]> = [
        ["a slot that does not exist", carols.runId, "no-such-slot", { secret: wrong, response: research }],
        ["a slot with a wrong secret", carols.runId, carols.slot, { secret: wrong, response: research }],
        ["a slot of another principal's run", bobs.runId, bobs.slot, { secret: wrong, response: research }],
        ["a slot of another principal's run, no secret", bobs.runId, bobs.slot, { response: research }],
        ["a run that does not exist", "no-such-run", carols.slot, { secret: wrong, response: research }],
        ["a run of a definition this server does not have", foreign.runId, foreign.slot, { secret: wrong, response: research }],
        ["an accept with a wrong secret", carols.runId, carols.slot, { secret: wrong, response: { kind: "accept", etaSeconds: 60 } }],
        ["an accept of a run this server cannot run", foreign.runId, foreign.slot, { secret: wrong, response: { kind: "accept", etaSeconds: 60 } }],
        ["a decline of a run this server cannot run", foreign.runId, foreign.slot, { secret: wrong, response: { kind: "decline", reason: "other" } }]
      ]
      const refusals: Array<{ readonly name: string; readonly status: number; readonly body: string }> = []
      for (const [name, runId, slot, body] of cases) {
        const reply = yield* post(slotUrl(url, runId, slot), body, as("carol"))
        refusals.push({ name, ...shapeOf(reply, runId, slot) })
        expect(reply.json?.error, `${name}: ${reply.text}`).toMatchObject({ code: "ORCHESTRATION_SLOT_FORBIDDEN", details: { field: "slot" } })
      }
      const first = refusals[0]!
      expect(first.status).toBe(404)
      for (const refusal of refusals) expect({ ...refusal, name: first.name }, refusal.name).toEqual(first)
      // nothing recorded: each run still waits on its slot, which its responder then answers
      expect(yield* runOf(url, carols.runId)).toMatchObject({ status: "suspended", waitingOn: carols.slot })
      const answered = yield* post(slotUrl(url, carols.runId, carols.slot), { response: research }, as("alice"))
      expect(answered.status, answered.text).toBe(200)
      const bobsRun = yield* send(`${url}/v1/runs/${bobs.runId}`, { headers: as("bob") })
      expect(bobsRun.json).toMatchObject({ status: "suspended", waitingOn: bobs.slot })
    }).pipe(Effect.timeout("60 seconds"))
  }, 90_000)

  it.scopedLive("accepts are bounded: per slot and by the query's latency bound ({ kind: accept }), per call (infer.accept.v1); past either 422 naming the field, the slot kept, and the answer still commits", () => {
    const { db, dir } = tempCase("slots-accepts")
    return Effect.gen(function* () {
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
      const { url } = yield* serveOn(db, noNotify)
      const { runId, slot: first } = yield* ask(url, "carol")
      const answer = (slot: string, response: unknown) => post(slotUrl(url, runId, slot), { response }, as("alice"))
      const refusedAt = (reply: Reply, field: string) => {
        expect(reply.status, reply.text).toBe(422)
        expect(reply.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { field } })
        expect(reply.json.error.message.startsWith(`${field}: `), reply.json.error.message).toBe(true)
      }
      const kept = (slot: string) => Effect.map(runOf(url, runId), (run) => expect(run).toMatchObject({ status: "suspended", waitingOn: slot }))

      const noEta = yield* answer(first, { kind: "accept" })
      expect(noEta.status, noEta.text).toBe(400)
      expect(noEta.json.error.details).toMatchObject({ field: "response.etaSeconds" })
      // the query's latency bound is 600 s from when the slot opened
      refusedAt(yield* answer(first, { kind: "accept", etaSeconds: 3600 }), "response.etaSeconds")
      for (let n = 1; n <= Runs.maxAcceptsPerSlot; n++) {
        const accepted = yield* answer(first, { kind: "accept", etaSeconds: 60 })
        expect(accepted.status, accepted.text).toBe(200)
      }
      refusedAt(yield* answer(first, { kind: "accept", etaSeconds: 60 }), "response.kind")
      yield* kept(first)

      const inferAccept = (eta: number) => ({ kind: "submit", answer: { kind: "infer.accept.v1", eta_seconds: eta } })
      refusedAt(yield* answer(first, inferAccept(3600)), "response.answer.eta_seconds")
      let slot = first
      for (let n = 1; n <= Orchestration.maxAccepts; n++) {
        const accepted = yield* answer(slot, inferAccept(60))
        expect(accepted.status, `accept ${n}: ${accepted.text}`).toBe(200)
        slot = yield* waitsOn(url, runId, slot)
      }
      const more = yield* answer(slot, inferAccept(60))
      refusedAt(more, "response.answer.kind")
      expect(more.json.error.message).toContain(`(${Orchestration.maxAccepts})`)
      yield* kept(slot)

      const submitted = yield* answer(slot, research)
      expect(submitted.status, submitted.text).toBe(200)
      const done = yield* until(runOf(url, runId), (run) => run.status !== "suspended" && run.status !== "running")
      expect(done).toMatchObject({ status: "completed", result: { kind: "KNOW", body: { category: "research" } } })
    }).pipe(Effect.timeout("90 seconds"))
  }, 120_000)

  it.scopedLive("a slot's secret goes to its webhook only: no table of the state file holds it (nor the file's bytes), before and after it answers the slot", () => {
    const { db, dir } = tempCase("slots-secrets")
    return Effect.gen(function* () {
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
      const hook = yield* Loopback.make((_, response) => {
        response.statusCode = 204
        response.end()
      })
      /** The notices alice's webhook received: the slot and its secret. */
      const received = () =>
        hook.requests.map((request) => request.json as { readonly run_id: string; readonly slot: string; readonly secret: string })
      const secrets = Effect.gen(function* () {
        const channels = yield* Layer.build(
          NotificationChannels.layer({ responders: { alice: { webhook: { url: hook.url, secret: Redacted.make("hook-key") } } } }).pipe(
            Layer.provide(NodeHttpClient.layerUndici)
          )
        )
        const { url } = yield* serveOn(db, Notification.notifyThrough(Context.get(channels, Notifications)))
        const { runId, slot: first } = yield* ask(url, "carol")
        const told = yield* until(Effect.sync(received), (all) => all.length === 1)
        expect(told[0]).toMatchObject({ run_id: runId, slot: first })
        const secret = told[0]!.secret
        expect(secret.length).toBeGreaterThanOrEqual(32)
        const cells = cellsOf(db)
        expect(cells.filter((cell) => cell.includes(secret))).toEqual([])
        expect(bytesOf(db)).not.toContain(secret)
        // the table of slots was read: its hash is there
        expect(cells.some((cell) => cell.startsWith("pagantic_slots.secret_hash: ") && cell.includes(sha256(secret)))).toBe(true)
        // bob holds the link: he accepts with its secret, then reopens the call (a new slot, a new notice)
        const link = (slot: string, secretOf: string, response: unknown) =>
          post(slotUrl(url, runId, slot), { secret: secretOf, response }, as("bob"))
        expect((yield* link(first, secret, { kind: "accept", etaSeconds: 60 })).status).toBe(200)
        const reopened = yield* link(first, secret, { kind: "submit", answer: { kind: "infer.accept.v1", eta_seconds: 60 } })
        expect(reopened.status, reopened.text).toBe(200)
        const next = yield* waitsOn(url, runId, first)
        const again = yield* until(Effect.sync(received), (all) => all.length === 2)
        expect(again[1]).toMatchObject({ run_id: runId, slot: next })
        const answered = yield* link(next, again[1]!.secret, research)
        expect(answered.status, answered.text).toBe(200)
        const done = yield* until(runOf(url, runId), (run) => run.status === "completed")
        expect(done.status).toBe("completed")
        return again.map((notice) => notice.secret)
      }).pipe(Effect.scoped)
      const all = yield* secrets
      // the server closed: what the file keeps
      const cells = cellsOf(db)
      const bytes = bytesOf(db)
      for (const secret of all) {
        expect(cells.filter((cell) => cell.includes(secret))).toEqual([])
        expect(bytes.includes(secret)).toBe(false)
      }
    }).pipe(Effect.timeout("60 seconds"))
  }, 90_000)
})
