/**
 * Who may do what on `pagantic serve` (issue #42): each principal sees and acts
 * on only what it started. Two real HTTP clients (and more) of one real server
 * on 127.0.0.1, with a key each: the session hijack through the event log, the
 * events routes per principal, request ids that tell nobody whose they are, and
 * a table of the request and events routes x {owner, other client, responder,
 * admin, no key}. The runs, slots and inbox routes have their table in
 * test/RunsOwnership.test.ts.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import * as Http from "../src/adapters/Http.js"
import * as Keys from "../src/adapters/http/Keys.js"
import * as Owners from "../src/adapters/http/Owners.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import type { Served } from "./support/server.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const key = {
  alice: "alice-key-0123456789",
  bob: "bob-key-0123456789",
  rev: "reviewer-key-0123456789",
  root: "root-key-0123456789"
} as const

const keys: ReadonlyArray<Keys.KeyEntry> = [
  { name: "alice", role: "client", key: Redacted.make(key.alice) },
  { name: "bob", role: "client", key: Redacted.make(key.bob) },
  { name: "rev", role: "responder", responder: "did:example:rev", key: Redacted.make(key.rev) },
  { name: "root", role: "admin", key: Redacted.make(key.root) }
]

type Who = keyof typeof key | "nokey"

const as = (who: Who): Record<string, string> => (who === "nokey" ? {} : { authorization: `Bearer ${key[who]}` })

const withServer = <A>(f: (server: Served) => Effect.Effect<A>) =>
  Effect.scoped(
    Effect.flatMap(
      serve({ engine: ScriptedEngine.layer([ScriptedEngine.reply("hello")], { whenExhausted: "repeat-last" }), http: { keys } }),
      f
    )
  ).pipe(Effect.timeout("60 seconds"), Effect.orDie)

/** The request ids and session ids named anywhere in the events a principal is shown. */
const namedIn = (events: ReadonlyArray<any>) => ({
  requests: new Set(events.map((e) => e.correlation.requestId)),
  sessions: new Set(events.map((e) => e.correlation.sessionId).filter((s) => s !== undefined))
})

/** The events a stream sends in its first `ms`, read as SSE `data:` lines. */
const streamed = (url: string, who: Who, ms: number) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const res = await fetch(`${url}/v1/events/stream`, { headers: as(who), signal: controller.signal })
    if (res.status !== 200) return { status: res.status, events: [] as Array<any> }
    const reader = res.body!.getReader()
    let text = ""
    const stop = setTimeout(() => controller.abort(), ms)
    try {
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        text += new TextDecoder().decode(value)
      }
    } catch {
      // aborted: the time is up
    } finally {
      clearTimeout(stop)
    }
    const events = text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)))
    return { status: res.status, events }
  })

describe("ownership on pagantic serve", () => {
  it.live("the session hijack: another client's session id is not found, and its history stays out of the prompt", () =>
    withServer((server) =>
      Effect.gen(function* () {
        const { url } = server
        const started = yield* post(`${url}/v1/run`, chatRequest("my secret plan", { requestId: "alice-1" }), as("alice"))
        expect(started.status).toBe(200)
        const sessionId: string = started.json.sessionId
        expect(sessionId).toMatch(/^session_[0-9a-f-]{36}$/)
        // what the repro did: read the session id from the event log...
        const seen = yield* send(`${url}/v1/events?limit=10000`, { headers: as("bob") })
        expect(seen.status).toBe(200)
        expect(namedIn(seen.json.events).sessions.has(sessionId)).toBe(false)
        expect(seen.text).not.toContain(sessionId)
        // ...and continue it: not found, exactly like a session that never was
        const hijack = yield* post(`${url}/v1/run`, chatRequest("hi", { sessionId }), as("bob"))
        const never = yield* post(`${url}/v1/run`, chatRequest("hi", { sessionId: "session_never" }), as("bob"))
        expect(hijack.status).toBe(404)
        expect(never.status).toBe(404)
        expect(hijack.json.error.details.field).toBe("sessionId")
        expect(hijack.json.error.message).toBe(never.json.error.message)
        // alice's session is as she left it: two messages, nobody else's turn in it
        const stored = yield* server.sessions
        expect(stored).toEqual([`alice/${sessionId}`])
        // and she goes on with it
        const again = yield* post(`${url}/v1/run`, chatRequest("and then?", { sessionId }), as("alice"))
        expect(again.status).toBe(200)
        expect(again.json.sessionId).toBe(sessionId)
      })
    ))

  it.live("/v1/events and its stream show each principal its own events; an admin sees all", () =>
    withServer(({ url }) =>
      Effect.gen(function* () {
        expect((yield* post(`${url}/v1/run`, chatRequest("a", { requestId: "alice-1" }), as("alice"))).status).toBe(200)
        expect((yield* post(`${url}/v1/run`, chatRequest("b", { requestId: "bob-1" }), as("bob"))).status).toBe(200)
        const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "c" }] }, as("bob"))
        expect(chat.status).toBe(200)
        const read = (who: Who) => Effect.map(send(`${url}/v1/events?limit=10000`, { headers: as(who) }), (r) => namedIn(r.json.events).requests)
        const alice = yield* read("alice")
        const bob = yield* read("bob")
        const root = yield* read("root")
        expect([...alice]).toEqual(["alice-1"])
        expect(bob.has("bob-1")).toBe(true)
        expect(bob.has("alice-1")).toBe(false)
        // the chat completion's id is the server's, recorded as bob's
        expect(bob.size).toBe(2)
        expect(root.has("alice-1") && root.has("bob-1") && root.size).toBe(3)
        // asking for another's request by id shows nothing
        const asked = yield* send(`${url}/v1/events?requestId=alice-1`, { headers: as("bob") })
        expect(asked.status).toBe(200)
        expect(asked.json.events).toEqual([])
        // the stream: the backlog and what comes next, per principal
        const bobStream = Effect.runPromise(streamed(url, "bob", 1_500))
        yield* Effect.sleep("300 millis")
        expect((yield* post(`${url}/v1/run`, chatRequest("later", { requestId: "alice-2" }), as("alice"))).status).toBe(200)
        expect((yield* post(`${url}/v1/run`, chatRequest("later", { requestId: "bob-2" }), as("bob"))).status).toBe(200)
        const got = yield* Effect.promise(() => bobStream)
        const ids = namedIn(got.events).requests
        expect(ids.has("bob-1") && ids.has("bob-2")).toBe(true)
        expect(ids.has("alice-1") || ids.has("alice-2")).toBe(false)
      })
    ))

  it.live("a request id is its first user's: another's and a running one are refused alike (409)", () =>
    withServer(({ url }) =>
      Effect.gen(function* () {
        expect((yield* post(`${url}/v1/run`, chatRequest("a", { requestId: "r-1" }), as("alice"))).status).toBe(200)
        const taken = yield* post(`${url}/v1/run`, chatRequest("b", { requestId: "r-1" }), as("bob"))
        expect(taken.status).toBe(409)
        expect(taken.json.error.details.field).toBe("requestId")
        const query = yield* post(`${url}/v1/queries`, { requestId: "r-1", input: { inline: "x" } }, as("bob"))
        expect(query.status).toBe(409)
        expect(query.json.error.message).toBe(taken.json.error.message)
        // its owner may use it again once it has ended
        expect((yield* post(`${url}/v1/run`, chatRequest("c", { requestId: "r-1" }), as("alice"))).status).toBe(200)
      })
    ))

  it.live("the request and events routes x {owner, other client, responder, admin, no key}", () =>
    withServer(({ url }) =>
      Effect.gen(function* () {
        const session = (yield* post(`${url}/v1/run`, chatRequest("mine"), as("alice"))).json.sessionId as string
        const routes: ReadonlyArray<{
          readonly name: string
          readonly send: (who: Who) => ReturnType<typeof send>
          readonly expected: Record<Who, number>
        }> = [
          {
            name: "POST /v1/run (a new chat)",
            send: (who) => post(`${url}/v1/run`, chatRequest("hi"), as(who)),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 401 }
          },
          {
            name: "POST /v1/run (alice's session)",
            send: (who) => post(`${url}/v1/run`, chatRequest("hi", { sessionId: session }), as(who)),
            expected: { alice: 200, bob: 404, rev: 404, root: 404, nokey: 401 }
          },
          {
            name: "POST /v1/chat/completions",
            send: (who) => post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] }, as(who)),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 401 }
          },
          {
            name: "POST /v1/responses",
            send: (who) => post(`${url}/v1/responses`, { input: "hi" }, as(who)),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 401 }
          },
          {
            name: "GET /v1/models",
            send: (who) => send(`${url}/v1/models`, { headers: as(who) }),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 401 }
          },
          {
            name: "GET /v1/events",
            send: (who) => send(`${url}/v1/events`, { headers: as(who) }),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 401 }
          },
          {
            name: "GET /health",
            send: (who) => send(`${url}/health`, { headers: as(who) }),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 200 }
          },
          {
            name: "GET / (the page)",
            send: (who) => send(`${url}/`, { headers: as(who) }),
            expected: { alice: 200, bob: 200, rev: 200, root: 200, nokey: 200 }
          }
        ]
        const table: Array<string> = []
        const want: Array<string> = []
        for (const route of routes) {
          for (const who of ["alice", "bob", "rev", "root", "nokey"] as const) {
            const reply = yield* route.send(who)
            table.push(`${route.name} as ${who}: ${reply.status}`)
            want.push(`${route.name} as ${who}: ${route.expected[who]}`)
            if (reply.status >= 400) expect(reply.json, `${route.name} as ${who}: a JSON error`).toBeDefined()
          }
        }
        expect(table).toEqual(want)
        // what alice and bob see of the events after all that: only their own
        const aliceEvents = (yield* send(`${url}/v1/events?limit=10000`, { headers: as("alice") })).json.events
        const bobEvents = (yield* send(`${url}/v1/events?limit=10000`, { headers: as("bob") })).json.events
        const aliceIds = namedIn(aliceEvents).requests
        expect([...namedIn(bobEvents).requests].some((id) => aliceIds.has(id))).toBe(false)
      })
    ))
})

describe("the key ring", () => {
  it("authenticates each key as its principal, and nothing else", () => {
    const ring = Either.getOrThrow(Keys.make(keys))
    expect(ring.authenticate(key.alice)).toEqual({ name: "alice", role: "client" })
    expect(ring.authenticate(key.rev)).toEqual({ name: "rev", role: "responder", responder: "did:example:rev" })
    expect(ring.authenticate(key.root)?.role).toBe("admin")
    expect(ring.authenticate("alice-key-012345678")).toBeUndefined()
    expect(ring.authenticate("")).toBeUndefined()
  })

  it("keeps keys as hashes: a keys file's sha256 is the key's", () => {
    const ring = Either.getOrThrow(Keys.make([{ name: "carol", role: "client", sha256: Keys.hashOf("carol's key") }]))
    expect(ring.authenticate("carol's key")?.name).toBe("carol")
    expect(Keys.hashOf("x")).toMatch(/^[0-9a-f]{64}$/)
  })

  it("refuses a malformed ring naming the entry, never quoting a key", () => {
    const refused = (entries: ReadonlyArray<Keys.KeyEntry>) => Either.getLeft(Keys.make(entries)).pipe((o) => o._tag === "Some" ? o.value : undefined)
    const twice = refused([keys[0]!, { ...keys[0]!, key: Redacted.make("another-key-000000") }])
    expect(twice?.details.field).toBe("keys[1].name")
    expect(refused([{ name: "x", role: "responder", key: Redacted.make("k") }])?.details.field).toBe("keys[0].responder")
    expect(refused([{ name: "x", role: "client" }])?.details.field).toBe("keys[0]")
    expect(refused([{ name: "x", role: "client", sha256: "abc" }])?.details.field).toBe("keys[0].sha256")
    expect(refused([{ name: "", role: "client", key: Redacted.make("k") }])?.details.field).toBe("keys[0].name")
    expect(JSON.stringify(twice)).not.toContain("another-key")
  })

  it("reads roles as written: admin, client, responder:<id>", () => {
    expect(Keys.parseRole("responder:did:example:alice")).toEqual(Either.right({ role: "responder", responder: "did:example:alice" }))
    expect(Either.isLeft(Keys.parseRole("responder:"))).toBe(true)
    expect(Either.isLeft(Keys.parseRole("root"))).toBe(true)
  })

  it.effect("a server with only apiKey has one principal, the admin named admin", () =>
    Effect.gen(function* () {
      const ring = yield* Http.keyRingOf({ apiKey: Redacted.make("the-admin-key") })
      expect(ring?.authenticate("the-admin-key")).toEqual({ name: "admin", role: "admin" })
      expect(yield* Http.keyRingOf({})).toBeUndefined()
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})

describe("sessions and owners", () => {
  it("a session key is its principal's, and a client knows its id unscoped", () => {
    const alice = { name: "alice", role: "client" } as const
    expect(Owners.sessionKey(alice, "session_1")).toBe("alice/session_1")
    expect(Owners.sessionKey(alice, "alice/session_1")).toBe("alice/session_1")
    expect(Owners.sessionKey({ name: "bob", role: "client" }, "alice/session_1")).toBe("bob/alice/session_1")
    expect(Owners.sessionIdOf(alice, "alice/session_1")).toBe("session_1")
  })

  it.effect("request ids: claimed once, children are their parent's, the oldest forgotten past the bound", () =>
    Effect.gen(function* () {
      const owners = Owners.make(2)
      const alice = { name: "alice", role: "client" } as const
      const bob = { name: "bob", role: "client" } as const
      expect(yield* owners.claim("r1", alice)).toBe(true)
      expect(yield* owners.claim("r1", bob)).toBe(false)
      expect(yield* owners.claim("r1", alice)).toBe(true)
      expect(owners.ownerOf("r1.3.1")).toBe("alice")
      yield* owners.claim("r2", bob)
      yield* owners.claim("r3", bob)
      expect(owners.ownerOf("r1")).toBeUndefined()
    }))
})
