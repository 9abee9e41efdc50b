/**
 * services/internal/Local: a fiber ref (or the context) changed for one effect,
 * set back however it ends, as Effect's `locally` and `provide` do, at fewer
 * operations.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Local from "../src/services/internal/Local.js"
import { operations } from "./support/Operations.js"

const ref = FiberRef.unsafeMake("outer")
class Name extends Context.Tag("test/Local/Name")<Name, string>() {}
class Other extends Context.Tag("test/Local/Other")<Other, number>() {}

describe("Local", () => {
  it.effect("sets the value for the effect and back after success, failure and defect", () =>
    Effect.gen(function* () {
      expect(yield* Local.locally(FiberRef.get(ref), ref, "inner")).toBe("inner")
      expect(yield* FiberRef.get(ref)).toBe("outer")
      const failed = yield* Effect.exit(Local.locally(Effect.fail("no"), ref, "inner"))
      expect(failed).toEqual(Exit.fail("no"))
      expect(yield* FiberRef.get(ref)).toBe("outer")
      const died = yield* Effect.exit(Local.locally(Effect.dieMessage("boom"), ref, "inner"))
      expect(Exit.isFailure(died)).toBe(true)
      expect(yield* FiberRef.get(ref)).toBe("outer")
      expect(yield* Local.locallyWith(FiberRef.get(ref), ref, (v) => `${v}+`)).toBe("outer+")
    }))

  it.effect("sets the value back before the caller's finalizers run when the effect is interrupted", () =>
    Effect.gen(function* () {
      const seen = yield* Deferred.make<string>()
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Effect.ensuring(
          Local.locally(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never), ref, "inner"),
          Effect.flatMap(FiberRef.get(ref), (v) => Deferred.succeed(seen, v))
        )
      )
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      expect(yield* Deferred.await(seen)).toBe("outer")
    }))

  it.effect("fibers forked inside see the value", () =>
    Effect.gen(function* () {
      const inner = yield* Local.locally(Effect.flatMap(Effect.fork(FiberRef.get(ref)), Fiber.join), ref, "inner")
      expect(inner).toBe("inner")
    }))

  it.effect("provide adds services to the caller's and replaces the same tags, for the effect only", () =>
    Effect.gen(function* () {
      const both = Effect.all([Name, Other])
      const inside = yield* Local.provide(both, Context.make(Name, "new")).pipe(Effect.provideService(Name, "old"), Effect.provideService(Other, 1))
      expect(inside).toEqual(["new", 1])
      const serviced = yield* Local.provideService(Name, Name, "svc")
      expect(serviced).toBe("svc")
      expect(Context.getOption(yield* Effect.context<never>(), Name)._tag).toBe("None")
    }))

  it.effect("costs fewer operations than Effect's own", () =>
    Effect.gen(function* () {
      const ours = yield* operations(Local.locallyWith(Effect.void, ref, () => "x"))
      const effects = yield* operations(Effect.locally(Effect.void, ref, "x"))
      const provided = yield* operations(Local.provide(Effect.void, Context.make(Name, "n")))
      const effectsProvided = yield* operations(Effect.provide(Effect.void, Context.make(Name, "n")))
      expect(ours).toBeLessThanOrEqual(9)
      expect(ours).toBeLessThan(effects)
      expect(provided).toBeLessThan(effectsProvided)
    }))

  it.effect("locally is one operation when the ref holds the value already", () =>
    Effect.gen(function* () {
      const same = yield* operations(Local.locally(Effect.void, ref, "outer"))
      const other = yield* operations(Local.locally(Effect.void, ref, "inner"))
      expect(same).toBe((yield* operations(Effect.void)) + 1)
      expect(other).toBeGreaterThan(same)
      expect(other).toBeLessThanOrEqual(10)
      expect(yield* Local.locally(FiberRef.get(ref), ref, "outer")).toBe("outer")
    }))

  it.effect("provide is one operation when the caller holds those services already", () =>
    Effect.gen(function* () {
      const held = Context.make(Name, "n")
      const again = yield* operations(Local.provide(Effect.void, held)).pipe(Effect.provide(held))
      const serviceAgain = yield* operations(Local.provideService(Effect.void, Name, "n")).pipe(Effect.provide(held))
      const other = yield* operations(Local.provide(Effect.void, Context.make(Name, "m"))).pipe(Effect.provide(held))
      expect(again).toBeLessThanOrEqual(1)
      expect(serviceAgain).toBeLessThanOrEqual(1)
      expect(other).toBeGreaterThan(5)
      expect(yield* Local.provide(Name, Context.make(Name, "m")).pipe(Effect.provide(held))).toBe("m")
    }))

  it("MergeMemo: the caller's context with the given one over it, merged once per pair; nothing to merge when the caller holds it all", () => {
    const memo = new Local.MergeMemo()
    const parent = Context.make(Name, "parent") as Context.Context<never>
    const mine = Context.make(Other, 1) as Context.Context<unknown>
    const first = memo.merge(parent, mine)!
    expect(Context.get(first as Context.Context<Name | Other>, Name)).toBe("parent")
    expect(Context.get(first as Context.Context<Name | Other>, Other)).toBe(1)
    // the same pair: the same merge, not another
    expect(memo.merge(parent, mine)).toBe(first)
    // another caller's context, or another context of ours: merged again
    const other = Context.make(Name, "other") as Context.Context<never>
    const second = memo.merge(other, mine)!
    expect(second).not.toBe(first)
    expect(Context.get(second as Context.Context<Name | Other>, Name)).toBe("other")
    const mine2 = Context.make(Other, 2) as Context.Context<unknown>
    expect(Context.get(memo.merge(other, mine2) as Context.Context<Other>, Other)).toBe(2)
    // ours over the caller's: our service wins
    const clash = Context.make(Name, "ours") as Context.Context<unknown>
    expect(Context.get(memo.merge(parent, clash) as Context.Context<Name>, Name)).toBe("ours")
    // a caller that holds every service of ours (the same instances): nothing to merge
    expect(memo.merge(first, mine)).toBeUndefined()
  })
})
