/**
 * Retry policies as named Schedules, every one of the library's in this module. A
 * retry is a lifecycle transition (EXECUTE again), and which failures may be
 * retried is the taxonomy's `retryable` flag; the schedule only says when. Delays
 * are whole milliseconds, so tests drive them with `TestClock.adjust`.
 */
import * as Duration from "effect/Duration"
import * as Schedule from "effect/Schedule"

/** Exponential backoff with jitter, at most `times` retries. */
export const exponential = (options: {
  readonly base?: Duration.DurationInput
  readonly times?: number
  readonly cap?: Duration.DurationInput
} = {}): Schedule.Schedule<unknown> =>
  Schedule.exponential(options.base ?? "200 millis").pipe(
    Schedule.jittered,
    // Capped, and whole milliseconds: a fractional delay would leave clocks (the
    // TestClock's nanosecond reading among them) at a time that is not an integer.
    Schedule.modifyDelay((_, delay) =>
      Duration.millis(Math.round(Duration.toMillis(Duration.min(delay, Duration.decode(options.cap ?? "10 seconds")))))
    ),
    Schedule.intersect(Schedule.recurs(options.times ?? 2)),
    Schedule.asVoid
  )

/** For idempotent tools: 100 ms, 200 ms (jittered), then give up. */
export const tool: Schedule.Schedule<unknown> = exponential({ base: "100 millis", times: 2 })

/** For retryable inference failures (engine errors, malformed replies): 2 retries from 200 ms. */
export const inference: Schedule.Schedule<unknown> = exponential({ base: "200 millis", times: 2 })

/** For a validation that failed (re-ask): 2 retries from 100 ms. */
export const validation: Schedule.Schedule<unknown> = exponential({ base: "100 millis", times: 2 })

/** For a planner whose reply was not a plan (re-ask): 2 retries from 100 ms. */
export const planner: Schedule.Schedule<unknown> = exponential({ base: "100 millis", times: 2 })

/** For a webhook POST that failed (a refused connection, a 5xx): 3 retries from 500 ms. */
export const webhook: Schedule.Schedule<unknown> = exponential({ base: "500 millis", times: 3 })

/** Never retry. */
export const none: Schedule.Schedule<unknown> = Schedule.asVoid(Schedule.recurs(0))
