/**
 * `Effect.retry` whose first attempt costs nothing extra: the schedule's driver
 * (its state, its clock) is made only after a first failure, and that failure is
 * handed to it as its first input, so the schedule sees the same failures in the
 * same order as under `Effect.retry`. On the hot path most
 * calls succeed at once, and `Effect.retry` costs as much as the call around a
 * model that answers at once (issue 13).
 */
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import type * as Schedule from "effect/Schedule"

export interface Options<E> {
  readonly schedule: Schedule.Schedule<unknown, E>
  /** Whether a failure may be retried; one that may not fails at once. */
  readonly while: (error: E) => boolean
}

/** Runs `effect`; a failure that `while` accepts is retried on `schedule`, as `Effect.retry(effect, options)` would. */
export const retry = <A, E, R>(effect: Effect.Effect<A, E, R>, options: Options<E>): Effect.Effect<A, E, R> =>
  // a failure-only handler: a success passes it by without a step of its own (Effect.catchAll's would take one)
  Effect.catchAllCause(effect, (cause) => {
    // what Effect.catchAll hands on: the first failure, when the cause has no defect
    const failures = Cause.failures(cause)
    if (Chunk.isNonEmpty(Cause.defects(cause)) || !Chunk.isNonEmpty(failures)) return Effect.failCause(cause)
    const first = Chunk.headNonEmpty(failures)
    // Also a failure `while` refuses goes to Effect.retry: its schedule sees it, as under Effect.retry.
    let replayed = false
    const again = Effect.suspend(() => {
      if (replayed) return effect
      replayed = true
      return Effect.fail(first)
    })
    return Effect.retry(again, options)
  })
