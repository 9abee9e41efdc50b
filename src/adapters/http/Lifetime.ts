/**
 * Runs tied to their connection. Each request runs in its own fiber; when the
 * client disconnects, @effect/platform-node interrupts the handler (or the SSE
 * stream), and that becomes `PaganticSystem.cancel(requestId)`, so the facade
 * ends the request in CANCELLED (CANCELLED_SIGNAL) and the engine is interrupted.
 * Also the request ids: new ones, and those of the requests running now.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import { SystemError, SystemResponse } from "../../domain/System.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import type { Facade } from "../../programs/Facade.js"
import { IdGenerator } from "../../services/IdGenerator.js"

/** After a cancel, how long the facade gets to record CANCELLED before its fiber is interrupted. */
export const cancelGrace = Duration.seconds(5)

/** How long a run under the server's time limit may take before the adapter ends it: the limit and the grace. */
export const backstopOf = (limit: Duration.Duration): Duration.Duration => Duration.sum(limit, cancelGrace)

/**
 * Ends a run whose caller went away: cancel (CANCELLED_SIGNAL), wait a little, then
 * interrupt. The wait holds even when the facade has not registered the request
 * yet (a client that hung up at once): its cancel stays pending and is applied
 * when the request starts, so that run too records its CANCELLED transition.
 */
export const stopRun = (system: Facade, requestId: string, fiber: Fiber.RuntimeFiber<unknown>): Effect.Effect<void> =>
  Effect.flatMap(Fiber.poll(fiber), (done) =>
    Option.isSome(done)
      ? Effect.void
      : system.cancel(requestId).pipe(
          // the wait is interruptible, so the grace can end it: `stop` runs in finalizers (uninterruptible), where an
          // uninterruptible wait could not be cut off and a run that ignored its cancel was never interrupted
          Effect.zipRight(Effect.ignore(Effect.timeout(Effect.interruptible(Fiber.await(fiber)), cancelGrace))),
          Effect.zipRight(Fiber.interrupt(fiber)),
          Effect.asVoid
        )
  )

const timedOut = (requestId: string, backstop: Duration.Duration): SystemResponse =>
  new SystemResponse({
    requestId,
    content: "",
    toolCallsMade: [],
    tokenUsage: TokenUsage.empty,
    error: new SystemError({
      code: "CANCELLED_TIMEOUT",
      category: "Cancellation",
      retryable: false,
      message: `The request exceeded the server's time limit of ${Duration.format(backstop)}`,
      details: {}
    })
  })

/**
 * Runs `run` in its own fiber; if the caller is interrupted (the client hung up),
 * the facade is told to cancel the request instead of being torn down, so the
 * CANCELLED transition is recorded. `backstop` bounds the wait in case a run
 * outlives its own timeout hint.
 */
export const runTied = (
  system: Facade,
  requestId: string,
  run: Effect.Effect<SystemResponse>,
  backstop: Duration.Duration | undefined
): Effect.Effect<SystemResponse> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function* () {
      const fiber = yield* Effect.forkDaemon(restore(run))
      const stop = stopRun(system, requestId, fiber)
      if (backstop === undefined) return yield* restore(Fiber.join(fiber)).pipe(Effect.onInterrupt(() => stop))
      // the backstop is one sleeping fiber that stops the run when it overruns (not a race of two fibers per request)
      let overran = false
      // (interruptible, as the run: a fiber forked here would inherit this region's uninterruptibility)
      const timer = yield* Effect.forkDaemon(restore(Effect.zipRight(
        Effect.sleep(backstop),
        Effect.suspend(() => {
          overran = true
          return stop
        })
      )))
      const exit = yield* restore(Fiber.await(fiber)).pipe(
        Effect.onInterrupt(() => Effect.zipRight(Fiber.interruptFork(timer), stop))
      )
      if (overran) return timedOut(requestId, backstop)
      yield* Fiber.interruptFork(timer)
      return yield* exit
    })
  )

// ---------------------------------------------------------------------------
// Request ids
// ---------------------------------------------------------------------------

/** The source of new request ids: the context's IdGenerator (random UUIDs unless a test provides another). */
export const newRequestIds: Effect.Effect<Effect.Effect<string>> = Effect.map(IdGenerator, (ids) => ids.next("req"))

/**
 * The ids of the requests running now. A client-chosen id that is in use is
 * refused (409), so no client can address, and cancel, another client's request.
 */
export interface InFlight {
  readonly has: (requestId: string) => boolean
  /** Runs `effect` with `requestId` marked as running. */
  readonly claim: <A, E, R>(requestId: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

export const makeInFlight = (): InFlight => {
  const running = new Set<string>()
  return {
    has: (requestId) => running.has(requestId),
    claim: (requestId, effect) =>
      Effect.acquireUseRelease(
        Effect.sync(() => running.add(requestId)),
        () => effect,
        () => Effect.sync(() => running.delete(requestId))
      )
  }
}
