/**
 * How the OpenAI engine's transport problems become InferenceFailures: an HTTP
 * status and its body, a transport error, a deadline, an error payload or a cut
 * inside a stream. 401/403/404 mean no model to run, a body that says the context
 * overflowed is INFERENCE_CONTEXT_EXCEEDED, 429/5xx and dropped connections are
 * transient. Every excerpt is scrubbed of the API key.
 */
import type * as HttpClientError from "@effect/platform/HttpClientError"
import { InferenceFailure } from "../../domain/Failure.js"
import * as Wire from "./Wire.js"

const CONTEXT_EXCEEDED =
  /context[ _-]?length|context[ _-]?window|context[ _-]?size|maximum context|n_ctx|too many tokens|prompt is too long|exceeds? the (available )?context|exceed_context/i

/** The URL without credentials, for details and messages. */
export const displayUrl = (url: string): string => {
  const parsed = URL.canParse(url) ? new URL(url) : undefined
  if (parsed === undefined) return url
  parsed.username = ""
  parsed.password = ""
  return parsed.toString()
}

/** A transport error's codes and messages along its cause chain, in plain words. */
export const describeCause = (cause: unknown): string => {
  const parts: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 4 && typeof current === "object" && current !== null; depth++) {
    const { code, message } = current as { code?: unknown; message?: unknown }
    const text = [typeof code === "string" ? code : undefined, typeof message === "string" ? message : undefined]
      .filter((s) => s !== undefined && s !== "")
      .join(" ")
    if (text !== "" && !parts.includes(text)) parts.push(text)
    current = (current as { cause?: unknown }).cause
  }
  return parts.length === 0 ? "unknown transport error" : parts.join(": ")
}

/** The same failure with `extra` merged into its details. */
export const withDetails = (failure: InferenceFailure, extra: Record<string, unknown>): InferenceFailure =>
  new InferenceFailure({
    code: failure.code,
    retryable: failure.retryable,
    message: failure.message,
    details: { ...failure.details, ...extra },
    cause: failure.cause
  })

/** The request body could not be encoded as JSON. */
export const bodyNotEncodable = (reason: string): InferenceFailure =>
  new InferenceFailure({
    code: "INFERENCE_ENGINE_ERROR",
    retryable: false,
    message: "the request body could not be encoded as JSON (check `options`)",
    details: { reason }
  })

/** What the failures of one engine share: where it sends, which model, its deadline, its secret. */
export interface FailureContext {
  readonly scrub: (text: string) => string
  readonly url: string
  readonly model: string
  readonly timeoutMillis: number
}

/** The failure constructors of one engine. */
export interface Failures {
  readonly scrub: (text: string) => string
  readonly url: string
  readonly excerpt: (body: string) => string
  readonly fromStatus: (status: number, body: string, retryAfter: number | undefined) => InferenceFailure
  readonly fromHttpError: (error: HttpClientError.HttpClientError) => InferenceFailure
  readonly timeout: (what: string) => InferenceFailure
  readonly errorPayload: (status: number) => (payload: string) => InferenceFailure
  readonly streamCut: (status: number, error: unknown, receivedChars: number) => InferenceFailure
}

export const make = ({ model, scrub, timeoutMillis, url }: FailureContext): Failures => {
  const excerpt = (body: string) => Wire.excerpt(scrub(body))

  const fromStatus = (status: number, body: string, retryAfter: number | undefined): InferenceFailure => {
    const details = { status, body: excerpt(body), url }
    if (status === 401 || status === 403) {
      return InferenceFailure.modelUnavailable(`the engine refused the credentials (HTTP ${status})`, details)
    }
    if (status === 404) {
      return InferenceFailure.modelUnavailable(
        `the engine has no model "${model}" or no chat-completions endpoint at ${url} (HTTP 404)`,
        details
      )
    }
    if (status !== 429 && status >= 400 && CONTEXT_EXCEEDED.test(body)) {
      return InferenceFailure.contextExceeded(`the request exceeds the model's context (HTTP ${status})`, details)
    }
    if (status === 429 || status >= 500) {
      return InferenceFailure.engineError(`the engine answered HTTP ${status}`, {
        ...details,
        transient: true,
        ...(retryAfter === undefined ? {} : { retryAfterMillis: retryAfter })
      })
    }
    return new InferenceFailure({
      code: "INFERENCE_ENGINE_ERROR",
      retryable: false,
      message: `the engine rejected the request (HTTP ${status})`,
      details
    })
  }

  const fromHttpError = (error: HttpClientError.HttpClientError): InferenceFailure => {
    const reason = scrub(describeCause(error.cause))
    if (error._tag === "RequestError") {
      return error.reason === "Transport"
        ? InferenceFailure.engineError(
          `could not reach the engine at ${url}: ${reason}`,
          { reason: "connection", error: reason, url, transient: true },
          error.cause
        )
        : new InferenceFailure({
          code: "INFERENCE_ENGINE_ERROR",
          retryable: false,
          message: `could not send the request to ${url} (${error.reason})`,
          details: { reason: error.reason, error: reason, url }
        })
    }
    return InferenceFailure.engineError(
      `the connection dropped while reading the engine's reply (HTTP ${error.response.status}): ${reason}`,
      { reason: "connection", status: error.response.status, error: reason, url, transient: true },
      error.cause
    )
  }

  const timeout = (what: string): InferenceFailure =>
    new InferenceFailure({
      code: "INFERENCE_ENGINE_ERROR",
      retryable: false,
      message: `${what} within ${timeoutMillis} ms`,
      details: { reason: "timeout", timeoutMillis, url }
    })

  /** An error payload inside a 200 stream (llama.cpp sends `data: {"error": ...}`). */
  const errorPayload = (status: number) => (payload: string): InferenceFailure => {
    const failure = CONTEXT_EXCEEDED.test(payload)
      ? InferenceFailure.contextExceeded("the engine reported that the request exceeds the model's context", {})
      : new InferenceFailure({
        code: "INFERENCE_ENGINE_ERROR",
        retryable: true,
        message: "the engine reported an error inside the stream",
        details: {}
      })
    return withDetails(failure, { status, body: excerpt(payload), reason: "stream_error" })
  }

  const streamCut = (status: number, error: unknown, receivedChars: number): InferenceFailure =>
    InferenceFailure.engineError("the connection dropped in the middle of the stream", {
      reason: "stream_cut",
      status,
      error: scrub(describeCause(error)),
      receivedChars,
      url
    })

  return { scrub, url, excerpt, fromStatus, fromHttpError, timeout, errorPayload, streamCut }
}
