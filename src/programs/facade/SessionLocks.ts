/**
 * One chat turn at a time per session, across the facade's requests.
 *
 * A chat request loads its session, runs a turn on it and commits the session
 * when the turn answered. Two requests on one session at once (a client that
 * retries, two tabs) would each run their turn on the history before either
 * committed: the second answer made without the first turn, and the stored
 * history in whatever order the commits came. So a request holds its session
 * from the load to the commit, and the next request on that session waits its
 * turn (first come, first served; a waiter that is cancelled or times out leaves
 * the queue). Requests on other sessions never wait for each other.
 *
 * A session's lock exists only while a request holds or waits for it: the map
 * holds the sessions with requests in flight, not every session ever seen. A
 * free lock is taken in the step that asks for it (services/internal/Permits).
 */
import * as Effect from "effect/Effect"
import * as Permits from "../../services/internal/Permits.js"

export interface SessionLocks {
  /** `effect`, holding `sessionId`'s lock: run when no other request of the facade holds it. */
  readonly withSession: <A, E, R>(sessionId: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** How many sessions have a request holding or waiting for their lock (for tests). */
  readonly unsafeSize: () => number
}

interface Lock {
  readonly permits: Permits.Permits
  /** Requests holding or waiting for it. */
  users: number
}

export const make = (): SessionLocks => {
  const locks = new Map<string, Lock>()

  const withSession = <A, E, R>(sessionId: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        let lock = locks.get(sessionId)
        if (lock === undefined) {
          lock = { permits: Permits.unsafeMake(1), users: 0 }
          locks.set(sessionId, lock)
        }
        const held = lock
        held.users++
        const leave = () => {
          held.users--
          if (held.users === 0 && locks.get(sessionId) === held) locks.delete(sessionId)
        }
        // the lock let go and the request counted out in the step that ends `effect`, however it ends
        const run = Effect.matchCauseEffect(restore(effect), {
          onFailure: (cause) =>
            Effect.suspend(() => {
              held.permits.unsafeRelease()
              leave()
              return Effect.failCause(cause)
            }),
          onSuccess: (a) =>
            Effect.sync(() => {
              held.permits.unsafeRelease()
              leave()
              return a
            })
        })
        if (held.permits.unsafeTryTake()) return run
        // a held lock is waited for, interruptibly; a waiter that gives up leaves (Permits passes on a permit it was handed)
        return Effect.matchCauseEffect(restore(held.permits.take), {
          onFailure: (cause) => Effect.suspend(() => (leave(), Effect.failCause(cause))),
          onSuccess: () => run
        })
      })
    )

  return { withSession, unsafeSize: () => locks.size }
}
