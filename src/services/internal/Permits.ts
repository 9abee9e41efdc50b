/**
 * Permits (a semaphore) taken in the step that asks for one when one is free.
 *
 * Effect's Semaphore takes a permit through `Effect.async` even when one is
 * free: the fiber suspends and is resumed by a message. On a fiber started on
 * the caller's stack (services/internal/Start, which the facade's requests and
 * internal/Timeout use), a resumption queued while the fiber starts is run
 * later by the scheduler: the caller finds the fiber unfinished, waits on it,
 * and the request hops through the scheduler though nothing was contended.
 * Elsewhere it costs the operations of an interruptible async region on every
 * take (an AgentLoop turn's lock, the llama.cpp engine's sequence pool, each
 * run right after milliseconds of native work, when every operation is slow).
 *
 * Here a free permit is taken synchronously (one step); when none is free the
 * taker waits in order (first come, first served), and `release` hands the
 * permit straight to the next waiter. A waiter interrupted before it got a
 * permit leaves the queue; one interrupted after it was handed one passes it on.
 */
import * as Effect from "effect/Effect"

export interface Permits {
  /** Waits for a permit and takes it. */
  readonly take: Effect.Effect<void>
  /** Gives a permit back: to the next waiter, if any. */
  readonly release: Effect.Effect<void>
  /** How many permits are free now. */
  readonly unsafeFree: () => number
  /**
   * Takes a permit now, if one is free (none is while anybody waits): true when
   * taken (give it back with `release` or `unsafeRelease`), false when the
   * caller must `take` (and wait its turn).
   */
  readonly unsafeTryTake: () => boolean
  /** `release`, now: for a caller already in a step of its own (and uninterruptible). */
  readonly unsafeRelease: () => void
}

/** `permits` permits, all free (one: a lock). */
export const unsafeMake = (permits: number): Permits => {
  let free = permits
  const waiters = new Set<() => void>()

  const unsafeRelease = () => {
    const next = waiters.values().next()
    if (next.done === true) {
      free++
      return
    }
    waiters.delete(next.value)
    // the permit is the next waiter's now
    next.value()
  }

  const unsafeTryTake = () => {
    if (free === 0) return false
    free--
    return true
  }

  const take: Effect.Effect<void> = Effect.suspend(() => {
    if (unsafeTryTake()) return Effect.void
    return Effect.async<void>((resume) => {
      let handed = false
      const waiter = () => {
        handed = true
        resume(Effect.void)
      }
      waiters.add(waiter)
      return Effect.sync(() => {
        // interrupted while waiting: out of the queue; handed a permit already: it goes on to the next
        if (handed) unsafeRelease()
        else waiters.delete(waiter)
      })
    })
  })

  return {
    take,
    release: Effect.sync(unsafeRelease),
    unsafeFree: () => free,
    unsafeTryTake,
    unsafeRelease
  }
}
