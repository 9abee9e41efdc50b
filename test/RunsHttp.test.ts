/**
 * The durable runs over HTTP (adapters/http/Runs.ts): a real server on 127.0.0.1
 * (port 0) with in-memory Runs of the test definitions (a 6-step reference run,
 * an approval run with a human slot): list, show, the thread as SSE, cancel,
 * answering a slot (404 for a wrong secret from a non-admin, as for a missing slot, with nothing recorded, 422 wrong shape with
 * the slot still open, 422 closed slot, 404 unknown run), and hostile input.
 */
import { describe, expect, it } from "@effect/vitest"
import * as HttpServer from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import type { Slot } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Probe, Reference, secretOf } from "./support/durable-runs.js"
import { post, send } from "./support/server.js"

/** A server with Runs (or without, `runs: false`), its Runs service and the slots its runs opened. */
const serveRuns = (options: { readonly runs?: boolean; readonly http?: Http.Options } = {}) =>
  Effect.gen(function* () {
    const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
    const probe = Layer.succeed(Probe, {
      work: (_step, value) => Effect.succeed(value),
      between: () => Effect.void,
      notify: (slot) => Ref.update(slots, (s) => [...s, slot])
    })
    const runsLayer = InMemoryRuns.layer({ definitions: [Reference, Approval] }).pipe(Layer.provide(probe))
    const server = Http.layer({ port: 0, ...options.http }).pipe(
      Layer.provideMerge(Live.layer({ engine: ScriptedEngine.layer([]) }))
    )
    const context = yield* Layer.build(
      options.runs === false ? server : Layer.provideMerge(server, runsLayer)
    ).pipe(Effect.orDie)
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    const runs = options.runs === false ? undefined : Context.get(context as unknown as Context.Context<Runs.Runs>, Runs.Runs)
    return { url: `http://127.0.0.1:${address.port}`, runs: runs!, slots }
  })

/** An approval run waiting for its human, and the slot it opened. */
const waiting = (runs: Runs.Service, slots: Ref.Ref<ReadonlyArray<Slot>>, id: string) =>
  Effect.gen(function* () {
    yield* runs.start(Approval, { slaMillis: 60_000 }, { id })
    const info = yield* runs.await(id, { untilSuspended: true })
    expect(info.status).toBe("suspended")
    const slot = (yield* Ref.get(slots)).find((s) => s.runId === id)!
    return { slot, secret: secretOf(slot) }
  })

/** A key ring of one admin (the operator) and one client, and their headers. */
const ring: Http.Options = {
  keys: [
    { name: "ops", role: "admin", key: Redacted.make("k-ops") },
    { name: "cli", role: "client", key: Redacted.make("k-cli") }
  ]
}
const admin = { authorization: "Bearer k-ops" }
const client = { authorization: "Bearer k-cli" }

const recordsOf = (runs: Runs.Service, id: string) =>
  Effect.map(runs.exportThread(id), (thread) => thread.records.map((r) => `${r.kind} ${r.key}`))

/** Reads an SSE body as events: `event` (default message), `id`, `data` parsed. */
const parseSse = (text: string) =>
  text.split("\n\n").filter((block) => block.trim() !== "").map((block) => {
    const fields: Record<string, string> = {}
    for (const line of block.split("\n")) {
      const colon = line.indexOf(":")
      if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 1).trimStart()
    }
    return { event: fields.event ?? "message", id: fields.id, data: JSON.parse(fields.data ?? "null") }
  })

describe("Runs over HTTP", () => {
  it.scopedLive("list and show: a completed run with its result; filters and limits checked, unknown run 404", () =>
    Effect.gen(function* () {
      const { runs, url } = yield* serveRuns()
      yield* runs.start(Reference, { seed: 1 }, { id: "ref-a" })
      yield* runs.await("ref-a")
      yield* runs.start(Reference, { seed: 2 }, { id: "ref-b" })
      yield* runs.await("ref-b")

      const all = yield* send(`${url}/v1/runs`)
      expect(all.status).toBe(200)
      expect(all.json.runs.map((r: { id: string }) => r.id).sort()).toEqual(["ref-a", "ref-b"])
      const one = yield* send(`${url}/v1/runs?status=completed&limit=1`)
      expect(one.json.runs).toHaveLength(1)
      expect((yield* send(`${url}/v1/runs?status=suspended`)).json.runs).toEqual([])

      const shown = yield* send(`${url}/v1/runs/ref-a`)
      expect(shown.status).toBe(200)
      expect(shown.json).toMatchObject({ id: "ref-a", definition: "reference", status: "completed" })
      expect(shown.json.result.trail).toHaveLength(6)
      expect(typeof shown.json.createdAt).toBe("string")

      const badStatus = yield* send(`${url}/v1/runs?status=bogus`)
      expect(badStatus.status).toBe(400)
      expect(badStatus.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { field: "status" } })
      const badLimit = yield* send(`${url}/v1/runs?limit=0`)
      expect(badLimit.status).toBe(400)
      expect(badLimit.json.error.details.field).toBe("limit")
      expect((yield* send(`${url}/v1/runs?limit=1&limit=2`)).status).toBe(400)

      const unknown = yield* send(`${url}/v1/runs/nope`)
      expect(unknown.status).toBe(404)
      expect(unknown.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { field: "id" } })
      // past the router's 100 characters a parameter matches no route: a JSON 404 quoting a short excerpt
      const long = yield* send(`${url}/v1/runs/${"x".repeat(300)}`)
      expect(long.status).toBe(404)
      expect(long.json.error.code).toBe("CONFIG_INVALID_REQUEST")
      expect(long.text.length).toBeLessThan(2_000)
      const spaced = yield* send(`${url}/v1/runs/a%20b%0A`)
      expect(spaced.status).toBe(400)
      expect(spaced.json.error.details.field).toBe("id")
    }), 30_000)

  it.scopedLive("events: a completed run's thread as SSE (ids are seqs), then `end`; Last-Event-ID resumes after it", () =>
    Effect.gen(function* () {
      const { runs, url } = yield* serveRuns()
      yield* runs.start(Reference, { seed: 3 }, { id: "ref-e" })
      yield* runs.await("ref-e")
      const reply = yield* send(`${url}/v1/runs/ref-e/events`)
      expect(reply.status).toBe(200)
      expect(reply.headers.get("content-type")).toContain("text/event-stream")
      const events = parseSse(reply.text)
      const records = events.filter((e) => e.event === "message")
      expect(records.map((e) => `${e.data.kind} ${e.data.key}`)).toEqual(yield* recordsOf(runs, "ref-e"))
      expect(records.map((e) => Number(e.id))).toEqual(records.map((e) => e.data.seq))
      expect(events.at(-1)).toMatchObject({ event: "end", data: { id: "ref-e", status: "completed" } })

      const third = records[2]!.data.seq as number
      const resumed = parseSse((yield* send(`${url}/v1/runs/ref-e/events`, { headers: { "last-event-id": String(third) } })).text)
      expect(resumed.filter((e) => e.event === "message").map((e) => e.data.seq)).toEqual(records.slice(3).map((e) => e.data.seq))
      expect((yield* send(`${url}/v1/runs/none/events`)).status).toBe(404)
    }), 30_000)

  it.scopedLive("events follow a live run: the stream stays open while it waits, and ends after the answer commits it", () =>
    Effect.gen(function* () {
      const { runs, slots, url } = yield* serveRuns()
      const { secret } = yield* waiting(runs, slots, "live-1")
      const stream = yield* Effect.fork(send(`${url}/v1/runs/live-1/events`, { timeoutMs: 20_000 }))
      yield* Effect.sleep("300 millis")
      const answered = yield* post(`${url}/v1/runs/live-1/slots/review`, {
        secret,
        response: { kind: "submit", answer: { approved: true, note: "fine" } }
      })
      expect(answered.status).toBe(200)
      const events = parseSse((yield* stream.await.pipe(Effect.flatten)).text)
      expect(events.some((e) => e.event === "message" && e.data.kind === "KNOW")).toBe(true)
      expect(events.at(-1)).toMatchObject({ event: "end", data: { status: "completed", result: { outcome: "approved", note: "fine" } } })
    }), 30_000)

  it.scopedLive("respond: a wrong secret from a client is 404 and records nothing; a wrong shape is 422 and the slot stays open; the answer commits; again is 422 SLOT_CLOSED", () =>
    Effect.gen(function* () {
      const { runs, slots, url } = yield* serveRuns({ http: ring })
      const { secret } = yield* waiting(runs, slots, "appr-1")
      const before = yield* recordsOf(runs, "appr-1")
      const at = `${url}/v1/runs/appr-1/slots/review`

      const forbidden = yield* post(at, { secret: "not-it", response: { kind: "submit", answer: { approved: true, note: "x" } } }, client)
      expect(forbidden.status).toBe(404)
      expect(forbidden.json.error).toMatchObject({ code: "ORCHESTRATION_SLOT_FORBIDDEN", retryable: false })
      expect(forbidden.text).not.toContain(secret)
      expect(yield* recordsOf(runs, "appr-1")).toEqual(before)
      expect((yield* runs.poll("appr-1")).status).toBe("suspended")

      const shape = yield* post(at, { secret, response: { kind: "submit", answer: { approved: "yes" } } }, client)
      expect(shape.status).toBe(422)
      expect(shape.json.error.code).toBe("CONFIG_INVALID_REQUEST")
      expect(shape.json.error.message).toContain("approved")
      expect(yield* recordsOf(runs, "appr-1")).toEqual(before)
      expect((yield* runs.poll("appr-1")).waitingOn).toBe("review")

      const ok = yield* post(at, { secret, response: { kind: "submit", answer: { approved: true, note: "ship it" } } }, client)
      expect(ok.status).toBe(200)
      expect(ok.json.outcome).toBe("Accepted")
      const done = yield* runs.await("appr-1")
      expect(done.result).toMatchObject({ outcome: "approved", note: "ship it" })

      const late = yield* post(at, { secret, response: { kind: "submit", answer: { approved: false, note: "late" } } }, client)
      expect(late.status).toBe(422)
      expect(late.json.error.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      const unknownRun = yield* post(`${url}/v1/runs/nope/slots/review`, { secret, response: { kind: "decline", reason: "other" } }, client)
      expect(unknownRun.status).toBe(404)
      // the operator answers any open slot without its secret; this one is closed
      const operator = yield* post(at, { response: { kind: "decline", reason: "other" } }, admin)
      expect(operator.json.error.code).toBe("ORCHESTRATION_SLOT_CLOSED")
    }), 30_000)

  it.scopedLive("respond: accept moves the deadline, decline closes the slot with its reason", () =>
    Effect.gen(function* () {
      const { runs, slots, url } = yield* serveRuns()
      const { secret } = yield* waiting(runs, slots, "appr-2")
      const accepted = yield* post(`${url}/v1/runs/appr-2/slots/review`, { secret, response: { kind: "accept", etaSeconds: 3600 } })
      expect(accepted.status).toBe(200)
      expect(accepted.json).toMatchObject({ outcome: "Accepted", run: { status: "suspended", waitingOn: "review" } })
      const declined = yield* post(`${url}/v1/runs/appr-2/slots/review`, { secret, response: { kind: "decline", reason: "overbooked" } })
      expect(declined.status).toBe(200)
      expect(declined.json.outcome).toBe("Declined")
      expect((yield* runs.await("appr-2")).result).toMatchObject({ outcome: "declined:overbooked" })
    }), 30_000)

  it.scopedLive("respond: hostile bodies get a 4xx naming the field, never a 5xx, and record nothing", () =>
    Effect.gen(function* () {
      const { runs, slots, url } = yield* serveRuns()
      const { secret } = yield* waiting(runs, slots, "appr-3")
      const before = yield* recordsOf(runs, "appr-3")
      const at = `${url}/v1/runs/appr-3/slots/review`
      const field = (reply: { readonly json: any }) => reply.json?.error?.details?.field

      const notJson = yield* send(at, { body: "{nope" })
      expect(notJson.status).toBe(400)
      expect((yield* send(at, { body: "{}", headers: { "content-type": "text/plain" } })).status).toBe(415)
      expect(field(yield* post(at, [secret]))).toBe("the body")
      expect(field(yield* post(at, { secret: 42, response: { kind: "submit", answer: 1 } }))).toBe("secret")
      expect(field(yield* post(at, { secret: "s".repeat(600), response: { kind: "submit", answer: 1 } }))).toBe("secret")
      expect(field(yield* post(at, { secret, response: { kind: "frob" } }))).toBe("response.kind")
      expect(field(yield* post(at, { secret, response: { kind: "submit" } }))).toBe("response.answer")
      expect(field(yield* post(at, { secret, response: { kind: "accept", etaSeconds: -5 } }))).toBe("response.etaSeconds")
      expect(field(yield* post(at, { secret, response: { kind: "decline", reason: "bored" } }))).toBe("response.reason")
      let deep: unknown = 1
      for (let i = 0; i < 200; i++) deep = [deep]
      const nested = yield* post(at, { secret, response: { kind: "submit", answer: deep } })
      expect(nested.status).toBe(400)
      expect(nested.json.error.message).toContain("nested too deeply")
      const badSlot = yield* post(`${url}/v1/runs/appr-3/slots/%00review`, { secret, response: { kind: "decline", reason: "other" } })
      expect(badSlot.status).toBe(400)
      expect(field(badSlot)).toBe("slot")
      expect(yield* recordsOf(runs, "appr-3")).toEqual(before)
      expect((yield* runs.poll("appr-3")).status).toBe("suspended")
    }), 30_000)

  it.scopedLive("cancel: a waiting run ends cancelled (CANCELLED_SIGNAL) and its slot closes; an unknown run is 404", () =>
    Effect.gen(function* () {
      const { runs, slots, url } = yield* serveRuns()
      const { secret } = yield* waiting(runs, slots, "appr-4")
      const cancelled = yield* send(`${url}/v1/runs/appr-4/cancel`, { method: "POST", body: "{}" })
      expect(cancelled.status).toBe(200)
      expect(cancelled.json).toMatchObject({ id: "appr-4", status: "cancelled", error: { code: "CANCELLED_SIGNAL" } })
      const late = yield* post(`${url}/v1/runs/appr-4/slots/review`, { secret, response: { kind: "submit", answer: { approved: true, note: "x" } } })
      expect(late.json.error.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      expect((yield* send(`${url}/v1/runs/nope/cancel`, { method: "POST", body: "{}" })).status).toBe(404)
    }), 30_000)

  it.scopedLive("a server without Runs answers 404 on the runs routes, saying why", () =>
    Effect.gen(function* () {
      const { url } = yield* serveRuns({ runs: false })
      const reply = yield* send(`${url}/v1/runs`)
      expect(reply.status).toBe(404)
      expect(reply.json.error.message).toContain("keeps no durable runs")
    }), 30_000)
})
