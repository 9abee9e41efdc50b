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
 *
 * The parts live in ./openai/: Wire (the JSON), Failures (statuses and transport
 * errors to InferenceFailures), Retry (the policy), Transport (attempts and the
 * non-streamed completion), Stream (SSE to StreamParts), Models (`modelInfo`).
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { identity } from "effect/Function"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import { Engine } from "../services/Engine.js"
import * as Failures from "./openai/Failures.js"
import * as Models from "./openai/Models.js"
import type { RetryOptions } from "./openai/Retry.js"
import { retryPolicy } from "./openai/Retry.js"
import * as OpenAiStream from "./openai/Stream.js"
import * as Transport from "./openai/Transport.js"

export { isTransient, retryAfterMillis, retryPolicy } from "./openai/Retry.js"
export type { RetryOptions } from "./openai/Retry.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

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

/** The origin of `baseUrl`'s API: `.../v1`, appended when the base URL lacks it. */
export const apiUrl = (baseUrl: string): string => {
  const trimmed = baseUrl.replace(/\/+$/, "")
  return /\/v1$/.test(trimmed) ? trimmed : `${trimmed}/v1`
}

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
  const knownContextWindow = yield* Ref.make(Option.fromNullable(options.contextWindow))
  const transport: Transport.Transport = {
    client,
    model: options.model,
    completionsUrl,
    timeout,
    strictJsonSchema: options.strictJsonSchema ?? true,
    failures: Failures.make({
      model: options.model,
      scrub: scrubber(options.apiKey),
      url: Failures.displayUrl(completionsUrl),
      timeoutMillis: Duration.toMillis(timeout)
    }),
    schedule: retryPolicy(options.retry),
    contextWindow: Effect.map(Ref.get(knownContextWindow), Option.getOrElse(() => 0))
  }
  return Engine.of({
    infer: (request) => Transport.infer(transport, request),
    stream: (request) => OpenAiStream.stream(transport, request),
    modelInfo: Models.modelInfo(transport, base, knownContextWindow, options.supportsGrammar ?? true)
  })
})

/** Replaces the API key in a text (an excerpt, an error) with `<redacted>`. */
const scrubber = (apiKey: Redacted.Redacted<string> | undefined) => {
  const secret = apiKey === undefined ? undefined : Redacted.value(apiKey)
  return (text: string): string =>
    secret === undefined || secret === "" ? text : text.split(secret).join("<redacted>")
}

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
