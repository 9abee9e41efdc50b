/**
 * internal/Retry: `Effect.retry` without the schedule's machinery on a first
 * attempt that succeeds. Each case runs the same scripted attempts through it and
 * through `Effect.retry`, and both must agree: the outcome, the attempts made,
 * and the failures the schedule saw, in order.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schedule from "effect/Schedule"
import * as Retry from "../src/programs/internal/Retry.js"
import { operations } from "./support/Operations.js"

interface Failure {
  readonly attempt: number
  readonly retryable: boolean
}

/** Attempts that fail as `script` says (a Failure's retryable flag), then succeed with the attempt number. */
const scripted = (script: ReadonlyArray<boolean>) => {
  let attempts = 0
  const effect = Effect.suspend(() => {
    attempts++
    const retryable = script[attempts - 1]
    return retryable === undefined
      ? Effect.succeed(attempts)
      : Effect.fail<Failure>({ attempt: attempts, retryable })
  })
  return { effect, attempts: () => attempts }
}

/** Runs `script` through `retry` with a schedule of `recurs` recurrences that records its inputs. */
const run = (
  retry: (effect: Effect.Effect<number, Failure>, options: Retry.Options<Failure>) => Effect.Effect<number, Failure>,
  script: ReadonlyArray<boolean>,
  recurs: number
) =>
  Effect.gen(function*() {
    const seen: Array<number> = []
    const schedule = Schedule.recurs(recurs).pipe(Schedule.tapInput((f: Failure) => Effect.sync(() => seen.push(f.attempt))))
    const { attempts, effect } = scripted(script)
    const exit = yield* Effect.exit(retry(effect, { schedule, while: (f) => f.retryable }))
    return { exit, attempts: attempts(), seen }
  })

const cases: ReadonlyArray<readonly [string, ReadonlyArray<boolean>, number]> = [
  ["succeeds at once: the schedule is never stepped", [], 2],
  ["two retryable failures, then success", [true, true], 2],
  ["a failure that may not be retried fails at once", [false], 2],
  ["a retryable failure, then one that may not be retried", [true, false], 5],
  ["the schedule runs out: the last failure", [true, true, true, true], 2],
  ["no recurrence at all", [true], 0]
]

describe("Retry.retry agrees with Effect.retry", () => {
  for (const [name, script, recurs] of cases) {
    it.effect(name, () =>
      Effect.gen(function*() {
        const ours = yield* run(Retry.retry, script, recurs)
        const theirs = yield* run((effect, options) => Effect.retry(effect, options), script, recurs)
        expect(ours.attempts).toBe(theirs.attempts)
        expect(ours.seen).toEqual(theirs.seen)
        expect(Exit.isSuccess(ours.exit)).toBe(Exit.isSuccess(theirs.exit))
        expect(ours.exit).toStrictEqual(theirs.exit)
      }))
  }

  it.effect("pinned: two retryable failures then success take 3 attempts, the schedule seeing attempts 1 and 2", () =>
    Effect.gen(function*() {
      const { attempts, exit, seen } = yield* run(Retry.retry, [true, true], 2)
      expect(exit).toStrictEqual(Exit.succeed(3))
      expect(attempts).toBe(3)
      expect(seen).toEqual([1, 2])
      const once = yield* run(Retry.retry, [], 2)
      expect([once.attempts, once.seen]).toEqual([1, []])
    }))

  it.effect("a defect is not retried, as under Effect.retry", () =>
    Effect.gen(function*() {
      let attempts = 0
      const dying = Effect.suspend(() => {
        attempts++
        return Effect.die("boom")
      })
      const options = { schedule: Schedule.recurs(3), while: () => true }
      const ours = yield* Effect.exit(Retry.retry(dying, options))
      expect(attempts).toBe(1)
      const theirs = yield* Effect.exit(Effect.retry(dying, options))
      expect(attempts).toBe(2)
      expect(ours).toStrictEqual(theirs)
    }))

  it.effect("a first success costs one operation more than the effect (the failure handler pushed)", () =>
    Effect.gen(function*() {
      const options = { schedule: Schedule.recurs(3), while: () => true }
      const plain = yield* operations(Effect.sync(() => 1))
      expect(yield* operations(Retry.retry(Effect.sync(() => 1), options))).toBe(plain + 1)
    }))
})
