/**
 * services/internal/Permits: a permit taken in the step that asks for it when
 * one is free (no suspension, so a fiber started on the caller's stack runs on
 * through it), waited for in order when none is, never lost to an interruption.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Runtime from "effect/Runtime"
import * as Permits from "../src/services/internal/Permits.js"

describe("Permits", () => {
  it.effect("a free lock is taken without suspending: a fiber started at once has ended when it returns", () =>
    Effect.gen(function* () {
      const lock = Permits.unsafeMake(1)
      const runtime = yield* Effect.runtime<never>()
      const fiber = Runtime.runFork(runtime)(Effect.zipRight(lock.take, Effect.zipRight(lock.release, Effect.succeed("done"))))
      expect(fiber.unsafePoll()?._tag).toBe("Success")
      expect(lock.unsafeFree()).toBe(1)
    }))

  it.effect("unsafeTryTake takes a free permit at once, and none while all are taken (a waiter keeps its turn)", () =>
    Effect.gen(function* () {
      const lock = Permits.unsafeMake(1)
      expect(lock.unsafeTryTake()).toBe(true)
      expect(lock.unsafeFree()).toBe(0)
      expect(lock.unsafeTryTake()).toBe(false)
      const order: Array<string> = []
      const waiter = yield* Effect.fork(Effect.zipRight(lock.take, Effect.sync(() => order.push("waiter"))))
      yield* Effect.yieldNow()
      // released now: the permit goes straight to the waiter, not to the next unsafeTryTake
      lock.unsafeRelease()
      expect(lock.unsafeTryTake()).toBe(false)
      yield* Fiber.join(waiter)
      expect(order).toEqual(["waiter"])
      yield* lock.release
      expect(lock.unsafeTryTake()).toBe(true)
      lock.unsafeRelease()
      expect(lock.unsafeFree()).toBe(1)
    }))

  it.effect("waiters get the lock in the order they asked, each after the holder lets it go", () =>
    Effect.gen(function* () {
      const lock = Permits.unsafeMake(1)
      const order: Array<string> = []
      yield* lock.take
      const waiter = (name: string) =>
        Effect.fork(Effect.zipRight(lock.take, Effect.zipRight(Effect.sync(() => order.push(name)), lock.release)))
      const a = yield* waiter("a")
      const b = yield* waiter("b")
      const c = yield* waiter("c")
      yield* Effect.yieldNow()
      expect(order).toEqual([])
      expect(lock.unsafeFree()).toBe(0)
      yield* lock.release
      yield* Fiber.joinAll([a, b, c])
      expect(order).toEqual(["a", "b", "c"])
      expect(lock.unsafeFree()).toBe(1)
    }))

  it.effect("a waiter interrupted while it waits leaves the queue; the next one gets the lock", () =>
    Effect.gen(function* () {
      const lock = Permits.unsafeMake(1)
      yield* lock.take
      const gone = yield* Effect.fork(lock.take)
      const next = yield* Effect.fork(Effect.zipRight(lock.take, Effect.succeed("next")))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(gone)
      yield* lock.release
      expect(yield* Fiber.join(next)).toBe("next")
      expect(lock.unsafeFree()).toBe(0)
      yield* lock.release
      expect(lock.unsafeFree()).toBe(1)
    }))

  it.effect("a waiter handed the lock and interrupted before it resumed passes the lock on", () =>
    Effect.gen(function* () {
      const lock = Permits.unsafeMake(1)
      yield* lock.take
      const handed = yield* Effect.fork(lock.take)
      yield* Effect.yieldNow()
      // the interrupt is queued first, then the release hands the lock to `handed`: its resumption runs interrupted
      yield* Effect.sync(() => handed.unsafeInterruptAsFork(FiberId.none))
      yield* lock.release
      expect(Exit.isInterrupted(yield* Fiber.await(handed))).toBe(true)
      // `handed` was interrupted: the lock is free again, not held by nobody forever
      expect(lock.unsafeFree()).toBe(1)
      yield* lock.take
      expect(lock.unsafeFree()).toBe(0)
    }))

  it.effect("of n permits, n are taken at once and the next taker waits for a release", () =>
    Effect.gen(function* () {
      const permits = Permits.unsafeMake(2)
      yield* permits.take
      yield* permits.take
      expect(permits.unsafeFree()).toBe(0)
      const third = yield* Effect.fork(permits.take)
      yield* Effect.yieldNow()
      expect(third.unsafePoll()).toBeNull()
      yield* permits.release
      yield* Fiber.join(third)
      // handed over: still none free
      expect(permits.unsafeFree()).toBe(0)
      yield* permits.release
      yield* permits.release
      expect(permits.unsafeFree()).toBe(2)
    }))
})
