/**
 * Humans in the patterns, on the in-memory runs with TestClock: a human CALL is a
 * durable slot; an answer off the query's shape is refused when it arrives (the
 * slot stays open); accept moves the deadline to max(deadline, now + eta) within
 * the query's latency bound and reopens the call, decline closes it without
 * counting, submit answers; the deadline
 * closes it as expired (escalate then commits the previous tier's answer marked
 * expired, or fails by option); an answer to a closed slot is SLOT_CLOSED.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/TestClock"
import type * as Records from "../src/domain/Records.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"
import { aliases, classify, query, setup } from "./support/patterns-fixtures.js"

const humans: ReadonlyArray<Responder> = [
  { id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 60 } },
  { id: "bob", kind: "actor", did: "did:example:bob", availability: { typicalResponseDelaySecs: 60 } }
]

const escalation = (extra: Record<string, unknown> = {}) =>
  query({
    fold: { function: "best_of" },
    max_latency_secs: 3600,
    orchestration: {
      pattern: "escalate",
      tiers: [{ responders: [{ kind: "llm", model: "~haiku" }] }, { responders: [{ kind: "actor", did: "did:example:alice" }] }],
      escalation_expression: "fold.answer.confidence < 0.7",
      ...extra
    }
  })

const secret = (notice: Orchestration.Notice) => Redacted.value(notice.slot.secret)

/** Lets the run move after an answer or a timer (the runs layer kicks a resumed run after 50 ms). */
const settle = Effect.zipRight(TestClock.adjust("100 millis"), Effect.yieldNow())

const learned = (thread: ReadonlyArray<Records.QueryRecord>) =>
  thread.filter((r): r is Records.Learn => r.kind === "LEARN").map((r) => r.body)

describe("humans in the patterns (TestClock)", () => {
  it.effect("an accept past the query's latency bound is refused naming eta_seconds (the slot stays open); one within it reopens the call; the submit on it is committed; the first slot is then SLOT_CLOSED", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({ haiku: [classify("news", 0.5)] }, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, queries, escalation(), { aliases })
        expect((yield* runs.await(id, { untilSuspended: true })).status).toBe("suspended")
        const [first] = yield* Ref.get(notices)
        expect(first!.responder.id).toBe("alice")
        expect(first!.call.body).toMatchObject({ role: "tier", stage: 1 })
        expect(first!.slot.deadline.epochMillis).toBe(3_600_000)

        yield* TestClock.adjust("1000 seconds")
        // 1000 s + 7200 s is past the query's bound (3600 s): refused, nothing recorded, the slot still takes an answer
        const past = yield* Effect.flip(runs.respond(id, first!.slot.key, secret(first!), { kind: "infer.accept.v1", eta_seconds: 7200 }))
        expect(past.code).toBe("CONFIG_INVALID_REQUEST")
        expect(past.details).toMatchObject({ field: "answer.eta_seconds" })
        expect(past.message).toContain("1970-01-01T01:00:00.000Z")
        expect((yield* Ref.get(notices)).length).toBe(1)
        expect(yield* runs.respond(id, first!.slot.key, secret(first!), { kind: "infer.accept.v1", eta_seconds: 2000 })).toBe("Accepted")
        yield* settle
        yield* runs.await(id, { untilSuspended: true })
        const second = (yield* Ref.get(notices))[1]!
        // 1000 s + 2000 s is earlier than the first deadline: it stays (3600 s)
        expect(second.slot.deadline.epochMillis).toBe(3_600_000)

        yield* TestClock.adjust("2000 seconds")
        expect((yield* runs.poll(id)).status).toBe("suspended")
        yield* runs.respond(id, second.slot.key, secret(second), { kind: "core.classification.v1", category: "research", _confidence: 0.95, _rationale: "a grant" })
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        const thread = yield* Orchestration.thread(runs, id)
        const know = thread.find((r): r is Records.Know => r.kind === "KNOW")!
        expect(know.body).toMatchObject({ category: "research", _confidence: 0.95, _rationale: "a grant", _orchestration: { status: "accepted", stage: 1 } })
        const dos = thread.filter((r): r is Records.Do => r.kind === "DO").map((d) => d.body.kind)
        expect(dos).toEqual(["core.classification.v1", "infer.accept.v1", "core.classification.v1"])
        const late = yield* Effect.flip(runs.respond(id, first!.slot.key, secret(first!), { kind: "core.classification.v1", category: "news" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("the human tier's deadline passes: the previous tier's answer is committed marked expired; a late submit is SLOT_CLOSED", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({ haiku: [classify("news", 0.5)] }, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, queries, escalation(), { aliases })
        yield* runs.await(id, { untilSuspended: true })
        const [notice] = yield* Ref.get(notices)
        yield* TestClock.adjust("3599 seconds")
        expect((yield* runs.poll(id)).status).toBe("suspended")
        yield* TestClock.adjust("1 second")
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        const thread = yield* Orchestration.thread(runs, id)
        expect(learned(thread).map((l) => l.kind === "infer.orchestration.escalate.state.v1" && [l.tier, l.escalate, l.expired])).toEqual([
          [0, true, false],
          [1, false, true]
        ])
        expect(thread.find((r) => r.kind === "KNOW")!.body).toMatchObject({ category: "news", _orchestration: { status: "expired", stage: 0 } })
        const late = yield* Effect.flip(runs.respond(id, notice!.slot.key, secret(notice!), { kind: "core.classification.v1", category: "research" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("on_expired fail: the run fails CANCELLED_TIMEOUT", () =>
    Effect.gen(function* () {
      const { layer, queries } = yield* setup({ haiku: [classify("news", 0.5)] }, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, queries, escalation({ on_expired: "fail" }), { aliases })
        yield* runs.await(id, { untilSuspended: true })
        yield* TestClock.adjust("3600 seconds")
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("failed")
        expect(done.error?.code).toBe("CANCELLED_TIMEOUT")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("a machine responder past the deadline is a failed DO; the fold goes on with the rest", () =>
    Effect.gen(function* () {
      const { layer, queries } = yield* setup({
        haiku: [classify("news")],
        sonnet: [ScriptedEngine.reply(JSON.stringify({ category: "research" }), { delay: "200 seconds" })]
      })
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const wire = query({ responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }], max_latency_secs: 100 })
        const id = yield* Orchestration.start(runs, queries, wire, { aliases })
        yield* TestClock.adjust("99 seconds")
        expect((yield* runs.poll(id)).status).toBe("running")
        yield* TestClock.adjust("1 second")
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        const thread = yield* Orchestration.thread(runs, id)
        const failed = thread.find((r): r is Records.Do => r.kind === "DO" && r.body.kind === "infer.failure.v1")!
        expect(failed.body).toMatchObject({ problem: "no answer within 100 s" })
        expect(thread.find((r) => r.kind === "KNOW")!.body).toMatchObject({ category: "news", _fold: { valid: 1, total: 2 } })
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("an answer off the query's shape is refused when it arrives, naming the field, and the slot stays open: a label outside the labels, another kind, a verdict off the audit's schema", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({ haiku: [classify("news", 0.5)], gpt: [classify("research")] }, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(runs, queries, escalation(), { aliases })
        yield* runs.await(id, { untilSuspended: true })
        const [notice] = yield* Ref.get(notices)
        const refused = (answer: unknown) => Effect.flip(runs.respond(id, notice!.slot.key, secret(notice!), answer))
        const before = (yield* Orchestration.thread(runs, id)).length
        const sports = yield* refused({ kind: "core.classification.v1", category: "sports" })
        expect(sports.code).toBe("CONFIG_INVALID_REQUEST")
        expect(sports.details).toMatchObject({ field: "answer.category" })
        expect(sports.message).toContain(`category "sports" is none of the labels`)
        expect(sports.message).toContain(`["research","news"]`)
        const missing = yield* refused({ kind: "core.classification.v1", label: "research" })
        expect(missing.details).toMatchObject({ field: "answer.category" })
        const otherKind = yield* refused({ kind: "core.summary.v1", summary: "a grant" })
        expect(otherKind.details).toMatchObject({ field: "answer.kind" })
        expect(otherKind.message).toContain("core.classification.v1")
        // nothing recorded, the run still waits on the same slot, which takes a good answer
        expect((yield* Orchestration.thread(runs, id)).length).toBe(before)
        expect((yield* runs.poll(id)).status).toBe("suspended")
        expect(yield* runs.respond(id, notice!.slot.key, secret(notice!), { kind: "core.classification.v1", category: "research" })).toBe("Accepted")
        yield* settle
        expect((yield* runs.await(id)).status).toBe("completed")

        // an auditor's verdict is checked against the verdict's schema, not the query's
        const audited = yield* Orchestration.start(runs, queries, query({
          max_latency_secs: 3600,
          orchestration: {
            pattern: "ensemble_with_audit",
            primary_responders: [{ kind: "llm", model: "~gpt" }],
            auditor: { kind: "actor", did: "did:example:alice" },
            audit_expression: "audit.approved == true"
          }
        }), { aliases })
        yield* runs.await(audited, { untilSuspended: true })
        const auditor = (yield* Ref.get(notices)).find((n) => n.slot.runId === audited)!
        const offSchema = yield* Effect.flip(runs.respond(audited, auditor.slot.key, secret(auditor), { kind: "core.json.v1", value: { approved: "yes" } }))
        expect(offSchema.code).toBe("CONFIG_INVALID_REQUEST")
        expect(offSchema.details).toMatchObject({ field: "answer.value" })
        expect(offSchema.message).toContain("approved")
        const asQuery = yield* Effect.flip(runs.respond(audited, auditor.slot.key, secret(auditor), { kind: "core.classification.v1", category: "research" }))
        expect(asQuery.details).toMatchObject({ field: "answer.kind" })
        expect(yield* runs.respond(audited, auditor.slot.key, secret(auditor), { kind: "core.json.v1", value: { approved: true, rationale: "ok" } })).toBe("Accepted")
        yield* settle
        expect((yield* runs.await(audited)).status).toBe("completed")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("a human auditor answers the verdict through its slot: N + 1 CALLs, the KNOW carries the verdict", () =>
    Effect.gen(function* () {
      const { calls, layer, notices, queries } = yield* setup({ haiku: [classify("research")], gpt: [classify("research")] }, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const wire = query({
          max_latency_secs: 3600,
          obligation_resolution: "validation_error",
          orchestration: {
            pattern: "ensemble_with_audit",
            primary_responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~gpt" }],
            auditor: { kind: "actor", did: "did:example:alice" },
            audit_expression: "audit.approved == true && fold.answer.confidence >= 0.5"
          }
        })
        const id = yield* Orchestration.start(runs, queries, wire, { aliases })
        yield* runs.await(id, { untilSuspended: true })
        const [notice] = yield* Ref.get(notices)
        expect(notice!.call.body.role).toBe("auditor")
        expect(notice!.input).toContain(`Answer: {"category":"research"}`)
        const offShape = yield* Effect.flip(runs.respond(id, notice!.slot.key, secret(notice!), { kind: "infer.decline.v1", reason: "tired" }))
        expect(offShape.code).toBe("CONFIG_INVALID_REQUEST")
        yield* runs.respond(id, notice!.slot.key, secret(notice!), { kind: "core.json.v1", value: { approved: true, rationale: "checked the source" } })
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        expect(yield* calls).toEqual({ haiku: 1, gpt: 1 })
        const know = (yield* Orchestration.thread(runs, id)).find((r): r is Records.Know => r.kind === "KNOW")!
        expect(know.body).toMatchObject({
          category: "research",
          _orchestration: { status: "accepted", calls: 3 },
          audit: { approved: true, ambiguous: false, rationale: "checked the source" }
        })
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("a quorum met without a human closes its slot: a late answer is SLOT_CLOSED at once, while the run goes on", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({}, humans, { awaiting: "quorum" })
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(
          runs,
          queries,
          query({
            fold: { function: "best_of" },
            max_latency_secs: 3600,
            orchestration: {
              pattern: "waterfall",
              stages: [
                { responders: [{ kind: "pattern", capability: "classification" }, { kind: "actor", did: "did:example:alice" }] },
                { responders: [{ kind: "actor", did: "did:example:bob" }] }
              ],
              accept_expression: "fold.answer.confidence >= 0.99"
            }
          }),
          { aliases }
        )
        // stage 0 folds on the keywords' answer alone (not accepted); the run waits for bob in stage 1
        expect((yield* runs.await(id, { untilSuspended: true })).status).toBe("suspended")
        const [alice, bob] = yield* Ref.get(notices)
        expect([alice!.responder.id, bob!.responder.id]).toEqual(["alice", "bob"])
        const late = yield* Effect.flip(runs.respond(id, alice!.slot.key, secret(alice!), { kind: "core.classification.v1", category: "research" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        expect((yield* runs.poll(id)).status).toBe("suspended")
        const thread = yield* Orchestration.thread(runs, id)
        const notAwaited = thread.find((r): r is Records.Do => r.kind === "DO" && r.body.kind === "infer.failure.v1")
        expect(notAwaited?.body).toMatchObject({ problem: expect.stringContaining("not awaited") })
        // bob still answers
        yield* runs.respond(id, bob!.slot.key, secret(bob!), { kind: "core.classification.v1", category: "news", _confidence: 0.995 })
        yield* settle
        expect((yield* runs.await(id)).status).toBe("completed")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("a human left unawaited when the KNOW is committed cannot answer late either", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({}, humans, { awaiting: "quorum" })
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* Orchestration.start(
          runs,
          queries,
          query({ max_latency_secs: 3600, responders: [{ kind: "pattern", capability: "classification" }, { kind: "actor", did: "did:example:alice" }] }),
          { aliases }
        )
        expect((yield* runs.await(id)).status).toBe("completed")
        const [alice] = yield* Ref.get(notices)
        const late = yield* Effect.flip(runs.respond(id, alice!.slot.key, secret(alice!), { kind: "core.classification.v1", category: "news" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        expect(late.message).toContain("closed")
      }).pipe(Effect.provide(layer))
    }), 30_000)

  it.effect("accepts are bounded: 32 per call, the 33rd refused naming kind (the slot stays open and takes the submit)", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({}, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const wire = query({ responders: [{ kind: "actor", did: "did:example:alice" }], max_latency_secs: 3600 })
        const id = yield* Orchestration.start(runs, queries, wire, { aliases })
        for (let n = 1; n <= Orchestration.maxAccepts; n++) {
          yield* runs.await(id, { untilSuspended: true })
          const notice = (yield* Ref.get(notices))[n - 1]!
          yield* runs.respond(id, notice.slot.key, secret(notice), { kind: "infer.accept.v1", eta_seconds: 60 })
          yield* settle
        }
        yield* runs.await(id, { untilSuspended: true })
        const all = yield* Ref.get(notices)
        expect(all).toHaveLength(Orchestration.maxAccepts + 1)
        const last = all[Orchestration.maxAccepts]!
        const refused = yield* Effect.flip(runs.respond(id, last.slot.key, secret(last), { kind: "infer.accept.v1", eta_seconds: 60 }))
        expect(refused.code).toBe("CONFIG_INVALID_REQUEST")
        expect(refused.details).toMatchObject({ field: "answer.kind" })
        expect((yield* runs.poll(id)).waitingOn).toBe(last.slot.key)
        yield* runs.respond(id, last.slot.key, secret(last), { kind: "core.classification.v1", category: "research" })
        yield* settle
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        expect(done.result).toMatchObject({ kind: "KNOW", body: { category: "research" } })
      }).pipe(Effect.provide(layer))
    }), 60_000)

  it.effect("a decline closes the call and does not count: with min_quorum 2 the run names it among the missing", () =>
    Effect.gen(function* () {
      const { layer, notices, queries } = yield* setup({}, humans)
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const wire = query({
          responders: [{ kind: "actor", did: "did:example:alice" }, { kind: "actor", did: "did:example:bob" }],
          max_latency_secs: 3600,
          min_quorum: 2
        })
        const id = yield* Orchestration.start(runs, queries, wire, { aliases })
        yield* runs.await(id, { untilSuspended: true })
        const all = yield* Ref.get(notices)
        const alice = all.find((n) => n.responder.id === "alice")!
        const bob = all.find((n) => n.responder.id === "bob")!
        yield* runs.respond(id, alice.slot.key, secret(alice), { kind: "infer.decline.v1", reason: "out_of_domain" })
        yield* settle
        yield* runs.await(id, { untilSuspended: true })
        yield* runs.respond(id, bob.slot.key, secret(bob), { kind: "core.classification.v1", category: "research" })
        yield* settle
        const done = yield* runs.await(id)
        expect(done.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
        expect(done.error?.message).toBe("only 1 of 2 responders gave a valid answer; min_quorum is 2")
        expect(JSON.stringify(done.error?.details)).toContain("declined: out_of_domain")
        const dos = (yield* Orchestration.thread(runs, id)).filter((r): r is Records.Do => r.kind === "DO")
        expect(dos.map((d) => d.body.kind)).toEqual(["infer.decline.v1", "core.classification.v1"])
      }).pipe(Effect.provide(layer))
    }), 30_000)
})
