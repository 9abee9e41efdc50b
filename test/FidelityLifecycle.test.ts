/**
 * Seeds 01-03 to the letter (issue #12), "done when": the lifecycle table of
 * seed 03 checked pair by pair on the machine requests run on (the tracker),
 * not only on the predicate. The seed's eight states make 64 from/to pairs;
 * the table below is the seed's, written out: INIT -> PLAN | PREPARE, PLAN ->
 * PREPARE, PREPARE -> EXECUTE, EXECUTE -> VALIDATE, VALIDATE -> COMPLETE, the
 * retry VALIDATE -> EXECUTE, EXECUTE -> COMPLETE (AgentLoop's path, which has
 * no VALIDATE), and ERROR or CANCELLED from any state that is not terminal.
 * (SUSPENDED, the durable runs' waiting state, is outside the seed; its pairs are
 * in test/Domain.test.ts.)
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type { LifecycleState } from "../src/domain/Lifecycle.js"
import * as InMemoryObserve from "../src/layers/InMemoryObserve.js"
import * as Lifecycle from "../src/programs/Lifecycle.js"
import { EventLog } from "../src/services/EventLog.js"

type SeedState = Exclude<LifecycleState, "SUSPENDED">

const seedStates: ReadonlyArray<SeedState> = ["INIT", "PLAN", "PREPARE", "EXECUTE", "VALIDATE", "COMPLETE", "ERROR", "CANCELLED"]

const seedTable: { readonly [S in SeedState]: ReadonlyArray<SeedState> } = {
  INIT: ["PLAN", "PREPARE", "ERROR", "CANCELLED"],
  PLAN: ["PREPARE", "ERROR", "CANCELLED"],
  PREPARE: ["EXECUTE", "ERROR", "CANCELLED"],
  EXECUTE: ["VALIDATE", "COMPLETE", "ERROR", "CANCELLED"],
  VALIDATE: ["EXECUTE", "COMPLETE", "ERROR", "CANCELLED"],
  COMPLETE: [],
  ERROR: [],
  CANCELLED: []
}

/** A legal way from INIT to each state. */
const pathTo: { readonly [S in SeedState]: ReadonlyArray<SeedState> } = {
  INIT: [],
  PLAN: ["PLAN"],
  PREPARE: ["PREPARE"],
  EXECUTE: ["PREPARE", "EXECUTE"],
  VALIDATE: ["PREPARE", "EXECUTE", "VALIDATE"],
  COMPLETE: ["PREPARE", "EXECUTE", "COMPLETE"],
  ERROR: ["ERROR"],
  CANCELLED: ["CANCELLED"]
}

describe("the seed's lifecycle table, pair by pair, on the tracker", { timeout: 20_000 }, () => {
  it.effect("64 pairs: each allowed move is made (only the retry counts an attempt), each other is refused and changes nothing", () =>
    Effect.gen(function* () {
      const checked: Array<string> = []
      for (const from of seedStates) {
        for (const to of seedStates) {
          const tracker = yield* Lifecycle.makeTracker
          for (const step of pathTo[from]) expect(yield* tracker.transition(step, "on the way")).toBe(true)
          const before = yield* tracker.state
          expect(before.current).toBe(from)
          const moved = yield* tracker.transition(to, "the pair under test")
          const after = yield* tracker.state
          const allowed = seedTable[from].includes(to)
          expect({ from, to, moved }).toEqual({ from, to, moved: allowed })
          expect({ from, to, now: after.current }).toEqual({ from, to, now: allowed ? to : from })
          expect({ from, to, attempt: after.attempt - before.attempt }).toEqual({
            from,
            to,
            attempt: from === "VALIDATE" && to === "EXECUTE" ? 1 : 0
          })
          const history = yield* tracker.history
          expect(history.length).toBe(pathTo[from].length + (allowed ? 1 : 0))
          checked.push(`${from}->${to}`)
        }
      }
      expect(new Set(checked).size).toBe(64)
    }))

  it.effect("the same 64 pairs through the moves made inside a step (the facade's when nobody observes)", () =>
    Effect.withFiberRuntime<void>((fiber) => {
      let pairs = 0
      for (const from of seedStates) {
        for (const to of seedStates) {
          const tracker = Lifecycle.unsafeMakeTracker(fiber)!
          for (const step of pathTo[from]) expect(tracker.unsafeTransition(fiber, step)).toBe(true)
          const before = tracker.unsafeState()
          expect(before.current).toBe(from)
          const moved = tracker.unsafeTransition(fiber, to)
          const after = tracker.unsafeState()
          const allowed = seedTable[from].includes(to)
          expect({ from, to, moved }).toEqual({ from, to, moved: allowed })
          expect({ from, to, now: after.current }).toEqual({ from, to, now: allowed ? to : from })
          expect(after.attempt - before.attempt).toBe(from === "VALIDATE" && to === "EXECUTE" ? 1 : 0)
          expect(tracker.unsafeHistory().length).toBe(pathTo[from].length + (allowed ? 1 : 0))
          pairs++
        }
      }
      expect(pairs).toBe(64)
      return Effect.void
    }))

  it.effect("when somebody records, no move is made inside a step: moveThen moves as an effect, and the event is recorded", () =>
    Effect.gen(function* () {
      // made where nobody records; the move happens where an EventLog keeps events
      const tracker = yield* Effect.withFiberRuntime<Lifecycle.Tracker>((fiber) => Effect.succeed(Lifecycle.unsafeMakeTracker(fiber)!))
      const observed = Effect.gen(function* () {
        expect(yield* Effect.withFiberRuntime<Lifecycle.Tracker | undefined>((fiber) => Effect.succeed(Lifecycle.unsafeMakeTracker(fiber)))).toBeUndefined()
        expect(yield* Effect.withFiberRuntime<boolean | undefined>((fiber) => Effect.succeed(tracker.unsafeTransition(fiber, "PREPARE")))).toBeUndefined()
        expect((yield* tracker.state).current).toBe("INIT")
        const after = yield* Lifecycle.moveThen(tracker, "PREPARE", "recorded", tracker.state)
        expect(after.current).toBe("PREPARE")
        const events = yield* Effect.flatMap(EventLog, (log) => log.events)
        expect(events.map((e) => e._tag === "LifecycleTransition" ? `${e.fromState}->${e.toState} ${e.reason}` : e._tag))
          .toEqual(["INIT->PREPARE recorded"])
      })
      yield* observed.pipe(Effect.provide(InMemoryObserve.layerMemory()))
      // and where nobody records, moveThen moves inside the step that starts the effect
      const executing = yield* Lifecycle.moveThen(tracker, "EXECUTE", "quiet", tracker.state)
      expect(executing.current).toBe("EXECUTE")
      expect(tracker.unsafeHistory()).toEqual([{ from: "INIT", to: "PREPARE" }, { from: "PREPARE", to: "EXECUTE" }])
    }))
})
