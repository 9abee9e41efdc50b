/**
 * The cancellation registry of a facade: the requests running now (each with the
 * signal that cancels it), cancels that came before their request (kept for a
 * window), and the ids of requests that recently finished.
 *
 * A cancel for a running request interrupts it: the request hands the registry
 * its interrupt when it starts (`onCancel`), with no fiber waiting on a signal. A cancel for an id not seen yet is
 * kept until its window ends and applied when a request with that id starts (a
 * client that hangs up at once still ends its request in CANCELLED). A cancel for
 * a finished request is dropped, so it never hits a later request reusing the id;
 * a request that was refused before it ran (it did not decode) counts as finished.
 *
 * State: plain Maps in one closure, read and written only inside synchronous
 * steps (`Effect.sync`). One step is atomic between fibers, so each operation
 * sees and leaves one consistent state, without a Ref of immutable maps copied
 * on every request (and without the Ref's get-then-set gap a cancel had with
 * the pending map beside it). Pending cancels and finished ids are bounded.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { makeSessions } from "../../services/internal/Sessions.js"

export interface Options {
  /** How long a cancel that came before its request stays pending. */
  readonly pendingWindow: Duration.DurationInput
  /** At most this many pending cancels and finished ids are remembered (oldest dropped first; at least 1). Default 1024. */
  readonly maxRemembered?: number | undefined
}

/** A request that started: whether a cancel already waited for it, and where its cancel goes. */
export interface Registration {
  readonly cancelledEarly: boolean
  /** `interrupt` is called when a cancel for the request comes (at once if one came since it registered), at most once. */
  readonly onCancel: (interrupt: () => void) => void
}

export interface Cancellations {
  /** A request with this id starts. */
  readonly register: (requestId: string) => Effect.Effect<Registration>
  /** The request is over (answered, failed, or refused before it ran): later cancels for it are dropped. */
  readonly finish: (requestId: string) => Effect.Effect<void>
  /** Cancels the running request (true when this cancel is its first); else keeps the cancel pending, unless the id finished. */
  readonly cancel: (requestId: string) => Effect.Effect<boolean>
}

export const defaultMaxRemembered = 1024

/** A running request: cancelled yet, and its interrupt once it handed it over. */
class Running {
  cancelled = false
  interrupt: (() => void) | undefined = undefined
}

/** What a request is handed when it registers. */
class Registered implements Registration {
  constructor(readonly cancelledEarly: boolean, private readonly entry: Running) {}
  readonly onCancel = (interrupt: () => void): void => {
    if (this.entry.cancelled) interrupt()
    else this.entry.interrupt = interrupt
  }
}

export const make = (options: Options): Effect.Effect<Cancellations> =>
  Effect.sync(() => {
    const windowMs = Duration.toMillis(options.pendingWindow)
    const limit = options.maxRemembered ?? defaultMaxRemembered
    const running = new Map<string, Running>()
    // bounded, the least recently written dropped first: as the in-memory sessions are (a Map's own oldest entry
    // costs V8 a step over every entry deleted before it, and every request drops one finished id)
    /** id -> expiry (ms) */
    const pending = makeSessions<number>({ maxSessions: Math.max(1, limit) })
    const finished = makeSessions<true>({ maxSessions: Math.max(1, limit) })

    const registerAt = (requestId: string, now: number): Registration => {
      const entry = new Running()
      // a finished request of the same id stays among the finished: a cancel finds the running one first, and this
      // one's finish writes the id again
      running.set(requestId, entry)
      // most requests have no cancel waiting: no lookup of their id when none waits
      const until = pending.size() === 0 ? undefined : pending.get(requestId)
      if (until !== undefined) pending.remove(requestId)
      return new Registered(until !== undefined && until >= now, entry)
    }

    const register = (requestId: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => registerAt(requestId, now)))

    const finish = (requestId: string) => Effect.sync(() => {
      const entry = running.get(requestId)
      if (entry !== undefined) {
        // the request's interrupt let go as it ends: it holds the request's fiber, which must not outlive it
        entry.interrupt = undefined
        running.delete(requestId)
      }
      if (pending.size() > 0) pending.remove(requestId)
      finished.put(requestId, true, 0)
    })

    const cancel = (requestId: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.suspend(() => {
          const entry = running.get(requestId)
          if (entry !== undefined) {
            if (entry.cancelled) return Effect.succeed(false)
            entry.cancelled = true
            entry.interrupt?.()
            return Effect.succeed(true)
          }
          if (finished.get(requestId) === undefined) {
            for (const id of pending.ids()) if (pending.get(id)! < now) pending.remove(id)
            pending.put(requestId, now + windowMs, 0)
          }
          return Effect.succeed(false)
        }))

    return { register, finish, cancel }
  })
