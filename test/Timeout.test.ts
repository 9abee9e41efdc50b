/**
 * services/internal/Timeout: `Effect.timeoutFail` with one fiber, started at
 * once, on the live clock (real time here, bounded), Effect's own under the
 * TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as TestClock from "effect/TestClock"
import * as Timeout from "../src/services/internal/Timeout.js"
import { operations } from "./support/Operations.js"

const ref = FiberRef.unsafeMake(0)
const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length

describe("Timeout", () => {
  it.live("the effect's success or failure is the result, its fiber refs kept; no timer stays", () =>
    Effect.gen(function* () {
      const before = timers()
      const value = yield* Timeout.timeoutFail(Effect.as(FiberRef.set(ref, 7), "done"), "1 hour", () => "late")
      expect(value).toBe("done")
      expect(yield* FiberRef.get(ref)).toBe(7)
      const failed = yield* Effect.exit(Timeout.timeoutFail(Effect.fail("no"), "1 hour", () => "late"))
      expect(failed).toEqual(Exit.fail("no"))
      const async = yield* Timeout.timeoutFail(Effect.as(Effect.sleep("5 millis"), "slept"), "1 hour", () => "late")
      expect(async).toBe("slept")
      expect(timers()).toBe(before)
    }))

  it.live("past the duration the effect is interrupted and awaited, then onTimeout", () =>
    Effect.gen(function* () {
      const finalized = yield* Deferred.make<void>()
      const started = Date.now()
      const exit = yield* Effect.exit(
        Timeout.timeoutFail(Effect.onInterrupt(Effect.never, () => Deferred.succeed(finalized, undefined)), "50 millis", () => "late")
      )
      expect(exit).toEqual(Exit.fail("late"))
      expect(yield* Deferred.isDone(finalized)).toBe(true)
      expect(Date.now() - started).toBeGreaterThanOrEqual(45)
    }).pipe(Effect.timeout("10 seconds")))

  it.live("a caller interrupted while it waits interrupts the effect", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const finalized = yield* Deferred.make<void>()
      yield* Effect.sleep("1 millis") // the bound's own timer is started
      const before = timers()
      const fiber = yield* Effect.fork(
        Timeout.timeoutFail(
          Effect.zipRight(Deferred.succeed(started, undefined), Effect.onInterrupt(Effect.never, () => Deferred.succeed(finalized, undefined))),
          "1 hour",
          () => "late"
        )
      )
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      expect(yield* Deferred.isDone(finalized)).toBe(true)
      expect(timers()).toBe(before)
    }).pipe(Effect.timeout("10 seconds")))

  it.effect("under the TestClock, time is the Clock's", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.exit(Timeout.timeoutFail(Effect.never, "5 seconds", () => "late")))
      yield* TestClock.adjust("5 seconds")
      expect(yield* Fiber.join(fiber)).toEqual(Exit.fail("late"))
    }))

  it.live("costs fewer operations than Effect.timeoutFail", () =>
    Effect.gen(function* () {
      const ours = yield* operations(Timeout.timeoutFail(Effect.succeed(1), "30 seconds", () => "late"))
      const effects = yield* operations(Effect.timeoutFail(Effect.succeed(1), { duration: "30 seconds", onTimeout: () => "late" }))
      // 12 against 56 when measured (29 when the effect's fiber was forked and awaited)
      expect(ours).toBeLessThanOrEqual(14)
      expect(ours).toBeLessThan(effects)
    }))

  it.live("an effect that does not suspend has ended when its fiber is started: no timer is set", () =>
    Effect.gen(function* () {
      const set = globalThis.setTimeout
      let timersSet = 0
      globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
        timersSet++
        return set(...args)
      }) as typeof setTimeout
      try {
        expect(yield* Timeout.timeoutFail(Effect.succeed(1), "30 seconds", () => "late")).toBe(1)
        expect(timersSet).toBe(0)
        expect(yield* Timeout.timeoutFail(Effect.as(Effect.sleep("1 millis"), 2), "30 seconds", () => "late")).toBe(2)
        // the effect's own sleep, and the bound's timer
        expect(timersSet).toBe(2)
      } finally {
        globalThis.setTimeout = set
      }
    }))

  it.live("the effect runs with the caller's services, fiber refs, span and interruptibility", () =>
    Effect.gen(function* () {
      const seen = yield* Timeout.timeoutFail(
        Effect.all([FiberRef.get(ref), Effect.map(Effect.currentSpan, (s) => s.name), Effect.checkInterruptible(Effect.succeed)]),
        "30 seconds",
        () => "late"
      ).pipe(Effect.withSpan("caller"), Effect.locally(ref, 5))
      expect(seen).toEqual([5, "caller", true])
      const masked = yield* Effect.uninterruptible(
        Timeout.timeoutFail(Effect.checkInterruptible(Effect.succeed), "30 seconds", () => "late")
      )
      expect(masked).toBe(false)
    }))
})
