/**
 * Notification channels (issue #16): the seed's selection rule applied per notice
 * (SSE when the inbox is consumed, else push, else a digest past an hour, else
 * polling); the webhook signed with HMAC against a loopback server, retried on 5xx,
 * final on 4xx, falling to the next channel; user-supplied push channels as fakes;
 * and a human CALL of a real run reaching its responder through the service.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import { createHmac } from "node:crypto"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as NotificationChannels from "../src/layers/NotificationChannels.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import * as Notification from "../src/programs/query/Notification.js"
import type { Notice, PushChannel } from "../src/services/Notifications.js"
import * as Runs from "../src/services/Runs.js"
import * as Loopback from "./support/loopback.js"

const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.timeout("20 seconds"))

const notice = (fields: Partial<Notice> = {}): Notice => ({
  responder: "alice",
  runId: "run-1",
  slot: "single_shot/slot/0/1",
  secret: Redacted.make("s3cret"),
  deadline: Date.now() + 3_600_000,
  call: "run-1/single_shot/call/0",
  input: "a grant proposal",
  maxLatencySecs: 600,
  ...fields
})

/** The channels on an HTTP client that lives as long as the test's scope. */
const make = (options: NotificationChannels.Options) =>
  Effect.flatMap(Layer.build(NodeHttpClient.layerUndici), (client) =>
    NotificationChannels.make({ webhookRetry: Schedule.recurs(2), ...options }).pipe(Effect.provide(client)))

const fake = (name: string, fails = false) =>
  Effect.map(Ref.make<ReadonlyArray<Notice>>([]), (sent) => ({
    sent,
    channel: {
      name,
      send: (n: Notice) => (fails ? Effect.fail(InferenceFailure.engineError(`${name} is down`)) : Ref.update(sent, (all) => [...all, n]))
    } satisfies PushChannel
  }))

describe("notification channels", () => {
  it.scopedLive("SSE when the responder's inbox is open, whatever else it has", () =>
    bounded(Effect.gen(function* () {
      const slack = yield* fake("slack")
      const service = yield* make({ responders: { alice: { push: ["slack"] } }, channels: [slack.channel] })
      const received = yield* Effect.fork(Stream.runCollect(Stream.take(service.inbox("alice"), 1)))
      // the inbox is open once its stream runs
      yield* Effect.sleep("20 millis")
      expect(yield* service.notify(notice())).toEqual({ _tag: "Sse" })
      const [got] = Chunk.toReadonlyArray(yield* Fiber.join(received))
      expect(got?.slot).toBe("single_shot/slot/0/1")
      expect(yield* Ref.get(slack.sent)).toEqual([])
      // closed again: the push channel
      expect(yield* service.notify(notice())).toEqual({ _tag: "Push", channel: "slack" })
    })))

  it.scopedLive("the webhook: a POST signed with HMAC-SHA256 of its body, retried on 5xx", () =>
    bounded(Effect.gen(function* () {
      const server = yield* Loopback.make((_, response, n) => {
        response.statusCode = n === 1 ? 503 : 204
        response.end()
      })
      const secret = Redacted.make("hook-key")
      const service = yield* make({ responders: { alice: { webhook: { url: `${server.url}/hook`, secret } } } })
      expect(yield* service.notify(notice())).toEqual({ _tag: "Push", channel: "webhook" })
      expect(server.requests).toHaveLength(2)
      const [, delivered] = server.requests
      expect(delivered!.method).toBe("POST")
      expect(delivered!.url).toBe("/hook")
      const expected = `sha256=${createHmac("sha256", "hook-key").update(delivered!.body).digest("hex")}`
      expect(delivered!.headers["x-pagantic-signature"]).toBe(expected)
      expect(delivered!.json).toMatchObject({ kind: "infer.notification.v1", run_id: "run-1", slot: "single_shot/slot/0/1", secret: "s3cret" })
    })))

  it.scopedLive("a webhook that refuses (4xx) is not retried; the next push channel takes the notice", () =>
    bounded(Effect.gen(function* () {
      const server = yield* Loopback.make((_, response) => {
        response.statusCode = 410
        response.end()
      })
      const sms = yield* fake("sms")
      const service = yield* make({
        responders: { alice: { webhook: { url: server.url, secret: Redacted.make("k") }, push: ["sms"] } },
        channels: [sms.channel]
      })
      expect(yield* service.notify(notice())).toEqual({ _tag: "Push", channel: "sms" })
      expect(server.requests).toHaveLength(1)
      expect(yield* Ref.get(sms.sent)).toHaveLength(1)
    })))

  it.scopedLive("no channel reaches them: a digest past an hour of wait, polling otherwise; every push failing falls back the same way", () =>
    bounded(Effect.gen(function* () {
      const down = yield* fake("email", true)
      const service = yield* make({ responders: { bob: { push: ["email"] } }, channels: [down.channel] })
      expect(yield* service.notify(notice({ responder: "carol", maxLatencySecs: 3_601 }))).toEqual({ _tag: "Digest" })
      expect(yield* service.notify(notice({ responder: "carol", maxLatencySecs: 3_600 }))).toEqual({ _tag: "Polling" })
      expect(yield* service.notify(notice({ responder: "bob", maxLatencySecs: 60 }))).toEqual({ _tag: "Polling" })
      expect(yield* service.takeDigest("carol")).toHaveLength(1)
      expect(yield* service.takeDigest("carol")).toHaveLength(0)
      expect(yield* service.pending("carol")).toHaveLength(1)
      expect(yield* service.pending("bob")).toHaveLength(1)
      // an expired notice is no longer pending
      yield* service.notify(notice({ responder: "dave", deadline: Date.now() - 1, maxLatencySecs: 10 }))
      expect(yield* service.pending("dave")).toHaveLength(0)
    })))

  it.scopedLive("a human CALL of a run reaches its responder's webhook with the slot's secret, which answers the slot", () =>
    bounded(Effect.gen(function* () {
      const server = yield* Loopback.make((_, response) => {
        response.statusCode = 200
        response.end()
      })
      const service = yield* make({ responders: { alice: { webhook: { url: server.url, secret: Redacted.make("k") } } } })
      const queries = Orchestration.definition({ notify: Notification.notifyThrough(service) })
      const layer = InMemoryRuns.layer({ definitions: [queries] }).pipe(
        Layer.provide(Layer.merge(
          InMemoryResponders.layer({ responders: [{ id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 60 } }] }),
          LexicalReranker.layer()
        ))
      )
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, queries, {
          kind: "infer.query.v1",
          input: { inline: "a grant proposal" },
          responders: [{ kind: "actor", did: "did:example:alice" }],
          max_latency_secs: 3600,
          answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
        })
        yield* runs.await(id, { untilSuspended: true })
        expect(server.requests).toHaveLength(1)
        const body = server.requests[0]!.json as { run_id: string; slot: string; secret: string }
        expect(body.run_id).toBe(id)
        yield* runs.respond(id, body.slot, body.secret, { kind: "core.classification.v1", category: "research" })
        expect((yield* runs.await(id)).status).toBe("completed")
      }).pipe(Effect.provide(layer))
    })))
})
