/**
 * Who may do what on the durable runs, their slots and the responders' inboxes
 * over HTTP (issue #42): one real server on 127.0.0.1 with a key ring (carol and
 * bob are clients, alice a human responder, root an admin), its queries durable
 * runs that ask alice through NotificationChannels, and each principal a real
 * HTTP client with its own key.
 *
 * A table gives every route x {the run's owner, another client, the responder,
 * admin, no key} its status; each cell is sent against a fresh run carol started,
 * and every 404 must be the body a run (or slot) that does not exist gets. Then
 * the issue's repro: a query waits on alice's approval, bob can neither read her
 * inbox nor answer her slot (no secret, a guessed one), alice answers with her
 * key and the run commits her answer; an answer outside the query's labels is
 * 422 naming the field and leaves the slot open; the inbox never carries the
 * slot's secret.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Http from "../src/adapters/Http.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as NotificationChannels from "../src/layers/NotificationChannels.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import * as Notification from "../src/programs/query/Notification.js"
import * as Notifications from "../src/services/Notifications.js"
import type { Notice } from "../src/services/Notifications.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"

const responders: ReadonlyArray<Responder> = [
  { id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 60 } }
]

const humanQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "actor", did: "did:example:alice" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
}

const research = { kind: "core.classification.v1", category: "research" }

type Who = "owner" | "other" | "responder" | "admin" | "none"
const everyone: ReadonlyArray<Who> = ["owner", "other", "responder", "admin", "none"]

const keyOf: Record<Who, string | undefined> = {
  owner: "k-carol",
  other: "k-bob",
  responder: "k-alice",
  admin: "k-root",
  none: undefined
}

const keys: NonNullable<Http.Options["keys"]> = [
  { name: "carol", role: "client", key: Redacted.make("k-carol") },
  { name: "bob", role: "client", key: Redacted.make("k-bob") },
  { name: "alice", role: "responder", responder: "alice", key: Redacted.make("k-alice") },
  { name: "root", role: "admin", key: Redacted.make("k-root") }
]

const auth = (who: Who): Record<string, string> =>
  keyOf[who] === undefined ? {} : { authorization: `Bearer ${keyOf[who]}` }

interface Reply {
  readonly status: number
  readonly text: string
  readonly json: any
}

/**
 * One request, bounded: an answer that is an event stream is read no further
 * than its status (the streams of a waiting run or an inbox do not end).
 */
const call = (
  url: string,
  init: { readonly method?: string | undefined; readonly body?: unknown; readonly headers?: Record<string, string> | undefined } = {}
) =>
  Effect.promise(async (): Promise<Reply> => {
    const abort = new AbortController()
    const timer = setTimeout(() => abort.abort(), 10_000)
    try {
      const res = await fetch(url, {
        method: init.method ?? (init.body === undefined ? "GET" : "POST"),
        headers: { "content-type": "application/json", ...init.headers },
        ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
        signal: abort.signal
      })
      if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
        abort.abort()
        return { status: res.status, text: "", json: undefined }
      }
      const text = await res.text()
      let json: unknown = undefined
      try {
        json = JSON.parse(text)
      } catch {
        json = undefined
      }
      return { status: res.status, text, json }
    } finally {
      clearTimeout(timer)
    }
  })

/** The server, its Runs and the Notifications its queries tell alice through. */
const serveOwned = Effect.gen(function* () {
  const channels = yield* Layer.build(NotificationChannels.layer().pipe(Layer.provide(NodeHttpClient.layerUndici)))
  const channel = Context.get(channels, Notifications.Notifications)
  // every notice sent, as the channels got it (the test reads a slot's secret here)
  const told = yield* Ref.make<ReadonlyArray<Notice>>([])
  const notifications: Notifications.Service = {
    ...channel,
    notify: (notice) => Effect.zipRight(Ref.update(told, (all) => [...all, notice]), channel.notify(notice))
  }
  const queries = Orchestration.definition({ notify: Notification.notifyThrough(notifications) })
  const services = InMemoryRuns.layer({ definitions: [queries] }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders }), LexicalReranker.layer(), ScriptedEngine.layer([]))
    )
  )
  const server = Http.layer({ port: 0, keys }).pipe(
    Layer.provideMerge(Facade.layer({ queries: { definition: queries } })),
    Layer.provideMerge(services),
    Layer.provide(Layer.succeed(Notifications.Notifications, notifications))
  )
  const context = yield* Layer.build(server)
  const address = Context.get(context, HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
  return { url: `http://127.0.0.1:${address.port}`, runs: Context.get(context, Runs.Runs), told }
})

type Served = Effect.Effect.Success<typeof serveOwned>

/** A query carol asks, waiting on alice: its run, the slot it waits on and the secret alice's notice carried. */
const asked = ({ runs, told, url }: Served) =>
  Effect.gen(function* () {
    const reply = yield* call(`${url}/v1/queries`, { body: humanQuery, headers: auth("owner") })
    expect(reply.status, reply.text).toBe(202)
    const runId: string = reply.json.query.runId
    const info = yield* runs.await(runId, { untilSuspended: true }).pipe(Effect.timeout("10 seconds"))
    expect(info.status).toBe("suspended")
    expect(info.owner).toBe("carol")
    const notice = (yield* Ref.get(told)).find((n) => n.runId === runId)
    expect(notice?.slot).toBe(info.waitingOn)
    return { runId, slot: notice!.slot, secret: Redacted.value(notice!.secret) }
  })

const recordsOf = (runs: Runs.Service, id: string) =>
  Effect.map(runs.exportThread(id), (thread) => thread.records.map((r) => `${r.kind} ${r.key}`))

/** A refusal's body with what differs between two requests taken out: the request id, the run id. */
const normalized = (reply: Reply, runId: string) => {
  const { requestId: _, ...rest } = reply.json ?? {}
  return JSON.stringify(rest).replaceAll(runId, "<run>")
}

interface Target {
  readonly runId: string
  readonly slot: string
  readonly secret: string
}

interface Row {
  readonly route: string
  readonly request: (target: Target) => { readonly path: string; readonly method?: string; readonly body?: unknown }
  /** A status per caller; `listed`/`unlisted`: 200, with or without carol's run. */
  readonly expected: Record<Who, number | "listed" | "unlisted">
}

const submit = { kind: "submit", answer: research }

const table: ReadonlyArray<Row> = [
  {
    route: "GET /v1/runs",
    request: () => ({ path: "/v1/runs" }),
    expected: { owner: "listed", other: "unlisted", responder: "unlisted", admin: "listed", none: 401 }
  },
  {
    route: "GET /v1/runs/{id}",
    request: ({ runId }) => ({ path: `/v1/runs/${runId}` }),
    expected: { owner: 200, other: 404, responder: 404, admin: 200, none: 401 }
  },
  {
    route: "GET /v1/runs/{id}/events",
    request: ({ runId }) => ({ path: `/v1/runs/${runId}/events` }),
    expected: { owner: 200, other: 404, responder: 404, admin: 200, none: 401 }
  },
  {
    route: "POST /v1/runs/{id}/cancel",
    request: ({ runId }) => ({ path: `/v1/runs/${runId}/cancel`, method: "POST", body: {} }),
    expected: { owner: 200, other: 404, responder: 404, admin: 200, none: 401 }
  },
  {
    route: "POST /v1/runs/{id}/slots/{slot} (no secret)",
    request: ({ runId, slot }) => ({ path: `/v1/runs/${runId}/slots/${encodeURIComponent(slot)}`, body: { response: submit } }),
    expected: { owner: 404, other: 404, responder: 200, admin: 200, none: 401 }
  },
  {
    route: "POST /v1/runs/{id}/slots/{slot} (a guessed secret)",
    request: ({ runId, slot }) => ({ path: `/v1/runs/${runId}/slots/${encodeURIComponent(slot)}`, body: { secret: "guessed-0000", response: submit } }),
    expected: { owner: 404, other: 404, responder: 200, admin: 200, none: 401 }
  },
  {
    route: "POST /v1/runs/{id}/slots/{slot} (the slot's secret, a notification link)",
    request: ({ runId, secret, slot }) => ({ path: `/v1/runs/${runId}/slots/${encodeURIComponent(slot)}`, body: { secret, response: submit } }),
    expected: { owner: 200, other: 200, responder: 200, admin: 200, none: 401 }
  },
  {
    route: "POST /v1/runs/{id}/slots/{missing slot}",
    request: ({ runId }) => ({ path: `/v1/runs/${runId}/slots/no-such-slot`, body: { response: submit } }),
    expected: { owner: 404, other: 404, responder: 404, admin: 404, none: 401 }
  },
  {
    route: "GET /v1/responders/{id}/inbox",
    request: () => ({ path: "/v1/responders/alice/inbox" }),
    expected: { owner: 404, other: 404, responder: 200, admin: 200, none: 401 }
  }
]

/** The same request against a run that does not exist: what a 404 for an existing run must look like. */
const missingRun = "run-that-does-not-exist"

describe("who may do what on runs, slots and inboxes", () => {
  it.scopedLive("every route x {owner, other client, the responder, admin, no key}: the expected status; every 404 is the body of a missing run", () =>
    Effect.gen(function* () {
      const served = yield* serveOwned
      const got: Record<string, Record<Who, number | string>> = {}
      const want: Record<string, Record<Who, number | string>> = {}
      for (const row of table) {
        got[row.route] = {} as Record<Who, number | string>
        want[row.route] = row.expected
        for (const who of everyone) {
          const target = yield* asked(served)
          const { body, method, path } = row.request(target)
          const reply = yield* call(`${served.url}${path}`, { method, body, headers: auth(who) })
          let cell: number | string = reply.status
          if (reply.status === 200 && row.route === "GET /v1/runs") {
            cell = reply.json.runs.some((r: { id: string }) => r.id === target.runId) ? "listed" : "unlisted"
          }
          if (reply.status === 404 && path.includes(target.runId)) {
            // the body says nothing a run that does not exist would not
            const missing = yield* call(`${served.url}${path.replace(target.runId, missingRun)}`, { method, body, headers: auth(who) })
            expect(missing.status).toBe(404)
            expect(normalized(reply, target.runId), `${row.route} as ${who}`).toBe(normalized(missing, missingRun))
            expect(reply.text).not.toContain(target.secret)
          }
          got[row.route]![who] = cell
          yield* served.runs.cancel(target.runId)
        }
      }
      expect(got).toEqual(want)
    }), 120_000)

  it.scopedLive("any client answers a human's approval: not bob (inbox 404, slot 404 with or without a guessed secret, nothing recorded); alice with her key, and the run commits her answer", () =>
    Effect.gen(function* () {
      const served = yield* serveOwned
      const { runs, url } = served
      const { runId, slot } = yield* asked(served)
      const before = yield* recordsOf(runs, runId)
      const at = `${url}/v1/runs/${runId}/slots/${encodeURIComponent(slot)}`

      const inbox = yield* call(`${url}/v1/responders/alice/inbox`, { headers: auth("other") })
      expect(inbox.status).toBe(404)
      const noSecret = yield* call(at, { body: { response: submit }, headers: auth("other") })
      expect(noSecret.status).toBe(404)
      expect(noSecret.json.error).toMatchObject({ code: "ORCHESTRATION_SLOT_FORBIDDEN", details: { field: "slot" } })
      const guessed = yield* call(at, { body: { secret: "0".repeat(43), response: submit }, headers: auth("other") })
      expect(guessed.status).toBe(404)
      expect(normalized(guessed, runId)).toBe(normalized(noSecret, runId))
      const accepted = yield* call(at, { body: { response: { kind: "accept", etaSeconds: 60 } }, headers: auth("other") })
      expect(accepted.status).toBe(404)
      // bob cannot tell the run from one that does not exist either
      expect((yield* call(`${url}/v1/runs/${runId}`, { headers: auth("other") })).status).toBe(404)
      expect(yield* recordsOf(runs, runId)).toEqual(before)
      expect((yield* runs.poll(runId)).waitingOn).toBe(slot)

      const answered = yield* call(at, { body: { response: submit }, headers: auth("responder") })
      expect(answered.status, answered.text).toBe(200)
      expect(answered.json.outcome).toBe("Accepted")
      // alice answered carol's run: she sees where it stands, not what it found
      expect(answered.json.run).toMatchObject({ id: runId })
      expect(answered.json.run.result).toBeUndefined()
      const done = yield* runs.await(runId).pipe(Effect.timeout("10 seconds"))
      expect(done.status).toBe("completed")
      expect(done.result).toMatchObject({ kind: "KNOW", body: { category: "research" } })
      const shown = yield* call(`${url}/v1/runs/${runId}`, { headers: auth("owner") })
      expect(shown.json).toMatchObject({ status: "completed", result: { body: { category: "research" } } })
    }), 60_000)

  it.scopedLive("an answer outside the query's labels is 422 naming response.answer.category and the slot stays open; the right one then commits", () =>
    Effect.gen(function* () {
      const served = yield* serveOwned
      const { runs, url } = served
      const { runId, slot } = yield* asked(served)
      const before = yield* recordsOf(runs, runId)
      const at = `${url}/v1/runs/${runId}/slots/${encodeURIComponent(slot)}`
      const off = yield* call(at, {
        body: { response: { kind: "submit", answer: { kind: "core.classification.v1", category: "sports" } } },
        headers: auth("responder")
      })
      expect(off.status, off.text).toBe(422)
      expect(off.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { field: "response.answer.category" } })
      expect(off.json.error.message).toMatch(/^response\.answer\.category: /)
      expect(yield* recordsOf(runs, runId)).toEqual(before)
      expect((yield* runs.poll(runId)).waitingOn).toBe(slot)
      // bob sending the same off-shape answer learns nothing: the slot is not his
      const bobs = yield* call(at, {
        body: { response: { kind: "submit", answer: { kind: "core.classification.v1", category: "sports" } } },
        headers: auth("other")
      })
      expect(bobs.status).toBe(404)
      const ok = yield* call(at, { body: { response: submit }, headers: auth("responder") })
      expect(ok.status, ok.text).toBe(200)
      expect((yield* runs.await(runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
    }), 60_000)

  it.scopedLive("alice's inbox shows her slot without its secret; she answers from it with her key", () =>
    Effect.gen(function* () {
      const served = yield* serveOwned
      const { runs, url } = served
      const abort = new AbortController()
      yield* Effect.addFinalizer(() => Effect.sync(() => abort.abort()))
      const response = yield* Effect.promise(() =>
        fetch(`${url}/v1/responders/alice/inbox`, { headers: auth("responder"), signal: abort.signal })
      )
      expect(response.status).toBe(200)
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader()
      let text = ""
      const target = yield* asked(served)
      const slotEvent = yield* Effect.promise(async () => {
        while (!text.includes("event: slot")) {
          const { done, value } = await reader.read()
          if (done) break
          text += value
        }
        while (!/event: slot\n(?:id: .*\n)?data: .*\n\n/.test(text)) {
          const { done, value } = await reader.read()
          if (done) break
          text += value
        }
        const data = /event: slot\n(?:id: .*\n)?data: (.*)\n/.exec(text)![1]!
        return JSON.parse(data)
      }).pipe(Effect.timeout("10 seconds"))
      expect(slotEvent).toMatchObject({ runId: target.runId, slot: target.slot, links: { respond: expect.any(String) } })
      expect(slotEvent).not.toHaveProperty("secret")
      expect(text).not.toContain(target.secret)
      const answered = yield* call(`${url}${slotEvent.links.respond}`, { body: { response: submit }, headers: auth("responder") })
      expect(answered.status, answered.text).toBe(200)
      expect((yield* runs.await(target.runId).pipe(Effect.timeout("10 seconds"))).status).toBe("completed")
    }), 60_000)
})
