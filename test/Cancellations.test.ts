/**
 * The facade's cancellation registry, rule by rule: a cancel signals a running
 * request; one that comes first waits its window; one for a finished request
 * (answered or refused before it ran) is dropped; the memory of both is bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as Cancellations from "../src/programs/facade/Cancellations.js"
import { collect } from "./support/Gc.js"

describe("facade/Cancellations", () => {
  it.effect("a cancel interrupts the running request, once", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds" })
      const { cancelledEarly, onCancel } = yield* registry.register("r1")
      expect(cancelledEarly).toBe(false)
      let interrupts = 0
      onCancel(() => interrupts++)
      expect(interrupts).toBe(0)
      expect(yield* registry.cancel("r1")).toBe(true)
      expect(interrupts).toBe(1)
      // a second cancel is not the first: nothing more happens
      expect(yield* registry.cancel("r1")).toBe(false)
      expect(interrupts).toBe(1)
    }))

  it.effect("a cancel between registering and handing over the interrupt applies when it is handed over", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds" })
      const { onCancel } = yield* registry.register("r2")
      expect(yield* registry.cancel("r2")).toBe(true)
      let interrupts = 0
      onCancel(() => interrupts++)
      expect(interrupts).toBe(1)
    }))

  it.effect("a cancel before its request applies when it starts within the window, not after", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds" })
      expect(yield* registry.cancel("early")).toBe(false)
      yield* TestClock.adjust("4 seconds")
      expect((yield* registry.register("early")).cancelledEarly).toBe(true)
      // consumed: the next request with the id is not cancelled
      yield* registry.finish("early")
      yield* registry.cancel("late")
      yield* TestClock.adjust("6 seconds")
      expect((yield* registry.register("late")).cancelledEarly).toBe(false)
    }))

  it.effect("a cancel for a finished request (answered or refused) hits no later request reusing the id", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds" })
      yield* registry.register("done")
      yield* registry.finish("done")
      expect(yield* registry.cancel("done")).toBe(false)
      expect((yield* registry.register("done")).cancelledEarly).toBe(false)
      // refused before it ran: finish without register
      yield* registry.finish("refused")
      yield* registry.cancel("refused")
      expect((yield* registry.register("refused")).cancelledEarly).toBe(false)
    }))

  it.effect("pending cancels and finished ids are bounded, the oldest dropped first", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds", maxRemembered: 3 })
      for (const id of ["a", "b", "c", "d"]) yield* registry.cancel(id)
      // "a" was dropped: its request starts uncancelled; "d" still waits
      expect((yield* registry.register("a")).cancelledEarly).toBe(false)
      expect((yield* registry.register("d")).cancelledEarly).toBe(true)
      expect(Cancellations.defaultMaxRemembered).toBe(1024)
    }))

  it.effect("a finished request's interrupt is let go, though its registration is still held (it holds the request's fiber)", () =>
    Effect.gen(function* () {
      const registry = yield* Cancellations.make({ pendingWindow: "5 seconds" })
      const registration = yield* registry.register("held")
      // the interrupt a request hands over reaches its fiber: here, a value whose collection is watched
      const watched = ((): WeakRef<object> => {
        const fiberLike = { state: new Array(1024).fill(0) }
        registration.onCancel(() => void fiberLike.state.length)
        return new WeakRef(fiberLike)
      })()
      yield* registry.finish("held")
      yield* Effect.promise(collect)
      // the registration (held by the request's own state, which V8 may keep past the request) reaches nothing of it
      expect(registration.cancelledEarly).toBe(false)
      expect(watched.deref()).toBeUndefined()
    }))
})
