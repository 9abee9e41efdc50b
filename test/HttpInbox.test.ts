/**
 * `GET /v1/responders/{id}/inbox` (issue #16: "SSE, an inbox the responder's page
 * listens to") on a real server on 127.0.0.1 whose queries are durable runs
 * notifying their humans through NotificationChannels: a page listening receives
 * the slot with what answering takes, answers it through the runs endpoint, the
 * query completes; a notice sent while nobody listened (polling) comes first when
 * the page connects; no Notifications is a 404 saying so; a bad id is 400; the API
 * key guards it. These servers have no key ring, so the page is the local admin
 * and answers as the operator: the event carries no secret (who else may read an
 * inbox is in test/RunsOwnership).
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
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
import { Notifications } from "../src/services/Notifications.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"
import { post, send } from "./support/server.js"

const responders: ReadonlyArray<Responder> = [
  { id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 60 } }
]

const humanQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "actor", did: "did:example:alice" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
}

/** A server whose queries are durable runs in memory, their humans notified through NotificationChannels (or no Notifications). */
const withServer = <A, E>(
  f: (url: string, runs: Runs.Service) => Effect.Effect<A, E>,
  options: { readonly notifications?: boolean; readonly http?: Http.Options } = {}
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const channels = yield* Layer.build(NotificationChannels.layer().pipe(Layer.provide(NodeHttpClient.layerUndici)))
      const service = Context.get(channels, Notifications)
      const queries = Orchestration.definition({ notify: Notification.notifyThrough(service) })
      const services = InMemoryRuns.layer({ definitions: [queries] }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders }), LexicalReranker.layer(), ScriptedEngine.layer([]))
        )
      )
      const server = Http.layer({ port: 0, ...options.http }).pipe(
        Layer.provideMerge(Facade.layer({ queries: { definition: queries } })),
        Layer.provideMerge(services)
      )
      const context = yield* Layer.build(
        options.notifications === false ? server : server.pipe(Layer.provide(Layer.succeed(Notifications, service)))
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
      return yield* f(`http://127.0.0.1:${address.port}`, Context.get(context, Runs.Runs))
    })
  ).pipe(Effect.timeout("30 seconds"))

interface SseEvent {
  readonly event: string
  readonly id: string | undefined
  readonly data: any
}

/** An SSE client (fetch, streamed): the events as they come, each wait bounded; closed with the scope. */
const listen = (url: string, headers: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const abort = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => abort.abort()))
    const response = yield* Effect.promise(() => fetch(url, { headers, signal: abort.signal }))
    const events: Array<SseEvent> = []
    const waiters = new Set<() => void>()
    if (response.body !== null) {
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
      let buffer = ""
      void (async () => {
        try {
          for (;;) {
            const { done, value } = await reader.read()
            if (done) return
            buffer += value
            let end = buffer.indexOf("\n\n")
            while (end >= 0) {
              const block = buffer.slice(0, end)
              buffer = buffer.slice(end + 2)
              const fields = new Map<string, string>()
              for (const line of block.split("\n")) {
                if (line.startsWith(":") || line === "") continue
                const colon = line.indexOf(":")
                fields.set(line.slice(0, colon), line.slice(colon + 1).trimStart())
              }
              if (fields.has("data")) {
                events.push({ event: fields.get("event") ?? "message", id: fields.get("id"), data: JSON.parse(fields.get("data")!) })
                for (const wake of waiters) wake()
              }
              end = buffer.indexOf("\n\n")
            }
          }
        } catch {
          // aborted
        }
      })()
    }
    /** The `n`th event (from 0), waited for at most 10 s. */
    const nth = (n: number) =>
      Effect.promise(() =>
        new Promise<SseEvent>((resolve, reject) => {
          const check = () => {
            const event = events[n]
            if (event === undefined) return false
            waiters.delete(check)
            clearTimeout(timer)
            resolve(event)
            return true
          }
          const timer = setTimeout(() => {
            waiters.delete(check)
            reject(new Error(`no event ${n} within 10 s; got ${JSON.stringify(events)}`))
          }, 10_000)
          if (!check()) waiters.add(check)
        })
      )
    return { status: response.status, headers: response.headers, nth }
  })

const ended = (url: string, runId: string) =>
  Effect.gen(function* () {
    for (;;) {
      const reply = yield* send(`${url}/v1/runs/${runId}`)
      if (["completed", "failed", "cancelled"].includes(reply.json?.status)) return reply
      yield* Effect.sleep("20 millis")
    }
  })

describe("GET /v1/responders/{id}/inbox", () => {
  it.live("a page listening receives the slot (run, slot, deadline, question, links; no secret), answers it, and the query completes", () =>
    withServer((url) =>
      Effect.scoped(Effect.gen(function* () {
        const inbox = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(inbox.status).toBe(200)
        expect(inbox.headers.get("content-type")).toContain("text/event-stream")
        expect(yield* inbox.nth(0)).toMatchObject({ event: "open", data: { responder: "alice", pending: 0 } })

        const asked = yield* post(`${url}/v1/queries`, humanQuery)
        expect(asked.status).toBe(202)
        const runId: string = asked.json.query.runId

        const slot = yield* inbox.nth(1)
        expect(slot.event).toBe("slot")
        expect(slot.data).toMatchObject({
          responder: "alice",
          runId,
          input: expect.stringContaining("protein folding"),
          shape: expect.any(String),
          answerShape: humanQuery.answer_shape,
          links: { run: `/v1/runs/${runId}` }
        })
        expect(slot.data).not.toHaveProperty("secret")
        expect(slot.id).toBe(`${runId} ${slot.data.slot}`)
        expect(Date.parse(slot.data.deadline)).toBeGreaterThan(Date.now())
        expect(slot.data.links.respond).toBe(`/v1/runs/${runId}/slots/${encodeURIComponent(slot.data.slot)}`)

        const answered = yield* post(`${url}${slot.data.links.respond}`, {
          response: { kind: "submit", answer: { kind: "core.classification.v1", category: "research" } }
        })
        expect(answered.status, answered.text).toBe(200)
        expect(answered.json.outcome).toBe("Accepted")
        const done = yield* ended(url, runId)
        expect(done.json).toMatchObject({ status: "completed", result: { kind: "KNOW", body: { category: "research" } } })
      }))))

  it.live("a slot sent while nobody listened (to the digest: a day's wait) comes first when the page connects, once", () =>
    withServer((url, runs) =>
      Effect.scoped(Effect.gen(function* () {
        const asked = yield* post(`${url}/v1/queries`, humanQuery)
        expect(asked.status).toBe(202)
        const runId: string = asked.json.query.runId
        expect((yield* runs.await(runId, { untilSuspended: true })).status).toBe("suspended")
        const inbox = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(yield* inbox.nth(0)).toMatchObject({ event: "open", data: { responder: "alice", pending: 1 } })
        const slot = yield* inbox.nth(1)
        expect(slot).toMatchObject({ event: "slot", data: { runId } })
        // the digest is taken: a second page connecting does not get it again
        const second = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(yield* second.nth(0)).toMatchObject({ event: "open", data: { pending: 0 } })
        const answered = yield* post(`${url}${slot.data.links.respond}`, {
          response: { kind: "submit", answer: { kind: "core.classification.v1", category: "news" } }
        })
        expect(answered.status).toBe(200)
        expect((yield* ended(url, runId)).json.result.body.category).toBe("news")
      }))))

  it.live("a slot left for polling (a short wait) comes on every connection until it is answered, then no more", () =>
    withServer((url, runs) =>
      Effect.scoped(Effect.gen(function* () {
        const asked = yield* post(`${url}/v1/queries`, { ...humanQuery, max_latency_secs: 600 })
        expect(asked.status, asked.text).toBe(202)
        const runId: string = asked.json.query.runId
        expect((yield* runs.await(runId, { untilSuspended: true })).status).toBe("suspended")
        const first = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(yield* first.nth(0)).toMatchObject({ event: "open", data: { pending: 1 } })
        const slot = yield* first.nth(1)
        expect(Date.parse(slot.data.deadline)).toBeLessThan(Date.now() + 601_000)
        const again = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(yield* again.nth(0)).toMatchObject({ event: "open", data: { pending: 1 } })
        const answered = yield* post(`${url}${slot.data.links.respond}`, {
          response: { kind: "submit", answer: { kind: "core.classification.v1", category: "research" } }
        })
        expect(answered.status, answered.text).toBe(200)
        yield* ended(url, runId)
        const after = yield* listen(`${url}/v1/responders/alice/inbox`)
        expect(yield* after.nth(0)).toMatchObject({ event: "open", data: { pending: 0 } })
      }))))

  it.live("refusals as JSON: no Notifications is 404 saying so; a malformed id 400 naming it; the API key guards it", () =>
    Effect.gen(function* () {
      yield* withServer((url) =>
        Effect.gen(function* () {
          const none = yield* send(`${url}/v1/responders/alice/inbox`)
          expect(none.status).toBe(404)
          expect(none.json.error.message).toContain("no notification channels")
        }), { notifications: false })
      yield* withServer((url) =>
        Effect.gen(function* () {
          const key = { authorization: "Bearer k3y" }
          const bad = yield* send(`${url}/v1/responders/%20alice/inbox`, { headers: key })
          expect(bad.status).toBe(400)
          expect(bad.json.error.details.field).toBe("id")
          const wrongMethod = yield* send(`${url}/v1/responders/alice/inbox`, { method: "POST", body: "{}", headers: key })
          expect(wrongMethod.status).toBe(405)
          const noKey = yield* send(`${url}/v1/responders/alice/inbox`)
          expect(noKey.status).toBe(401)
          const keyed = yield* Effect.scoped(
            Effect.flatMap(listen(`${url}/v1/responders/alice/inbox`, key), (inbox) =>
              Effect.map(inbox.nth(0), (open) => ({ status: inbox.status, open })))
          )
          expect(keyed.status).toBe(200)
          expect(keyed.open.event).toBe("open")
        }), { http: { apiKey: Redacted.make("k3y") } })
    }))
})
