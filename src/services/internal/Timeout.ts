/**
 * `Effect.timeoutFail` at the cost of one fiber, and of nothing more when the
 * effect does not suspend.
 *
 * Effect's own races the effect against a sleeping fiber: two forked fibers per
 * call, and the loser awaited through its mailbox: 56 operations on a call
 * that is over at once (a tool that adds two numbers). Here the effect's fiber
 * is started at once on the caller's stack (as `Runtime.runFork` starts one,
 * with the caller's context, fiber refs and runtime flags): an effect that does
 * not suspend has ended when it returns, and its exit is the result, with no
 * timer set and no fiber awaited (12 operations). Otherwise the caller waits on
 * the fiber and on a timer of the live clock (what the live Clock's `sleep`
 * schedules). The semantics are Effect's:
 *
 * - the effect's success or failure is the result, its fiber refs inherited;
 * - past the duration the fiber is interrupted, and awaited, then `onTimeout`;
 * - a caller interrupted while it waits interrupts the fiber and awaits it;
 * - the effect runs in the caller's interruptibility, span and services.
 *
 * Under any other Clock (the TestClock of a test) it is `Effect.timeoutFail`,
 * so time is the Clock's time either way.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Start from "./Start.js"

/** The live clock: the default services' Clock. */
const liveClock = Context.get(DefaultServices.liveServices, Clock.Clock)

/** setTimeout's limit (about 24.8 days); longer durations take Effect's own path. */
const maxTimerMs = 2 ** 31 - 1

const timedOut: unique symbol = Symbol("Timeout/timedOut")

export const timeoutFail = <A, E, R, E2>(
  self: Effect.Effect<A, E, R>,
  duration: Duration.DurationInput,
  onTimeout: () => E2
): Effect.Effect<A, E | E2, R> =>
  Effect.clockWith((clock) => {
    const ms = Duration.toMillis(Duration.decode(duration))
    if (clock !== liveClock || !(ms <= maxTimerMs)) return Effect.timeoutFail(self, { duration, onTimeout })
    return Effect.uninterruptibleMask((restore) =>
      Effect.withFiberRuntime<A, E | E2, R>((parent, status) => {
        // an effect that does not suspend has ended when this returns: no timer set, nothing to wait on
        const fiber = Start.now(parent, status.runtimeFlags, restore(self))
        const done = fiber.unsafePoll()
        if (done !== null) return Exit.isSuccess(done) ? Effect.as(fiber.inheritAll, done.value) : done
        const ended = Effect.async<Exit.Exit<A, E> | typeof timedOut>((resume) => {
          const observer = (exit: Exit.Exit<A, E>) => {
            clearTimeout(timer)
            resume(Effect.succeed(exit))
          }
          const timer = setTimeout(() => {
            fiber.removeObserver(observer)
            resume(Effect.succeed(timedOut))
          }, ms)
          fiber.addObserver(observer)
          // the caller interrupted while it waits: the effect too, awaited
          return Effect.zipRight(
            Effect.sync(() => {
              clearTimeout(timer)
              fiber.removeObserver(observer)
            }),
            Fiber.interrupt(fiber)
          )
        })
        return Effect.flatMap(
          restore(ended),
          (exit): Effect.Effect<A, E | E2> =>
            exit === timedOut
              ? Effect.zipRight(Fiber.interrupt(fiber), Effect.fail(onTimeout()))
              : Exit.isSuccess(exit)
              ? Effect.as(fiber.inheritAll, exit.value)
              : exit
        )
      })
    )
  })
