/**
 * Deadlines: an effect bounded by an optional duration fails with
 * CANCELLED_TIMEOUT once it is past (the work was cut off, not at fault).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { Cancellation } from "../../domain/Failure.js"
import * as Timeout from "../../services/internal/Timeout.js"

/**
 * Bounds `effect` by `timeout` (no bound when absent); past it, a Cancellation
 * whose message `describe` writes from the formatted duration.
 */
export const bound =
  (
    timeout: Duration.DurationInput | undefined,
    describe: (duration: string) => string,
    details?: Record<string, unknown>
  ) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | Cancellation, R> =>
    timeout === undefined
      ? effect
      : Timeout.timeoutFail(effect, timeout, () => Cancellation.timeout(describe(Duration.format(Duration.decode(timeout))), details))
