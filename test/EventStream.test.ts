/**
 * `/v1/events/stream` pushes what the in-memory log records (its `subscribe`)
 * instead of copying the ring on a timer, and holds one of the server's
 * `maxEventListeners` places per open stream: past them 429 with `Retry-After`,
 * a place given back when its stream closes. Real server on 127.0.0.1, real
 * fetch clients; the log's own push is tested beside it (a listener that never
 * reads holds up no one).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import { Custom, type Event } from "../src/domain/Event.js"
import { CorrelationContext } from "../src/domain/System.js"
import { defaults } from "../src/adapters/http/Config.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { EventLog, type Service as EventLogService } from "../src/services/EventLog.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const KEY = "stream-key-0123456789"
const auth = { authorization: `Bearer ${KEY}` }

const custom = (n: number): Event =>
  new Custom({ action: `e${n}`, layer: "test", data: { n }, timestamp: n, correlation: new CorrelationContext({ requestId: `r${n}` }) })

/** An open `/v1/events/stream`: its status and headers, the `data:` lines so far, and how to close it (closed with the scope at the latest, so a failed test never leaves the server waiting on it). */
const open = (url: string) =>
  Effect.acquireRelease(Effect.promise(async () => {
    const controller = new AbortController()
    const res = await fetch(`${url}/v1/events/stream`, { headers: auth, signal: controller.signal })
    const seen: Array<any> = []
    let text = ""
    const reading = res.status !== 200 ? Promise.resolve() : (async () => {
      const reader = res.body!.getReader()
      try {
        for (;;) {
          const { done, value } = await reader.read()
          if (done) return
          text += new TextDecoder().decode(value)
          const lines = text.split("\n")
          text = lines.pop()!
          for (const line of lines) if (line.startsWith("data: ")) seen.push(JSON.parse(line.slice(6)))
        }
      } catch {
        // closed by the test
      }
    })()
    return {
      status: res.status,
      headers: res.headers,
      body: (res.status === 200 ? undefined : await res.json()) as any,
      seen,
      close: () => {
        controller.abort()
        return reading
      }
    }
  }), (stream) => Effect.promise(stream.close))

/** Waits (at most `ms`) until `ready` holds. */
const until = (ready: () => boolean, what: string, ms = 10_000) =>
  Effect.promise(async () => {
    const deadline = Date.now() + ms
    while (!ready()) {
      if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  })

/** The in-memory log, counting how often its ring is copied (`events`). */
const countingLog = Effect.map(Observe.makeEventLog, (log) => {
  const copies = { n: 0 }
  const counted: EventLogService = { ...log, events: Effect.suspend(() => (copies.n++, log.events)) }
  return { log: counted, copies }
})

const engine = ScriptedEngine.layer([ScriptedEngine.reply("hello")], { whenExhausted: "repeat-last" })

describe("the in-memory log's push (subscribe)", () => {
  it.effect("a subscriber gets each event recorded after it subscribed, the same instance the ring keeps", () =>
    Effect.scoped(Effect.gen(function* () {
      const log = yield* Observe.makeEventLog
      yield* log.record(custom(0))
      const pushed = yield* log.subscribe!
      yield* log.record(custom(1))
      yield* log.record(custom(2))
      const got = Chunk.toReadonlyArray(yield* Queue.takeAll(pushed))
      expect(got.map((e) => (e as Custom).action)).toEqual(["e1", "e2"])
      const kept = yield* log.events
      expect(got[0]).toBe(kept[1])
    })))

  it.effect("a subscriber that never reads holds up no one: recording goes on, it keeps its newest unread events", () =>
    Effect.scoped(Effect.gen(function* () {
      const log = yield* Observe.makeEventLogBounded({ subscriberBacklog: 4 })
      const stalled = yield* log.subscribe!
      yield* Effect.forEach(Array.from({ length: 50 }, (_, i) => i), (i) => log.record(custom(i)), { discard: true }).pipe(
        Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new Error("recording was held up by a subscriber") })
      )
      expect((yield* log.events).length).toBe(50)
      const left = Chunk.toReadonlyArray(yield* Queue.takeAll(stalled)).map((e) => (e as Custom).action)
      expect(left).toEqual(["e46", "e47", "e48", "e49"])
    })))

  it.effect("the subscription ends with its scope: a closed one is shut down", () =>
    Effect.gen(function* () {
      const log = yield* Observe.makeEventLog
      const pushed = yield* Effect.scoped(log.subscribe!)
      yield* log.record(custom(1))
      expect(yield* Queue.isShutdown(pushed)).toBe(true)
    }))
})

describe("/v1/events/stream on pagantic serve", () => {
  it("a server has 32 event-stream listeners by default", () => {
    expect(defaults.maxEventListeners).toBe(32)
  })

  it.live("an open stream is sent each new event as it is recorded, and the ring is not copied again while it listens", () =>
    Effect.scoped(Effect.gen(function* () {
      const { copies, log } = yield* countingLog
      const observe = Layer.merge(Layer.succeed(EventLog, log), Observe.metricsMemory)
      const { url } = yield* serve({ engine, observe, http: { apiKey: Redacted.make(KEY) } })
      const stream = yield* open(url)
      expect(stream.status).toBe(200)
      expect(stream.headers.get("content-type")).toContain("text/event-stream")
      // the stream has looked at the ring once (its backlog)
      yield* until(() => copies.n >= 1, "the backlog read")
      const looked = copies.n
      for (const id of ["push-1", "push-2", "push-3"]) {
        expect((yield* post(`${url}/v1/run`, chatRequest("hi", { requestId: id }), auth)).status).toBe(200)
      }
      yield* until(
        () => ["push-1", "push-2", "push-3"].every((id) => stream.seen.some((e) => e.correlation?.requestId === id)),
        "the three requests' events on the stream"
      )
      // more than two of the old 250 ms looks' worth of time: none happened
      yield* Effect.sleep("600 millis")
      expect(copies.n).toBe(looked)
      // in the order recorded, each once
      const recorded = (yield* log.events).filter((e) => e.correlation.requestId.startsWith("push-"))
      const sent = stream.seen.filter((e) => e.correlation?.requestId?.startsWith("push-"))
      expect(sent.map((e) => [e._tag, e.correlation.requestId, e.timestamp])).toEqual(
        recorded.map((e) => [e._tag, e.correlation.requestId, e.timestamp])
      )
      yield* Effect.promise(stream.close)
    })).pipe(Effect.timeout("60 seconds")))

  it.live("past maxEventListeners a listener is 429 with Retry-After, naming the limit; a closed stream gives its place back; HEAD takes none", () =>
    Effect.scoped(Effect.gen(function* () {
      const { url } = yield* serve({ engine, http: { apiKey: Redacted.make(KEY), maxEventListeners: 2 } })
      const first = yield* open(url)
      const second = yield* open(url)
      expect([first.status, second.status]).toEqual([200, 200])
      const head = yield* send(`${url}/v1/events/stream`, { method: "HEAD", headers: auth })
      expect(head.status).toBe(200)
      const third = yield* open(url)
      expect(third.status).toBe(429)
      expect(third.headers.get("retry-after")).toBe("5")
      expect(third.headers.get("content-type")).toContain("application/json")
      expect(third.body.error.code).toBe("ORCHESTRATION_CAPACITY_EXCEEDED")
      expect(third.body.error.message).toContain("2 event-stream listeners")
      expect(third.body.error.message).toContain("PAGANTIC_MAX_EVENT_LISTENERS")
      expect(third.body.error.details).toMatchObject({ limit: "maxEventListeners", max: 2 })
      // the JSON events route is no listener: still answered
      expect((yield* send(`${url}/v1/events`, { headers: auth })).status).toBe(200)
      yield* Effect.promise(first.close)
      // the server sees the close when it next writes or reads; within the bound, a place is free again
      let again = yield* open(url)
      const deadline = Date.now() + 10_000
      while (again.status === 429 && Date.now() < deadline) {
        yield* Effect.sleep("100 millis")
        again = yield* open(url)
      }
      expect(again.status).toBe(200)
      yield* Effect.promise(second.close)
      yield* Effect.promise(again.close)
    })).pipe(Effect.timeout("60 seconds")))
})
