/**
 * A mutual-exclusion lock taken in the step that asks for it when it is free.
 *
 * Effect's Semaphore takes a permit through `Effect.async` even when one is
 * free: the fiber suspends and is resumed by a message. On a fiber started on
 * the caller's stack (services/internal/Start, which the facade's requests and
 * internal/Timeout use), a resumption queued while the fiber starts is run
 * later by the scheduler: the caller finds the fiber unfinished, waits on it,
 * and the request hops through the scheduler though nothing was contended.
 * Here a free lock is taken synchronously (one step); a taken one is waited
 * for in order (first come, first served), and `release` hands it straight to
 * the next waiter. A waiter interrupted before it got the lock leaves the
 * queue; one interrupted after it was handed the lock passes it on.
 */
import * as Effect from "effect/Effect"

export interface Lock {
  /** Waits for the lock and takes it. */
  readonly take: Effect.Effect<void>
  /** Lets the lock go: to the next waiter, if any. */
  readonly release: Effect.Effect<void>
  /** Whether somebody holds the lock now. */
  readonly unsafeHeld: () => boolean
}

export const unsafeMake = (): Lock => {
  let held = false
  const waiters = new Set<(handedOver: boolean) => void>()

  const unsafeRelease = () => {
    const next = waiters.values().next()
    if (next.done === true) {
      held = false
      return
    }
    waiters.delete(next.value)
    // the lock stays held: it is the next waiter's now
    next.value(true)
  }

  const take: Effect.Effect<void> = Effect.suspend(() => {
    if (!held) {
      held = true
      return Effect.void
    }
    return Effect.async<void>((resume) => {
      let handed = false
      const waiter = () => {
        handed = true
        resume(Effect.void)
      }
      waiters.add(waiter)
      return Effect.sync(() => {
        // interrupted while waiting: out of the queue; handed the lock already: it goes on to the next
        if (handed) unsafeRelease()
        else waiters.delete(waiter)
      })
    })
  })

  return {
    take,
    release: Effect.sync(unsafeRelease),
    unsafeHeld: () => held
  }
}

export const make: Effect.Effect<Lock> = Effect.sync(unsafeMake)
