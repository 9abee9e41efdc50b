/**
 * Ownership under generated sequences (fast-check): clients alice and bob, a
 * responder and an admin take turns on one real server on 127.0.0.1, each
 * action picked at random and aimed at ids anyone has seen (their own or
 * another's sessions and request ids, and ids that never were). Whatever the
 * order, the same rules hold:
 *
 * - continuing a session is 200 for its owner and 404 for anyone else (an admin
 *   too: its turns are the starter's), answered as for a session that never was;
 * - a request id another principal used is never run again (409), and tells
 *   nobody whose it is (one's own finished one may be used again);
 * - `/v1/events` (all, or by request id) shows a principal only the events of
 *   its own requests (an admin: all), and never another's session id;
 * - no 5xx.
 *
 * Seeded; FUZZ_SEED=<seed> replays a run and FUZZ_RUNS=<n> changes its size.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import fc from "fast-check"
import type * as Keys from "../src/adapters/http/Keys.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const who = ["alice", "bob", "rev", "root"] as const
type Who = (typeof who)[number]

const keyOf = (w: Who) => `${w}-fuzz-key-0123456789`
const keys: ReadonlyArray<Keys.KeyEntry> = [
  { name: "alice", role: "client", key: Redacted.make(keyOf("alice")) },
  { name: "bob", role: "client", key: Redacted.make(keyOf("bob")) },
  { name: "rev", role: "responder", responder: "did:example:rev", key: Redacted.make(keyOf("rev")) },
  { name: "root", role: "admin", key: Redacted.make(keyOf("root")) }
]
const as = (w: Who) => ({ authorization: `Bearer ${keyOf(w)}` })

type Action =
  | { readonly _tag: "Start"; readonly by: Who }
  | { readonly _tag: "Continue"; readonly by: Who; readonly pick: number }
  | { readonly _tag: "ReuseId"; readonly by: Who; readonly pick: number }
  | { readonly _tag: "Events"; readonly by: Who; readonly pick: number | undefined }

const by = fc.constantFrom(...who)
const pick = fc.nat({ max: 1_000 })
const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ _tag: fc.constant("Start" as const), by }),
  fc.record({ _tag: fc.constant("Continue" as const), by, pick }),
  fc.record({ _tag: fc.constant("ReuseId" as const), by, pick }),
  fc.record({ _tag: fc.constant("Events" as const), by, pick: fc.option(pick, { nil: undefined }) })
)

const RUNS = Number(process.env.FUZZ_RUNS ?? 100)
const SEED = process.env.FUZZ_SEED === undefined ? Date.now() % 2 ** 31 : Number(process.env.FUZZ_SEED)

/** One sequence against a fresh server; what it saw, to check each answer. */
const play = (url: string, actions: ReadonlyArray<Action>, run: number) =>
  Effect.gen(function* () {
    const sessions: Array<{ readonly id: string; readonly owner: Who }> = [{ id: "session_never", owner: "root" }]
    const requests: Array<{ readonly id: string; readonly owner: Who }> = []
    let n = 0
    const fresh = () => `r${run}-${n++}`
    const ownedBy = (w: Who, owner: Who) => w === "root" || w === owner
    for (const [i, a] of actions.entries()) {
      const at = `action ${i} ${JSON.stringify(a)}`
      switch (a._tag) {
        case "Start": {
          const id = fresh()
          const reply = yield* post(`${url}/v1/run`, chatRequest("hi", { requestId: id }), as(a.by))
          expect(reply.status, at).toBe(200)
          sessions.push({ id: reply.json.sessionId, owner: a.by })
          requests.push({ id, owner: a.by })
          break
        }
        case "Continue": {
          const session = sessions[a.pick % sessions.length]!
          const id = fresh()
          const reply = yield* post(`${url}/v1/run`, chatRequest("again", { requestId: id, sessionId: session.id }), as(a.by))
          // a session is its starter's alone: an admin reads its events, but its turns are the starter's
          if (session.id !== "session_never" && session.owner === a.by) {
            expect(reply.status, at).toBe(200)
            requests.push({ id, owner: a.by })
          } else {
            expect(reply.status, at).toBe(404)
            expect(reply.json.error.details.field, at).toBe("sessionId")
            // as for a session that never was: nothing says whose it is
            if (session.owner !== a.by) expect(reply.text, at).not.toContain(session.owner)
          }
          break
        }
        case "ReuseId": {
          if (requests.length === 0) break
          const used = requests[a.pick % requests.length]!
          const reply = yield* post(`${url}/v1/run`, chatRequest("mine now", { requestId: used.id }), as(a.by))
          // one's own finished request id may be used again; another's never
          if (used.owner === a.by) expect(reply.status, at).toBe(200)
          else {
            expect(reply.status, at).toBe(409)
            expect(reply.text, at).not.toContain(used.owner)
          }
          break
        }
        case "Events": {
          const asked = a.pick === undefined || requests.length === 0 ? undefined : requests[a.pick % requests.length]!
          const reply = yield* send(
            `${url}/v1/events?limit=10000${asked === undefined ? "" : `&requestId=${encodeURIComponent(asked.id)}`}`,
            { headers: as(a.by) }
          )
          expect(reply.status, at).toBe(200)
          const owner = new Map(requests.map((r) => [r.id, r.owner]))
          for (const event of reply.json.events as ReadonlyArray<any>) {
            const of = owner.get(event.correlation.requestId)
            // a request this sequence made: its owner's (a refused one records nothing a principal is shown)
            if (of !== undefined) expect(ownedBy(a.by, of), `${at}: ${event.correlation.requestId}`).toBe(true)
            else if (a.by !== "root") expect(event.correlation.requestId.startsWith(`r${run}-`), at).toBe(false)
          }
          if (a.by !== "root") {
            for (const s of sessions) if (s.owner !== a.by && s.id !== "session_never") expect(reply.text, at).not.toContain(s.id)
          }
          if (asked !== undefined && !ownedBy(a.by, asked.owner)) expect(reply.json.events, at).toEqual([])
          break
        }
      }
    }
  })

describe("ownership under generated sequences", () => {
  it.live(`${RUNS} sequences of up to 14 actions by two clients, a responder and an admin: 404 for another's session, 409 for another's request id, each sees only its own events`, () =>
    Effect.scoped(Effect.gen(function* () {
      console.log(`OwnershipFuzz seed ${SEED} (FUZZ_SEED=${SEED} replays it)`)
      const { url } = yield* serve({
        engine: ScriptedEngine.layer([ScriptedEngine.reply("hello")], { whenExhausted: "repeat-last" }),
        http: { keys }
      })
      let run = 0
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 14 }), (actions) =>
            Effect.runPromise(play(url, actions, run++))),
          { numRuns: RUNS, seed: SEED, endOnFailure: true }
        )
      )
    })).pipe(Effect.timeout("240 seconds")), 260_000)
})
