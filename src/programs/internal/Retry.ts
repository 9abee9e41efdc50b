/**
 * `Effect.retry` whose first attempt costs nothing extra: the schedule's driver
 * (its state, its clock) is made only after a first failure, and that failure is
 * handed to it as its first input, so the schedule sees the same failures in the
 * same order as under `Effect.retry`. On the hot path most
 * calls succeed at once, and `Effect.retry` costs as much as the call around a
 * model that answers at once (issue 13).
 */
import * as Effect from "effect/Effect"
import type * as Schedule from "effect/Schedule"

export interface Options<E> {
  readonly schedule: Schedule.Schedule<unknown, E>
  /** Whether a failure may be retried; one that may not fails at once. */
  readonly while: (error: E) => boolean
}

/** Runs `effect`; a failure that `while` accepts is retried on `schedule`, as `Effect.retry(effect, options)` would. */
export const retry = <A, E, R>(effect: Effect.Effect<A, E, R>, options: Options<E>): Effect.Effect<A, E, R> =>
  Effect.catchAll(effect, (first) => {
    // Also a failure `while` refuses goes to Effect.retry: its schedule sees it, as under Effect.retry.
    let replayed = false
    const again = Effect.suspend(() => {
      if (replayed) return effect
      replayed = true
      return Effect.fail(first)
    })
    return Effect.retry(again, options)
  })
