/**
 * The scope every turn of an AgentLoop runs in: the loop's turn lock, the turn's
 * deadline and correlation ids, and the loop's observability services.
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Construct from "../../domain/Construct.js"
import type { Cancellation } from "../../domain/Failure.js"
import { CorrelationContext } from "../../domain/System.js"
import { currentCorrelation } from "../../services/EventLog.js"
import * as Local from "../../services/internal/Local.js"
import * as Deadline from "../internal/Deadline.js"
import * as Observed from "../internal/Observed.js"
import type { Loop } from "./Loop.js"

/**
 * One turn at a time (the turn lock), under the turn's deadline and correlation
 * ids, with the observability services; `commit`, given the turn's result, runs
 * uninterruptibly once the turn completes, before the lock is let go. One
 * uninterruptible region holds all of it: the lock's `withPermits`, a
 * `withCorrelation` and a masked commit would be three (about 55 operations a
 * turn, on a turn of about 300). A free lock is taken, and the correlation set,
 * in the step that starts the turn; both are put back in one step at its end.
 */
export const withTurnScope = <A, E>(
  loop: Loop,
  effect: Effect.Effect<A, E>,
  commit?: (a: A) => Effect.Effect<void>
): Effect.Effect<A, E | Cancellation> => {
  const body = Deadline.bound(loop.options.turnTimeout, (duration) => `The turn exceeded its timeout of ${duration}`, {
    sessionId: loop.sessionId
  })(effect)
  if (loop.exclusive) {
    // one turn at a time, its correlation set and its store committed by the caller (a facade request's loop, on a
    // staged copy of its session that the request writes when it answers): the turn, then its commit into that copy.
    // Nothing shields the commit from an interrupt: the request writes the session only once the turn has answered,
    // so an interrupt before or after this commit leaves the session as it was (test/Facade checks a cancel while
    // the model answers); a region for it was four operations of a request's 51
    const once = commit === undefined ? body : Effect.flatMap(body, (a) => Effect.as(commit(a), a))
    return once.pipe(Observed.within(loop.observe))
  }
  const lock = loop.turnLock
  /** The turn, holding the lock: correlated, then the lock let go and the correlation put back, however it ends. */
  const held = (restore: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>) =>
    Effect.withFiberRuntime<A, E | Cancellation>((fiber) => {
      const outer = fiber.getFiberRef(currentCorrelation)
      const correlation = (requestId: string) =>
        Construct.unchecked(CorrelationContext, { ...outer, requestId, sessionId: loop.sessionId })
      // the caller's correlation names the loop's session already (a facade request's turn): nothing to set or put back
      const correlated = outer.sessionId === loop.sessionId && outer.requestId !== "unscoped"
      const release = Effect.sync(() => {
        if (!correlated) Local.setRef(fiber, currentCorrelation, outer)
        lock.unsafeRelease()
      })
      const ran = commit === undefined ? restore(body) : Effect.flatMap(restore(body), (a) => Effect.as(commit(a), a))
      const guarded = (effect: Effect.Effect<A, E | Cancellation>) =>
        Effect.matchCauseEffect(effect, {
          onFailure: (cause) => Effect.zipRight(release, Effect.failCause(cause)),
          onSuccess: (a) => Effect.as(release, a)
        })
      // a turn outside a request is a request of its own, when somebody observes it (the id is read by events and spans only)
      if (outer.requestId === "unscoped" && Observed.listenedBy(fiber)) {
        return guarded(Effect.flatMap(loop.nextId("req"), (id) => Effect.zipRight(FiberRef.set(currentCorrelation, correlation(id)), ran)))
      }
      // the fiber's own ref, set in this step (a FiberRef.set is a step of its own)
      if (!correlated) Local.setRef(fiber, currentCorrelation, correlation(outer.requestId))
      return guarded(ran)
    })
  return Effect.uninterruptibleMask((restore) =>
    // a free lock is taken in this step; a held one is waited for (interruptibly)
    lock.unsafeTryTake() ? held(restore) : Effect.flatMap(restore(lock.take), () => held(restore))
  ).pipe(Observed.within(loop.observe))
}
