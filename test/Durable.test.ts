import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { ToolFailure } from "../src/domain/Failure.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import { EventLog } from "../src/services/EventLog.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Charge, Probe, Reference, Review, secretOf } from "./support/durable-runs.js"
import type { Slot } from "../src/services/Durable.js"

const probe = Effect.gen(function* () {
  const log = yield* Ref.make<ReadonlyArray<string>>([])
  const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
  const layer = Layer.succeed(Probe, {
    work: (step, value) => Effect.as(Ref.update(log, (l) => [...l, step]), value),
    between: () => Effect.void,
    notify: (slot) => Ref.update(slots, (s) => [...s, slot])
  })
  return { log, slots, layer }
})

const Twice = Runs.define({
  name: "twice",
  payload: Schema.Struct({}),
  success: Schema.Number,
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const a = yield* durable.step("same", Schema.Number, Effect.succeed(1))
      const b = yield* durable.step("same", Schema.Number, Effect.succeed(2))
      return a + b
    })
})

const withRuns = <A, E>(
  body: (ctx: Effect.Effect.Success<typeof probe>) => Effect.Effect<A, E, Runs.Runs>
) =>
  Effect.gen(function* () {
    const ctx = yield* probe
    return yield* body(ctx).pipe(
      Effect.provide(InMemoryRuns.layer({ definitions: [Reference, Approval, Twice, Charge] }).pipe(Layer.provide(ctx.layer)))
    )
  })

describe("Durable runs in memory", () => {
  it.live("a 6-step run completes once, each step once, its thread INTEND, six DO and KNOW", () =>
    withRuns(({ log }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Reference, { seed: 5 }, { id: "ref-1" })
        const info = yield* runs.await(id)
        expect(info.status).toBe("completed")
        expect((info.result as { trail: ReadonlyArray<string> }).trail).toHaveLength(6)
        expect(yield* Ref.get(log)).toEqual(["step-1", "step-2", "step-3", "step-4", "step-5", "step-6"])
        const records = Chunk.toReadonlyArray(yield* Stream.runCollect(runs.events(id)))
        expect(records.map((r) => `${r.kind} ${r.key}`)).toEqual([
          "INTEND payload",
          "DO step-1",
          "DO step-2",
          "DO step-3",
          "DO step-4",
          "DO step-5",
          "DO step-6",
          "KNOW result"
        ])
        // starting the same id again returns it and runs nothing
        expect(yield* runs.start(Reference, { seed: 5 }, { id: "ref-1" })).toBe("ref-1")
        expect(yield* Ref.get(log)).toHaveLength(6)
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("an at-most-once step that is not interrupted runs once and succeeds", () =>
    withRuns(({ log }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const info = yield* runs.await(yield* runs.start(Charge, {}))
        expect(info.result).toEqual({ charged: "yes", message: "" })
        expect(yield* Ref.get(log)).toEqual(["charge"])
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("a step's typed failure is journaled: the program handles it, and a replay gets the failure without running the step", () =>
    Effect.gen(function* () {
      const Failing = Runs.define({
        name: "failing",
        payload: Schema.Struct({}),
        success: Schema.String,
        answers: [Review],
        program: () =>
          Effect.gen(function* () {
            const durable = yield* Durable
            const probe = yield* Probe
            const seen = yield* durable.step(
              "lookup",
              Schema.String,
              Effect.zipRight(probe.work("lookup", 0), ToolFailure.unavailable("lookup", "down", { retryable: true }))
            ).pipe(Effect.catchAll((failure) => Effect.succeed(failure.code)))
            const slot = yield* durable.slot(Review, { sla: "1 hour" })
            yield* durable.step("notify", Schema.Void, probe.notify(slot))
            yield* durable.awaitAnswer(Review, slot)
            return seen
          })
      })
      const ctx = yield* probe
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Failing, {})
        yield* runs.await(id, { untilSuspended: true })
        const [slot] = yield* Ref.get(ctx.slots)
        yield* runs.respond(id, slot!.key, secretOf(slot!), { approved: true, note: "" })
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        expect(done.result).toBe("TOOL_UNAVAILABLE")
        expect(yield* Ref.get(ctx.log)).toEqual(["lookup"])
      }).pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Failing] }).pipe(Layer.provide(ctx.layer))))
    }).pipe(Effect.timeout("20 seconds")))

  it.live("a step key used twice in one run fails the run with a defect naming both call sites", () =>
    withRuns(() =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const info = yield* runs.await(yield* runs.start(Twice, {}))
        expect(info.status).toBe("failed")
        expect(info.error?.code).toBe("ORCHESTRATION_DEFECT")
        expect(info.error?.message).toMatch(/"same" is used twice .*first at .*Durable\.test\.ts:\d+.*again at .*Durable\.test\.ts:\d+/)
      })
    ).pipe(Effect.timeout("20 seconds")))

  const records = (runs: Runs.Service, id: string) =>
    Effect.map(
      Effect.flatMap(runs.poll(id), () =>
        Stream.runCollect(Stream.take(runs.events(id), 1_000).pipe(Stream.timeout("200 millis")))
      ),
      (chunk) => Chunk.toReadonlyArray(chunk).map((r) => `${r.kind} ${r.key}`)
    )

  it.live("a slot answered in time: a wrong secret and a wrong shape are refused and record nothing, the right answer is Accepted once", () =>
    withRuns(({ log, slots }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Approval, { slaMillis: 60_000 })
        const waiting = yield* runs.await(id, { untilSuspended: true })
        expect(waiting.status).toBe("suspended")
        expect(waiting.waitingOn).toBe("review")
        const [slot] = yield* Ref.get(slots)
        const before = yield* records(runs, id)
        expect(before).toEqual(["INTEND payload", "DO prepare", "CALL review", "DO notify", "STATE suspended/review"])

        const wrong = yield* Effect.flip(runs.respond(id, "review", "not-the-secret", { approved: true, note: "x" }))
        expect(wrong.code).toBe("ORCHESTRATION_SLOT_FORBIDDEN")
        const badShape = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: "yes" }))
        expect(badShape.code).toBe("CONFIG_INVALID_REQUEST")
        expect(badShape.message).toContain("approved")
        expect(yield* records(runs, id)).toEqual(before)
        expect((yield* runs.poll(id)).status).toBe("suspended")

        expect(yield* runs.respond(id, "review", secretOf(slot!), { approved: true, note: "ok" })).toBe("Accepted")
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        expect(done.result).toMatchObject({ outcome: "approved", note: "ok" })
        // prepare and finish ran once each, notify's slot was handed out once
        expect(yield* Ref.get(log)).toEqual(["prepare", "finish"])
        expect(yield* Ref.get(slots)).toHaveLength(1)

        const late = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: false, note: "late" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        // a slot that does not exist is refused as a wrong secret is: the same code and message, nothing told apart
        const unknown = yield* Effect.flip(runs.respond(id, "nope", "s", {}))
        expect(unknown.code).toBe("ORCHESTRATION_SLOT_FORBIDDEN")
        expect(unknown.message).toBe(wrong.message.replace(`"review"`, `"nope"`))
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.effect("a slot with no answer expires at its deadline (the SLA timer closes it), a later answer is SLOT_CLOSED", () =>
    withRuns(({ slots }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Approval, { slaMillis: 4_000 })
        yield* runs.await(id, { untilSuspended: true })
        const [slot] = yield* Ref.get(slots)
        yield* TestClock.adjust("3999 millis")
        expect((yield* runs.poll(id)).status).toBe("suspended")
        yield* TestClock.adjust("1 millis")
        const done = yield* runs.await(id)
        expect(done.status).toBe("completed")
        expect(done.result).toMatchObject({ outcome: "expired", deadline: 4_000 })
        const late = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: true, note: "late" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        expect(late.message).toContain("expired")
      })
    ), 20_000)

  it.live("cancel ends a suspended run CANCELLED_SIGNAL and closes its slot; cancelling again changes nothing", () =>
    withRuns(({ slots }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Approval, { slaMillis: 60_000 })
        yield* runs.await(id, { untilSuspended: true })
        yield* runs.cancel(id)
        const done = yield* runs.await(id)
        expect(done.status).toBe("cancelled")
        expect(done.error?.code).toBe("CANCELLED_SIGNAL")
        yield* runs.cancel(id)
        expect((yield* runs.poll(id)).status).toBe("cancelled")
        const [slot] = yield* Ref.get(slots)
        const late = yield* Effect.flip(runs.respond(id, "review", secretOf(slot!), { approved: true, note: "x" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
        expect((yield* runs.list({ status: "cancelled" })).map((r) => r.id)).toEqual([id])
        expect(yield* runs.list({ status: "running" })).toEqual([])
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("bad inputs get typed errors naming what was wrong", () =>
    withRuns(() =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const unknownRun = yield* Effect.flip(runs.poll("no-such-run"))
        expect(unknownRun.code).toBe("CONFIG_INVALID_REQUEST")
        expect(unknownRun.message).toContain("no-such-run")
        const badPayload = yield* Effect.flip(runs.start(Reference, { seed: "x" as unknown as number }))
        expect(badPayload.message).toContain("reference")
        const Stranger = Runs.define({ ...Reference, name: "stranger" })
        const unregistered = yield* Effect.flip(runs.start(Stranger, { seed: 1 }))
        expect(unregistered.message).toContain("stranger")
        const badLimit = yield* Effect.flip(runs.list({ limit: 0 }))
        expect(badLimit.code).toBe("CONFIG_INVALID_REQUEST")
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("prune removes the rows of runs that ended, and keeps those going", () =>
    withRuns(() =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const done = yield* runs.start(Reference, { seed: 1 })
        yield* runs.await(done)
        const going = yield* runs.start(Approval, { slaMillis: 60_000 })
        yield* runs.await(going, { untilSuspended: true })
        expect(yield* runs.prune({ olderThan: 0 })).toBe(1)
        expect((yield* Effect.flip(runs.poll(done))).code).toBe("CONFIG_INVALID_REQUEST")
        expect((yield* runs.poll(going)).status).toBe("suspended")
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("a step's idempotency key is the same on every replay and differs between runs", () =>
    Effect.gen(function* () {
      const keys = yield* Ref.make<ReadonlyArray<string>>([])
      const Keyed = Runs.define({
        name: "keyed",
        payload: Schema.Struct({}),
        success: Schema.String,
        answers: [Review],
        program: () =>
          Effect.gen(function* () {
            const durable = yield* Durable
            // read on every execution: before the slot, and again when the answer resumes the run
            yield* Ref.update(keys, (k) => [...k, durable.idempotencyKey("charge")])
            const slot = yield* durable.slot(Review, { sla: "1 hour" })
            yield* durable.step("notify", Schema.Void, Effect.flatMap(Probe, (probe) => probe.notify(slot)))
            yield* durable.awaitAnswer(Review, slot)
            return durable.idempotencyKey("charge")
          })
      })
      const ctx = yield* probe
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const a = yield* runs.start(Keyed, {})
        yield* runs.await(a, { untilSuspended: true })
        const [slot] = yield* Ref.get(ctx.slots)
        yield* runs.respond(a, slot!.key, secretOf(slot!), { approved: true, note: "" })
        const done = yield* runs.await(a)
        const seen = yield* Ref.get(keys)
        expect(seen.length).toBeGreaterThanOrEqual(2)
        expect(new Set(seen).size).toBe(1)
        expect(done.result).toBe(seen[0])
        expect(seen[0]).toMatch(/^[0-9a-f]{64}$/)
        const b = yield* runs.start(Keyed, {})
        yield* runs.await(b, { untilSuspended: true })
        expect(new Set(yield* Ref.get(keys)).size).toBe(2)
      }).pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Keyed] }).pipe(Layer.provide(ctx.layer))))
    }).pipe(Effect.timeout("20 seconds")))

  it.live("a run waiting for a slot moves EXECUTE -> SUSPENDED, and SUSPENDED -> EXECUTE when the answer resumes it", () =>
    Effect.gen(function* () {
      const ctx = yield* probe
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Approval, { slaMillis: 60_000 })
        yield* runs.await(id, { untilSuspended: true })
        const [slot] = yield* Ref.get(ctx.slots)
        yield* runs.respond(id, slot!.key, secretOf(slot!), { approved: true, note: "" })
        yield* runs.await(id)
        const moves = (yield* (yield* EventLog).events).flatMap((event) =>
          event._tag === "LifecycleTransition" ? [`${event.fromState} -> ${event.toState}`] : []
        )
        expect(moves).toEqual(["EXECUTE -> SUSPENDED", "SUSPENDED -> EXECUTE"])
      }).pipe(
        Effect.provide(
          InMemoryRuns.layer({ definitions: [Approval] }).pipe(Layer.provideMerge(Layer.merge(ctx.layer, Observe.eventLogMemory)))
        )
      )
    }).pipe(Effect.timeout("20 seconds")))

  it.effect("accept moves the deadline to now + its eta when later (the SLA timer follows it); decline closes the slot and the run sees the reason", () =>
    withRuns(({ slots }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const accepted = yield* runs.start(Approval, { slaMillis: 4_000 })
        yield* runs.await(accepted, { untilSuspended: true })
        const [slot] = yield* Ref.get(slots)
        const wrong = yield* Effect.flip(runs.accept(accepted, "review", "nope", 10))
        expect(wrong.code).toBe("ORCHESTRATION_SLOT_FORBIDDEN")
        expect((yield* Effect.flip(runs.accept(accepted, "review", secretOf(slot!), -1))).code).toBe("CONFIG_INVALID_REQUEST")
        yield* TestClock.adjust("3 seconds")
        expect(yield* runs.accept(accepted, "review", secretOf(slot!), 10)).toBe("Accepted")
        // the original deadline (4 s) passes: still open
        yield* TestClock.adjust("2 seconds")
        expect((yield* runs.poll(accepted)).status).toBe("suspended")
        yield* TestClock.adjust("6 seconds")
        expect((yield* runs.poll(accepted)).status).toBe("suspended")
        // the new one (3 s + 10 s) closes it
        yield* TestClock.adjust("2 seconds")
        const expired = yield* runs.await(accepted)
        expect(expired.result).toMatchObject({ outcome: "expired" })

        const declined = yield* runs.start(Approval, { slaMillis: 60_000 })
        yield* runs.await(declined, { untilSuspended: true })
        const other = (yield* Ref.get(slots)).find((s) => s.runId === declined)!
        expect(yield* runs.decline(declined, "review", secretOf(other), "overbooked")).toBe("Declined")
        // the run may still be finishing its suspension: the layer resumes it again shortly after (its kick)
        yield* TestClock.adjust("1 second")
        const done = yield* runs.await(declined)
        expect(done.result).toMatchObject({ outcome: "declined:overbooked" })
        const late = yield* Effect.flip(runs.respond(declined, "review", secretOf(other), { approved: true, note: "" }))
        expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      })
    ), 20_000)
})
