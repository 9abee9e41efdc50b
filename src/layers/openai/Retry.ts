/**
 * The transport retry policy of the OpenAI engine: which failures are transient
 * (429, 5xx, connection failures) and how long to wait before the next attempt,
 * the jittered exponential backoff or, when the server names it, `Retry-After`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as RetryPolicy from "../../services/RetryPolicy.js"

/** The transport retry policy (see `retryPolicy`). */
export interface RetryOptions {
  /** Retries after the first attempt; 0 disables retrying. Default 2. */
  readonly times?: number | undefined
  /** The first backoff delay, doubled on each retry and jittered. Default 500 ms. */
  readonly base?: Duration.DurationInput | undefined
  /** The longest backoff delay. Default 10 s. */
  readonly maxDelay?: Duration.DurationInput | undefined
  /** A `Retry-After` longer than this is not waited for: the failure is returned. Default 60 s. */
  readonly maxRetryAfter?: Duration.DurationInput | undefined
}

/** Whether the transport policy retries this failure: 429, 5xx and connection failures. */
export const isTransient = (failure: InferenceFailure): boolean =>
  failure.code === "INFERENCE_ENGINE_ERROR" && failure.retryable && failure.details.transient === true

const retryAfterOf = (failure: InferenceFailure): number | undefined => {
  const value = failure.details.retryAfterMillis
  return typeof value === "number" ? value : undefined
}

/**
 * The transport retry policy: exponential backoff with jitter, capped, at most
 * `times` retries, only while the failure is transient; when the server sent
 * `Retry-After`, that delay replaces the backoff, and one longer than
 * `maxRetryAfter` ends the retries.
 */
export const retryPolicy = (options: RetryOptions = {}): Schedule.Schedule<unknown, InferenceFailure> => {
  const maxRetryAfter = Duration.toMillis(options.maxRetryAfter ?? "60 seconds")
  return RetryPolicy.exponential({
    base: options.base ?? "500 millis",
    times: options.times ?? 2,
    cap: options.maxDelay ?? "10 seconds"
  }).pipe(
    Schedule.intersect(Schedule.identity<InferenceFailure>()),
    Schedule.whileInput((failure: InferenceFailure) => {
      const retryAfter = retryAfterOf(failure)
      return isTransient(failure) && (retryAfter === undefined || retryAfter <= maxRetryAfter)
    }),
    Schedule.modifyDelay(([, failure], delay) => {
      const retryAfter = retryAfterOf(failure)
      return retryAfter === undefined ? delay : Duration.millis(Math.round(retryAfter))
    }),
    Schedule.tapInput((failure: InferenceFailure) =>
      Effect.logDebug("OpenAiEngine: retrying").pipe(
        Effect.annotateLogs({ code: failure.code, status: String(failure.details.status ?? "") })
      )
    ),
    Schedule.asVoid
  )
}

/**
 * The delay a response asks for: `retry-after-ms` (OpenAI), else `Retry-After` as
 * seconds or as an HTTP date (relative to `nowMillis`, never negative).
 */
export const retryAfterMillis = (
  headers: { readonly [name: string]: string | undefined },
  nowMillis: number
): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Math.round(Number.parseFloat(ms))
  const value = headers["retry-after"]
  if (value === undefined || value.trim() === "") return undefined
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Math.round(Number.parseFloat(value) * 1000)
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - nowMillis)
}
