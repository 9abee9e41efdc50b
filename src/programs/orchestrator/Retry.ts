/**
 * The orchestrator's task retry policy, from the RetryConfig a user writes
 * (max attempts, backoff multiplier): an exponential Schedule, the first retry
 * after `initialDelay` and each next one `backoffMultiplier` times later, every
 * delay capped at `maxDelay`, at most `maxAttempts - 1` retries. No jitter unless
 * asked, so delays are exact (and tests can state them). Waiting is an
 * interruptible sleep: interrupting the run cancels a pending retry.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as Schedule from "effect/Schedule"
import { ConfigurationFailure } from "../../domain/Failure.js"

export interface RetryConfig {
  /** Attempts in all, the first included; 1 means no retry. A positive integer. */
  readonly maxAttempts: number
  /** Each delay is the previous one times this. At least 1. */
  readonly backoffMultiplier: number
  /** The first delay. Default 1 second. */
  readonly initialDelay?: Duration.DurationInput | undefined
  /** No delay is longer. Default 30 seconds. */
  readonly maxDelay?: Duration.DurationInput | undefined
  /** Randomize each delay (between 80% and 120%). Default false. */
  readonly jitter?: boolean | undefined
}

/** The default: 3 attempts, 1 s then 2 s. */
export const defaultRetry: RetryConfig = { maxAttempts: 3, backoffMultiplier: 2 }

/** The Schedule of a RetryConfig, or a CONFIG_INVALID_REQUEST naming the bad field. */
export const schedule = (config: RetryConfig): Either.Either<Schedule.Schedule<unknown>, ConfigurationFailure> => {
  const invalid = (field: string, rule: string, value: unknown) =>
    Either.left(
      ConfigurationFailure.invalidRequest(`retry.${field} must be ${rule}, got ${String(value)}`, {
        details: { field: `retry.${field}`, value }
      })
    )
  if (!Number.isSafeInteger(config.maxAttempts) || config.maxAttempts < 1) {
    return invalid("maxAttempts", "a positive integer", config.maxAttempts)
  }
  if (!Number.isFinite(config.backoffMultiplier) || config.backoffMultiplier < 1) {
    return invalid("backoffMultiplier", "a finite number of at least 1", config.backoffMultiplier)
  }
  const initial = Duration.decode(config.initialDelay ?? "1 second")
  const cap = Duration.decode(config.maxDelay ?? "30 seconds")
  const exponential = Schedule.exponential(initial, config.backoffMultiplier)
  return Either.right(
    (config.jitter === true ? Schedule.jittered(exponential) : exponential).pipe(
      Schedule.modifyDelay((_, delay) => Duration.millis(Math.round(Duration.toMillis(Duration.min(delay, cap))))),
      Schedule.intersect(Schedule.recurs(config.maxAttempts - 1)),
      Schedule.asVoid
    )
  )
}
