/**
 * The Engine for any OpenAI-compatible server: llama.cpp's server, vLLM, Ollama,
 * hosted APIs. It speaks `/v1/chat/completions` over @effect/platform's
 * HttpClient, so the transport is the caller's (`NodeHttpClient.layerUndici`,
 * `FetchHttpClient.layer`, or a test client).
 *
 * The adapter is thin: messages, tools, the JSON schema (as `response_format`) and
 * the GBNF grammar (as llama.cpp's `grammar`) are translated, nothing is built or
 * validated here. What it owns is the transport's failure policy:
 *
 * - every attempt has a deadline (`timeout`); a streamed reply also fails when it
 *   stays silent for that long. A timeout is not retried here: the deadline is the
 *   caller's budget (INFERENCE_ENGINE_ERROR, `retryable: false`, reason "timeout").
 * - 429, 5xx and connection failures are retried on a Schedule (exponential with
 *   jitter), waiting what `Retry-After` asks when the server says; other 4xx never
 *   are. After the retries they surface as INFERENCE_ENGINE_ERROR, `retryable: true`.
 * - 401/403 are INFERENCE_MODEL_UNAVAILABLE, not retryable: with these credentials
 *   there is no model to run, and no retry or loop can change that; 404 likewise
 *   (wrong model name or wrong base URL). A 4xx (or 5xx) whose body says the
 *   context overflowed is INFERENCE_CONTEXT_EXCEEDED; any other 4xx is a
 *   non-retryable INFERENCE_ENGINE_ERROR. A 2xx body that is not a completion
 *   (truncated, HTML, tool arguments that are not a JSON object) is
 *   INFERENCE_MALFORMED_RESPONSE.
 *
 * Failures carry `status`, a short body excerpt and the attempt count in
 * `details`. The API key is sent as `Authorization: Bearer` only; it is kept
 * Redacted, and scrubbed from any excerpt, so it never reaches a failure or a log.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { identity } from "effect/Function"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../domain/Failure.js"
import { ModelInfo } from "../domain/ModelInfo.js"
import type { InferenceRequest, StreamPart } from "../services/Engine.js"
import { Engine } from "../services/Engine.js"
import * as RetryPolicy from "../services/RetryPolicy.js"
import * as Wire from "./openai/Wire.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

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

export interface Options {
  /** The server, with or without the trailing `/v1` (e.g. `http://127.0.0.1:8080`). */
  readonly baseUrl: string
  /** Sent as `Authorization: Bearer`; omit for local servers. */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** The `model` field of every request, and the name `modelInfo` reports. */
  readonly model: string
  /** Deadline of one attempt (and the longest silence inside a stream). Default 120 s. */
  readonly timeout?: Duration.DurationInput | undefined
  /** The model's context window; when absent, `modelInfo` asks `/v1/models` once. */
  readonly contextWindow?: number | undefined
  readonly retry?: RetryOptions | undefined
  /** `strict` of `response_format.json_schema`. Default true. */
  readonly strictJsonSchema?: boolean | undefined
  /** Whether the server constrains decoding (`response_format`/`grammar`). Default true. */
  readonly supportsGrammar?: boolean | undefined
}

export const DEFAULT_TIMEOUT: Duration.DurationInput = "120 seconds"

// ---------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Failure mapping
// ---------------------------------------------------------------------------

const CONTEXT_EXCEEDED =
  /context[ _-]?length|context[ _-]?window|context[ _-]?size|maximum context|n_ctx|too many tokens|prompt is too long|exceeds? the (available )?context|exceed_context/i

/** The URL without credentials, for details and messages. */
const displayUrl = (url: string): string => {
  const parsed = URL.canParse(url) ? new URL(url) : undefined
  if (parsed === undefined) return url
  parsed.username = ""
  parsed.password = ""
  return parsed.toString()
}

/** The origin of `baseUrl`'s API: `.../v1`, appended when the base URL lacks it. */
export const apiUrl = (baseUrl: string): string => {
  const trimmed = baseUrl.replace(/\/+$/, "")
  return /\/v1$/.test(trimmed) ? trimmed : `${trimmed}/v1`
}

const describeCause = (cause: unknown): string => {
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

interface Failures {
  readonly scrub: (text: string) => string
  readonly url: string
  readonly model: string
  readonly timeoutMillis: number
}

const makeFailures = ({ model, scrub, timeoutMillis, url }: Failures) => {
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

  return { excerpt, fromStatus, fromHttpError, timeout }
}

const withDetails = (failure: InferenceFailure, extra: Record<string, unknown>): InferenceFailure =>
  new InferenceFailure({
    code: failure.code,
    retryable: failure.retryable,
    message: failure.message,
    details: { ...failure.details, ...extra },
    cause: failure.cause
  })

// ---------------------------------------------------------------------------
// Constructor
// ---------------------------------------------------------------------------

/** Builds the engine on the HttpClient in context. */
export const make = Effect.fn("OpenAiEngine.make")(function*(options: Options) {
  const client = (yield* HttpClient.HttpClient).pipe(
    HttpClient.mapRequest((request) =>
      request.pipe(
        options.apiKey === undefined ? identity : HttpClientRequest.bearerToken(options.apiKey),
        HttpClientRequest.acceptJson
      )
    )
  )
  const base = apiUrl(options.baseUrl)
  const completionsUrl = `${base}/chat/completions`
  const timeout = Duration.decode(options.timeout ?? DEFAULT_TIMEOUT)
  const secret = options.apiKey === undefined ? undefined : Redacted.value(options.apiKey)
  const scrub = (text: string) =>
    secret === undefined || secret === "" ? text : text.split(secret).join("<redacted>")
  const failures = makeFailures({
    model: options.model,
    scrub,
    url: displayUrl(completionsUrl),
    timeoutMillis: Duration.toMillis(timeout)
  })
  const schedule = retryPolicy(options.retry)
  const bodyOptions = (stream: boolean): Wire.BodyOptions => ({
    model: options.model,
    stream,
    strictJsonSchema: options.strictJsonSchema ?? true
  })

  const knownContextWindow = yield* Ref.make(Option.fromNullable(options.contextWindow))
  const contextWindow = Effect.map(Ref.get(knownContextWindow), Option.getOrElse(() => 0))

  const encode = (body: Record<string, unknown>) =>
    HttpClientRequest.post(completionsUrl).pipe(
      HttpClientRequest.bodyJson(body),
      Effect.mapError((error) =>
        new InferenceFailure({
          code: "INFERENCE_ENGINE_ERROR",
          retryable: false,
          message: "the request body could not be encoded as JSON (check `options`)",
          details: { reason: String(error.reason._tag) }
        })
      )
    )

  /** One attempt: send, map a non-2xx status, then `read` the 2xx reply; all within the deadline. */
  const attempt = <A>(
    request: HttpClientRequest.HttpClientRequest,
    read: (response: HttpClientResponse.HttpClientResponse) => Effect.Effect<A, InferenceFailure>,
    what: string
  ): Effect.Effect<A, InferenceFailure> =>
    client.execute(request).pipe(
      Effect.mapError(failures.fromHttpError),
      Effect.flatMap((response) =>
        response.status >= 200 && response.status < 300
          ? read(response)
          : Effect.flatMap(
            Effect.zip(
              response.text.pipe(Effect.orElseSucceed(() => "")),
              Clock.currentTimeMillis
            ),
            ([body, now]) =>
              Effect.fail(failures.fromStatus(response.status, body, retryAfterMillis(response.headers, now)))
          )
      ),
      Effect.timeoutFail({ duration: timeout, onTimeout: () => failures.timeout(what) })
    )

  /** Attempts under the retry policy; the final failure says how many attempts were made. */
  const send = <A>(
    request: HttpClientRequest.HttpClientRequest,
    read: (response: HttpClientResponse.HttpClientResponse) => Effect.Effect<A, InferenceFailure>,
    what: string
  ): Effect.Effect<A, InferenceFailure> =>
    Effect.flatMap(Ref.make(0), (attempts) =>
      Ref.update(attempts, (n) => n + 1).pipe(
        Effect.zipRight(attempt(request, read, what)),
        Effect.retry(schedule),
        Effect.catchAll((failure) =>
          Effect.flatMap(Ref.get(attempts), (n) => Effect.fail(withDetails(failure, { attempts: n })))
        )
      ))

  const infer = Effect.fn("OpenAiEngine.infer")(function*(request: InferenceRequest) {
    yield* Effect.annotateCurrentSpan({ "pagantic.model": options.model })
    const httpRequest = yield* encode(Wire.chatBody(request, bodyOptions(false)))
    const start = yield* Clock.currentTimeMillis
    const [status, text] = yield* send(
      httpRequest,
      (response) =>
        Effect.map(Effect.mapError(response.text, failures.fromHttpError), (text) => [response.status, text] as const),
      "the engine did not answer"
    )
    const elapsedMillis = (yield* Clock.currentTimeMillis) - start
    return yield* Wire.parseCompletion(text, { elapsedMillis, contextWindow: yield* contextWindow }).pipe(
      Effect.mapError((failure) => withDetails(failure, { status, body: failures.excerpt(text) }))
    )
  })

  const errorPayload = (status: number) => (payload: string): InferenceFailure => {
    const failure = CONTEXT_EXCEEDED.test(payload)
      ? InferenceFailure.contextExceeded("the engine reported that the request exceeds the model's context", {})
      : new InferenceFailure({
        code: "INFERENCE_ENGINE_ERROR",
        retryable: true,
        message: "the engine reported an error inside the stream",
        details: {}
      })
    return withDetails(failure, { status, body: failures.excerpt(payload), reason: "stream_error" })
  }

  const stream = (request: InferenceRequest): Stream.Stream<StreamPart, InferenceFailure> =>
    Stream.unwrap(Effect.gen(function*() {
      const httpRequest = yield* encode(Wire.chatBody(request, bodyOptions(true)))
      const start = yield* Clock.currentTimeMillis
      const response = yield* send(httpRequest, Effect.succeed, "the engine did not start answering")
      const status = response.status
      if ((response.headers["content-type"] ?? "").includes("application/json")) {
        // the server ignored `stream: true` and sent the whole completion
        const text = yield* Effect.mapError(response.text, failures.fromHttpError)
        const elapsedMillis = (yield* Clock.currentTimeMillis) - start
        const result = yield* Wire.parseCompletion(text, { elapsedMillis, contextWindow: yield* contextWindow }).pipe(
          Effect.mapError((failure) => withDetails(failure, { status, body: failures.excerpt(text) }))
        )
        return Stream.fromIterable(Wire.partsOf(result))
      }
      const state = new Wire.StreamAccumulator(errorPayload(status))
      const cut = (error: unknown): InferenceFailure =>
        InferenceFailure.engineError("the connection dropped in the middle of the stream", {
          reason: "stream_cut",
          status,
          error: scrub(describeCause(error)),
          receivedChars: state.receivedChars,
          url: displayUrl(completionsUrl)
        })
      const fromEither = <A>(either: Either.Either<A, InferenceFailure>) =>
        Either.match(either, {
          onLeft: (failure) => Effect.fail(withDetails(failure, { status })),
          onRight: Effect.succeed
        })

      const body = response.stream.pipe(
        Stream.decodeText(),
        Stream.splitLines,
        Stream.mapError(cut),
        Stream.timeoutFail(() => failures.timeout("the stream stayed silent"), timeout),
        Stream.mapEffect((line) => fromEither(state.line(line))),
        Stream.takeUntil(() => state.done),
        Stream.flattenIterables
      )
      const end = Stream.fromIterableEffect(Effect.gen(function*() {
        const elapsedMillis = (yield* Clock.currentTimeMillis) - start
        return yield* fromEither(state.end({ elapsedMillis, contextWindow: yield* contextWindow }))
      }))
      return Stream.concat(body, end)
    })).pipe(Stream.withSpan("OpenAiEngine.stream", { attributes: { "pagantic.model": options.model } }))

  const fetchContextWindow = HttpClient.filterStatusOk(client).get(`${base}/models`).pipe(
    Effect.flatMap((response) => response.text),
    Effect.map((text) => Option.fromNullable(Wire.contextWindowFromModels(text, options.model))),
    Effect.timeout(timeout),
    Effect.orElseSucceed(() => Option.none<number>()),
    Effect.tap((found) => Option.isSome(found) ? Ref.set(knownContextWindow, found) : Effect.void)
  )

  const modelInfo: Effect.Effect<ModelInfo> = Effect.gen(function*() {
    const known = yield* Ref.get(knownContextWindow)
    const window = Option.isSome(known) ? known : yield* fetchContextWindow
    return new ModelInfo({
      name: options.model,
      contextWindow: Option.getOrElse(window, () => 0),
      supportsGrammar: options.supportsGrammar ?? true,
      supportsTools: true
    })
  }).pipe(Effect.withSpan("OpenAiEngine.modelInfo"))

  return Engine.of({ infer, stream, modelInfo })
})

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/** The engine from explicit options; provide an HttpClient (`NodeHttpClient.layerUndici`, `FetchHttpClient.layer`). */
export const layer = (options: Options): Layer.Layer<Engine, never, HttpClient.HttpClient> =>
  Layer.effect(Engine, make(options))

/**
 * The options read from configuration: `PAGANTIC_OPENAI_BASE_URL`,
 * `PAGANTIC_OPENAI_MODEL`, and optionally `PAGANTIC_OPENAI_API_KEY` (redacted),
 * `PAGANTIC_OPENAI_TIMEOUT` (a duration, e.g. "30 seconds") and
 * `PAGANTIC_OPENAI_CONTEXT_WINDOW`. A field given in `overrides` is not read.
 */
export const config = (overrides: Partial<Options> = {}): Config.Config<Options> =>
  Config.all({
    baseUrl: overrides.baseUrl !== undefined ? Config.succeed(overrides.baseUrl) : Config.string("PAGANTIC_OPENAI_BASE_URL"),
    model: overrides.model !== undefined ? Config.succeed(overrides.model) : Config.string("PAGANTIC_OPENAI_MODEL"),
    apiKey: overrides.apiKey !== undefined
      ? Config.succeed(Option.some(overrides.apiKey))
      : Config.option(Config.redacted("PAGANTIC_OPENAI_API_KEY")),
    timeout: Config.option(Config.duration("PAGANTIC_OPENAI_TIMEOUT")),
    contextWindow: Config.option(Config.integer("PAGANTIC_OPENAI_CONTEXT_WINDOW"))
  }).pipe(
    Config.map(({ apiKey, baseUrl, contextWindow, model, timeout }): Options => ({
      baseUrl,
      model,
      ...Option.match(apiKey, { onNone: () => ({}), onSome: (apiKey) => ({ apiKey }) }),
      ...Option.match(timeout, { onNone: () => ({}), onSome: (timeout) => ({ timeout }) }),
      ...Option.match(contextWindow, { onNone: () => ({}), onSome: (contextWindow) => ({ contextWindow }) }),
      ...definedOnly(overrides)
    }))
  )

const definedOnly = (overrides: Partial<Options>): Partial<Options> =>
  Object.fromEntries(Object.entries(overrides).filter(([, value]) => value !== undefined)) as Partial<Options>

/** The engine configured from the environment (see `config`); `overrides` win. */
export const layerConfig = (
  overrides: Partial<Options> = {}
): Layer.Layer<Engine, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(Engine, Effect.flatMap(config(overrides), make))
