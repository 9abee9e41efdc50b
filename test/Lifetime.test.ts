/**
 * adapters/http/Lifetime.runTied: a request's run tied to its connection, under
 * the server's backstop (its time limit and a grace). A run that ends in time is
 * its answer and leaves no fiber behind; a run that outlives the backstop is
 * cancelled, then interrupted after the grace, and answered CANCELLED_TIMEOUT;
 * a caller that goes away cancels the run.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Supervisor from "effect/Supervisor"
import * as TestClock from "effect/TestClock"
import { SystemResponse } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Lifetime from "../src/adapters/http/Lifetime.js"
import type { Facade } from "../src/programs/Facade.js"

const answered = new SystemResponse({ requestId: "r1", content: "done", toolCallsMade: [], tokenUsage: TokenUsage.empty })

/** A facade whose only used method is `cancel`, counting the cancels it gets. */
const facade = () => {
  const cancels: Array<string> = []
  const system = {
    cancel: (requestId: string) => Effect.sync(() => (cancels.push(requestId), true))
  } as unknown as Facade
  return { system, cancels }
}

describe("Lifetime.runTied", () => {
  it.effect("a run that ends in time is the answer; its timer does not outlive it", () =>
    Effect.gen(function* () {
      const { cancels, system } = facade()
      const supervisor = yield* Supervisor.track
      const response = yield* Lifetime.runTied(system, "r1", Effect.succeed(answered), Duration.hours(1)).pipe(
        Effect.supervised(supervisor)
      )
      expect(response).toBe(answered)
      yield* TestClock.adjust("1 millis")
      expect(yield* supervisor.value).toEqual([])
      expect(cancels).toEqual([])
    }))

  it.effect("a run that outlives the backstop is cancelled, interrupted after the grace, and answered CANCELLED_TIMEOUT", () =>
    Effect.gen(function* () {
      const { cancels, system } = facade()
      const interrupted = yield* Deferred.make<void>()
      const stuck = Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)), Effect.as(answered))
      const caller = yield* Effect.fork(Lifetime.runTied(system, "r2", stuck, Duration.seconds(10)))
      yield* TestClock.adjust("10 seconds")
      expect(cancels).toEqual(["r2"])
      expect(yield* Deferred.isDone(interrupted)).toBe(false)
      yield* TestClock.adjust(Lifetime.cancelGrace)
      const response = yield* Fiber.join(caller)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
      expect(response.error).toMatchObject({ code: "CANCELLED_TIMEOUT", category: "Cancellation" })
      expect(response.error?.message).toMatch(/server's time limit/)
    }))

  it("the grace a cancelled run has before it is interrupted is 5 s", () => {
    expect(Duration.toMillis(Lifetime.cancelGrace)).toBe(5_000)
  })

  it.effect("a caller that goes away cancels the run, which is interrupted after the grace if it ignores the cancel", () =>
    Effect.gen(function* () {
      const { cancels, system } = facade()
      const supervisor = yield* Supervisor.track
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      // a run that ignores its cancel (the fake facade's cancel does nothing)
      const stuck = Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
        Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)),
        Effect.as(answered)
      )
      const caller = yield* Effect.fork(Lifetime.runTied(system, "r3", stuck, Duration.hours(1)).pipe(Effect.supervised(supervisor)))
      yield* Deferred.await(started)
      const stopping = yield* Effect.fork(Fiber.interrupt(caller))
      yield* TestClock.adjust(Duration.subtract(Lifetime.cancelGrace, Duration.millis(1)))
      expect(cancels).toEqual(["r3"])
      // the run ignores the cancel: still running a moment before the grace ends
      expect(yield* Deferred.isDone(interrupted)).toBe(false)
      yield* TestClock.adjust("1 millis")
      // awaited against a real timer: a stop that cannot end (an uninterruptible wait in a finalizer,
      // which the grace could not cut off) fails here instead of hanging the test
      const stopped = yield* Effect.raceFirst(
        Effect.as(Fiber.await(stopping), "stopped" as const),
        Effect.as(Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10_000).unref())), "hung" as const)
      )
      expect(stopped).toBe("stopped")
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
      expect(yield* supervisor.value).toEqual([])
    }), 20_000)
})
