/**
 * `POST /v1/run` with `Prefer: respond-async` (issue #14: a long request can
 * return 202 with the run id instead of being cancelled), on a real server on
 * 127.0.0.1 whose facade runs on durable runs in memory: 202 with Location and
 * Preference-Applied, the run's result the SystemResponse a synchronous call
 * gives; `wait=N` answered in the request when done in time; no store: the
 * preference is ignored; a malformed request starts no run; cancel; a failed
 * request's error; a request id in use; a server SIGKILLed mid-request finishes
 * the run once started again on its state file.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Http from "../src/adapters/Http.js"
import { preferenceOf } from "../src/adapters/http/Run.js"
import * as Live from "../src/adapters/Live.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RequestRun from "../src/programs/facade/RequestRun.js"
import * as Runs from "../src/services/Runs.js"
import * as Duration from "effect/Duration"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { root, spawnLines } from "./support/child.js"
import { waitForFile } from "./support/durable-spawn.js"
import { post, send } from "./support/server.js"

const async = { prefer: "respond-async" }

const noModel = ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model here"))

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  mode: "chat",
  messages: [{ role: "user", content }],
  ...extra
})

/** A server on `script`; with `durable` (default) its requests may be durable runs, in memory. */
const withServer = <A, E>(
  script: ReadonlyArray<ScriptedEngine.Step>,
  f: (url: string, runs: Runs.Service | undefined) => Effect.Effect<A, E>,
  options: { readonly durable?: boolean; readonly http?: Http.Options } = {}
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const requests = yield* RequestRun.make
      const engine = ScriptedEngine.layer(script)
      const system = options.durable === false
        ? Live.layer({ engine, tools: [] })
        : requests.layer.pipe(
          Layer.provideMerge(
            Live.layer({ engine, tools: [], runs: InMemoryRuns.layer({ definitions: [requests.definition] }) })
          )
        )
      const context = yield* Layer.build(Http.layer({ port: 0, ...options.http }).pipe(Layer.provideMerge(system))).pipe(Effect.orDie)
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
      const runs = Context.getOption(context as unknown as Context.Context<Runs.Runs>, Runs.Runs)
      return yield* f(`http://127.0.0.1:${address.port}`, runs._tag === "Some" ? runs.value : undefined)
    })
  ).pipe(Effect.timeout("30 seconds"))

/** Polls a run through HTTP until it ends (bounded by the test's timeout). */
const ended = (url: string, runId: string) =>
  Effect.gen(function* () {
    for (;;) {
      const reply = yield* send(`${url}/v1/runs/${runId}`)
      if (["completed", "failed", "cancelled"].includes(reply.json?.status)) return reply
      yield* Effect.sleep("20 millis")
    }
  })

const withoutIds = (response: Record<string, unknown>) => {
  const { requestId: _r, sessionId: _s, ...rest } = response
  return rest
}

describe("POST /v1/run, Prefer: respond-async", () => {
  it.live("202 with the run id, Location and Preference-Applied; the run's result is the SystemResponse a synchronous call gives", () =>
    withServer([ScriptedEngine.reply("pong"), ScriptedEngine.reply("pong")], (url) =>
      Effect.gen(function* () {
        const sync = yield* post(`${url}/v1/run`, chat("ping"))
        expect(sync.status).toBe(200)
        expect(sync.headers.get("preference-applied")).toBeNull()

        const reply = yield* post(`${url}/v1/run`, chat("ping", { requestId: "r-async" }), async)
        expect(reply.status).toBe(202)
        expect(reply.headers.get("preference-applied")).toBe("respond-async")
        expect(reply.headers.get("x-request-id")).toBe("r-async")
        const runId: string = reply.json.runId
        expect(reply.headers.get("location")).toBe(`/v1/runs/${runId}`)
        expect(reply.json).toMatchObject({
          requestId: "r-async",
          links: { self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events`, cancel: `/v1/runs/${runId}/cancel` }
        })
        expect(["running", "completed"]).toContain(reply.json.status)

        const done = yield* ended(url, runId)
        expect(done.json).toMatchObject({ id: runId, definition: RequestRun.name, status: "completed" })
        expect(done.json.result.requestId).toBe("r-async")
        expect(done.json.result.content).toBe("pong")
        expect(withoutIds(done.json.result)).toEqual(withoutIds(sync.json))
      })))

  it.live("wait=N: a run that ends in time is answered in the request (200, its run id in x-run-id, no Preference-Applied)", () =>
    withServer([ScriptedEngine.reply("pong")], (url, runs) =>
      Effect.gen(function* () {
        const reply = yield* post(`${url}/v1/run`, chat("ping"), { prefer: "respond-async, wait=10" })
        expect(reply.status).toBe(200)
        expect(reply.json.content).toBe("pong")
        expect(reply.headers.get("preference-applied")).toBeNull()
        const runId = reply.headers.get("x-run-id")!
        expect((yield* runs!.poll(runId)).status).toBe("completed")
      })))

  it.live("wait=N: a run still going after N seconds is answered 202", () =>
    withServer([ScriptedEngine.reply("slow pong", { delay: "3 seconds" })], (url) =>
      Effect.gen(function* () {
        const reply = yield* post(`${url}/v1/run`, chat("ping"), { prefer: "wait=1; x=y, respond-async" })
        expect(reply.status).toBe(202)
        expect(reply.json.status).toBe("running")
        const done = yield* ended(url, reply.json.runId)
        expect(done.json.result.content).toBe("slow pong")
      })))

  it.live("without durable runs the preference is ignored: answered in the request, no Preference-Applied", () =>
    withServer([ScriptedEngine.reply("pong")], (url, runs) =>
      Effect.gen(function* () {
        expect(runs).toBeUndefined()
        const reply = yield* post(`${url}/v1/run`, chat("ping"), async)
        expect(reply.status).toBe(200)
        expect(reply.json.content).toBe("pong")
        expect(reply.headers.get("preference-applied")).toBeNull()
        expect(reply.headers.get("location")).toBeNull()
      }), { durable: false }))

  it.live("a malformed request with the preference is 400, as JSON naming the field (the facade's INIT checks too), and no run is recorded", () =>
    withServer([], (url, runs) =>
      Effect.gen(function* () {
        const badMode = yield* post(`${url}/v1/run`, chat("ping", { mode: "bogus" }), async)
        expect(badMode.status).toBe(400)
        expect(badMode.json.error.code).toBe("CONFIG_INVALID_REQUEST")
        expect(badMode.json.error.message).toContain("mode")
        const badMessage = yield* post(`${url}/v1/run`, { mode: "chat", messages: [{ role: "user", content: 5 }] }, async)
        expect(badMessage.status).toBe(400)
        expect(badMessage.json.error.code).toBe("CONFIG_INVALID_REQUEST")
        const notJson = yield* send(`${url}/v1/run`, { body: "{", headers: async })
        expect(notJson.status).toBe(400)
        expect(notJson.json.error.code).toBe("CONFIG_INVALID_REQUEST")
        // the facade's INIT checks too: a structured request without a schema
        const noSchema = yield* post(`${url}/v1/run`, chat("ping", { mode: "structured" }), async)
        expect(noSchema.status).toBe(400)
        expect(noSchema.json.error.code).toBe("CONFIG_SCHEMA_REQUIRED")
        expect(yield* runs!.list()).toEqual([])
      })))

  it.live("cancel through /v1/runs/{id}/cancel ends the run cancelled, CANCELLED_SIGNAL; its request id is in use until then (409)", () =>
    withServer([ScriptedEngine.respond(() => Effect.never)], (url) =>
      Effect.gen(function* () {
        const reply = yield* post(`${url}/v1/run`, chat("ping", { requestId: "r-long" }), async)
        expect(reply.status).toBe(202)
        const runId: string = reply.json.runId
        const again = yield* post(`${url}/v1/run`, chat("ping", { requestId: "r-long" }))
        expect(again.status).toBe(409)
        expect(again.json.error.details.field).toBe("requestId")
        const cancelled = yield* post(`${url}/v1/runs/${runId}/cancel`, {})
        expect(cancelled.status).toBe(200)
        const done = yield* ended(url, runId)
        expect(done.json.status).toBe("cancelled")
        expect(done.json.error.code).toBe("CANCELLED_SIGNAL")
      })))

  it.live("CORS: a page may send Prefer (preflight) and read Location, Preference-Applied, x-request-id and x-run-id", () =>
    withServer([ScriptedEngine.reply("pong")], (url) =>
      Effect.gen(function* () {
        const origin = "http://app.example"
        const preflight = yield* send(`${url}/v1/run`, {
          method: "OPTIONS",
          headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type, prefer" }
        })
        expect(preflight.status).toBeLessThan(300)
        expect(preflight.headers.get("access-control-allow-headers")).toContain("prefer")
        const reply = yield* post(`${url}/v1/run`, chat("ping"), { ...async, origin })
        expect(reply.status).toBe(202)
        const exposed = (reply.headers.get("access-control-expose-headers") ?? "").split(",").map((h) => h.trim())
        expect(exposed).toEqual(expect.arrayContaining(["location", "preference-applied", "x-request-id", "x-run-id"]))
      }), { http: { corsOrigins: ["http://app.example"] } }))

  it.live("a request that fails ends its run failed with the request's error (within wait=N: refused with it, as in the request)", () =>
    withServer([noModel, noModel], (url) =>
      Effect.gen(function* () {
        const waited = yield* post(`${url}/v1/run`, chat("ping"), { prefer: "respond-async, wait=10" })
        expect(waited.status).toBe(503)
        expect(waited.json.error.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(waited.headers.get("x-run-id")).toEqual(expect.any(String))
        expect((yield* ended(url, waited.headers.get("x-run-id")!)).json.status).toBe("failed")

        const reply = yield* post(`${url}/v1/run`, chat("ping"), async)
        expect(reply.status).toBe(202)
        const done = yield* ended(url, reply.json.runId)
        expect(done.json.status).toBe("failed")
        expect(done.json.error).toMatchObject({ code: "INFERENCE_MODEL_UNAVAILABLE", category: "InferenceFailure", retryable: false })
        expect(done.json.error.message).toContain("no model here")
      })))
})

describe("POST /v1/run, Prefer: respond-async, its limits", () => {
  const hang = ScriptedEngine.respond(() => Effect.never)

  it.live("past maxRunsInFlight it is 429 with Retry-After and a JSON error naming what is full; a run that ends frees its place", () =>
    withServer([hang, hang, ScriptedEngine.reply("pong"), hang], (url) =>
      Effect.gen(function* () {
        const first = yield* post(`${url}/v1/run`, chat("one"), async)
        const second = yield* post(`${url}/v1/run`, chat("two"), async)
        expect([first.status, second.status]).toEqual([202, 202])
        const full = yield* post(`${url}/v1/run`, chat("three", { requestId: "r-full" }), async)
        expect(full.status).toBe(429)
        expect(Number(full.headers.get("retry-after"))).toBeGreaterThan(0)
        expect(full.headers.get("x-request-id")).toBe("r-full")
        expect(full.json.requestId).toBe("r-full")
        expect(full.json.error).toMatchObject({
          code: "ORCHESTRATION_CAPACITY_EXCEEDED",
          retryable: true,
          details: { limit: "maxRunsInFlight", max: 2 }
        })
        expect(full.json.error.message).toContain("durable runs in flight")
        // a request the server would refuse anyway is refused for what it is, full or not
        const bad = yield* post(`${url}/v1/run`, chat("x", { mode: "bogus" }), async)
        expect(bad.status).toBe(400)
        // a synchronous request is not a durable run: not counted
        expect((yield* post(`${url}/v1/run`, chat("sync"))).status).toBe(200)

        yield* post(`${url}/v1/runs/${first.json.runId}/cancel`, {})
        yield* ended(url, first.json.runId)
        // the place is freed once the run's end is seen (bounded by the test's timeout)
        for (;;) {
          const again = yield* post(`${url}/v1/run`, chat("four"), async)
          if (again.status === 202) break
          expect(again.status).toBe(429)
          yield* Effect.sleep("20 millis")
        }
      }), { http: { maxRunsInFlight: 2 } }))

  it.live("an async run has the server's time limit for async runs, stated in the 202 (timeoutMs, deadline): past it the run ends CANCELLED_TIMEOUT", () =>
    withServer([hang, hang], (url) =>
      Effect.gen(function* () {
        const before = Date.now()
        const reply = yield* post(`${url}/v1/run`, chat("ping"), async)
        expect(reply.status).toBe(202)
        expect(reply.json.timeoutMs).toBe(400)
        const deadline = Date.parse(reply.json.deadline)
        expect(deadline).toBeGreaterThanOrEqual(before + 400)
        expect(deadline).toBeLessThanOrEqual(Date.now() + 400)
        const done = yield* ended(url, reply.json.runId)
        expect(done.json.status).toBe("failed")
        expect(done.json.error.code).toBe("CANCELLED_TIMEOUT")
        // a shorter limit asked by the client wins, and is the one stated
        const shorter = yield* post(`${url}/v1/run`, chat("ping", { hints: { timeout: 150 } }), async)
        expect(shorter.json.timeoutMs).toBe(150)
        expect((yield* ended(url, shorter.json.runId)).json.error.code).toBe("CANCELLED_TIMEOUT")
      }), { http: { asyncRunTimeout: "400 millis" } }))

  it.live("past maxRunsPerPrincipal one principal's next async run is 429 naming the principal's limit", () =>
    withServer([hang, hang], (url) =>
      Effect.gen(function* () {
        expect((yield* post(`${url}/v1/run`, chat("one"), async)).status).toBe(202)
        const full = yield* post(`${url}/v1/run`, chat("two"), async)
        expect(full.status).toBe(429)
        expect(full.json.error).toMatchObject({ code: "ORCHESTRATION_CAPACITY_EXCEEDED", details: { limit: "maxRunsPerPrincipal", max: 1 } })
      }), { http: { maxRunsInFlight: 10, maxRunsPerPrincipal: 1 } }))
})

describe("Prefer, as read", () => {
  it("respond-async and wait=N, case-insensitive, other preferences and malformed waits ignored, waits capped", () => {
    expect(preferenceOf(undefined, undefined)).toEqual({ async: false, wait: Duration.millis(0) })
    expect(preferenceOf("Respond-Async", undefined).async).toBe(true)
    expect(preferenceOf("respond-async=1", undefined).async).toBe(false)
    expect(preferenceOf("return=minimal, respond-async; foo=bar, wait=7", undefined)).toEqual({ async: true, wait: Duration.millis(7_000) })
    expect(preferenceOf("respond-async, wait=-3", undefined).wait).toEqual(Duration.millis(0))
    expect(preferenceOf("respond-async, wait=1e9", undefined).wait).toEqual(Duration.millis(0))
    expect(preferenceOf("respond-async, wait=\"4\"", undefined).wait).toEqual(Duration.millis(4_000))
    expect(preferenceOf("respond-async, wait=999999999", undefined).wait).toEqual(Duration.seconds(3_600))
    expect(preferenceOf("respond-async, wait=60", 5_000).wait).toEqual(Duration.millis(5_000))
  })
})

describe("a request run across a crash", () => {
  const child = path.join(root, "test", "support", "async-child.ts")
  const start = (config: { readonly db: string; readonly counter: string; readonly pause: boolean }) =>
    spawnLines<{ event: string; url?: string }>(["--import", "tsx", child, JSON.stringify(config)], { consume: false })

  const poll = async (url: string, runId: string, timeoutMs: number) => {
    const started = Date.now()
    for (;;) {
      const reply = await fetch(`${url}/v1/runs/${runId}`, { signal: AbortSignal.timeout(5_000) })
      const body = await reply.json() as { status: string; result?: { content?: string } }
      if (body.status === "completed" || body.status === "failed" || body.status === "cancelled") return body
      if (Date.now() - started > timeoutMs) throw new Error(`run ${runId} still ${body.status} after ${timeoutMs} ms`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  it("a server SIGKILLed mid-request, started again on its state file, finishes the run (the request asked once more); a finished run is not asked again", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-async-"))
    const db = path.join(dir, "state.db")
    const counter = path.join(dir, "counter.txt")
    const engineLines = () => (fs.existsSync(counter) ? fs.readFileSync(counter, "utf8") : "").split("\n").filter((l) => l !== "")

    const first = start({ db, counter, pause: true })
    let runId: string
    try {
      const { url } = await first.next("listening", 60_000)
      const reply = await fetch(`${url}/v1/run`, {
        method: "POST",
        headers: { "content-type": "application/json", prefer: "respond-async" },
        body: JSON.stringify(chat("ping", { requestId: "r-crash" })),
        signal: AbortSignal.timeout(10_000)
      })
      expect(reply.status).toBe(202)
      runId = ((await reply.json()) as { runId: string }).runId
      await waitForFile(counter, (text) => text.includes(`engine ${first.pid}`), 20_000)
    } finally {
      await first.kill()
    }

    const second = start({ db, counter, pause: false })
    try {
      const { url } = await second.next("listening", 60_000)
      const done = await poll(url!, runId, 30_000)
      expect(done).toMatchObject({ status: "completed", result: { requestId: "r-crash", content: "answered after the crash" } })
      expect(engineLines()).toEqual([`engine ${first.pid}`, `engine ${second.pid}`])
    } finally {
      await second.kill()
    }

    const third = start({ db, counter, pause: false })
    try {
      const { url } = await third.next("listening", 60_000)
      await new Promise((resolve) => setTimeout(resolve, 1_500))
      const again = await poll(url!, runId, 5_000)
      expect(again.status).toBe("completed")
      expect(engineLines()).toHaveLength(2)
    } finally {
      await third.kill()
    }
  }, 180_000)
})
