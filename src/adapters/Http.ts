/**
 * The HTTP adapter: a thin shell around the facade on @effect/platform's HttpApi.
 *
 * It reads a body (bounded in bytes), parses JSON, adds what only the transport
 * knows (a request id, the W3C `traceparent` trace id, the server's time limit)
 * and hands the envelope to `PaganticSystem.runUnknown`, which decodes and checks
 * it; the answer goes back as JSON with the status of its error code (see
 * `http/Status.ts`). No prompt building, no tool execution, no validation here:
 * `/v1/chat/completions` only renames OpenAI's fields (`http/OpenAi.ts`).
 *
 * Lifetimes: each request runs in its own fiber; when the client disconnects,
 * @effect/platform-node interrupts the handler (or the SSE stream), and the
 * adapter turns that into `PaganticSystem.cancel(requestId)`, so the facade ends
 * the request in CANCELLED (CANCELLED_SIGNAL) and the engine is interrupted.
 */
import type * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type { ServeError } from "@effect/platform/HttpServerError"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { createServer } from "node:http"
import * as Issues from "../domain/Issues.js"
import { SystemError, SystemRequest, SystemResponse } from "../domain/System.js"
import * as Text from "../domain/Text.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Facade } from "../programs/Facade.js"
import { PaganticSystem } from "../programs/Facade.js"
import { Engine } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import { ConversationStore } from "../services/Memory.js"
import { ChatCompletionRequest, PaganticApi } from "./http/Api.js"
import * as OpenAi from "./http/OpenAi.js"
import * as Body from "./http/Body.js"
import * as Edge from "./http/Edge.js"
import * as Guard from "./http/Guard.js"
import { openAiErrorType, statusOfError, traceIdOf } from "./http/Status.js"

export * as Api from "./http/Api.js"
export * as Guard from "./http/Guard.js"
export { statusOf, statusOfError, traceIdOf } from "./http/Status.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

export interface Options {
  /** Default 8080; 0 picks a free port (read it from `HttpServer.HttpServer`'s address). */
  readonly port?: number | undefined
  /** Default "127.0.0.1": loopback only unless asked otherwise. */
  readonly host?: string | undefined
  /** Largest accepted request body. Default 1 MiB; larger bodies get 413. */
  readonly maxBodyBytes?: number | undefined
  /**
   * Longest a request may run. Default 5 minutes. Sent to the facade as the
   * request's timeout hint (a shorter hint from the client wins), so the request
   * ends in CANCELLED_TIMEOUT (504) with its partial output.
   */
  readonly requestTimeout?: Duration.DurationInput | undefined
  /**
   * When set, every route but /health needs `Authorization: Bearer <key>` (401
   * otherwise). A server listening beyond loopback without a key logs a warning
   * at start: anyone who can reach it can run the model and its tools.
   */
  readonly apiKey?: Redacted.Redacted<string> | undefined
  /** Host header names accepted; default for a loopback bind: localhost, 127.0.0.1, ::1. See `Edge`. */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /** Origins allowed by CORS. Default none: no CORS headers, so browsers keep other sites' pages out. */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
  /** Bounds on what a body may hold (depth, size, schemas, enums, plans, grammars); see `Guard.Limits`. */
  readonly limits?: Partial<Guard.Limits> | undefined
}

const defaults = {
  port: 8080,
  host: "127.0.0.1",
  maxBodyBytes: 1024 * 1024,
  requestTimeout: Duration.minutes(5)
}

/** The longest id (request, session, trace) a client may send. */
const maxIdLength = 128

/** After a cancel, how long the facade gets to record CANCELLED before its fiber is interrupted. */
const cancelGrace = Duration.seconds(5)

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The server's limit as the envelope's timeout hint (ms); a shorter hint from the client wins. */
const withTimeout = (hints: unknown, limitMs: number | undefined): unknown => {
  if (limitMs === undefined) return hints
  if (hints === undefined) return { timeout: limitMs }
  if (!isRecord(hints)) return hints
  const t = hints.timeout
  if (t === undefined || t === 0) return { ...hints, timeout: limitMs }
  return typeof t === "number" && t > 0 ? { ...hints, timeout: Math.min(t, limitMs) } : hints
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const failedResponse = (requestId: string, error: SystemError): SystemResponse =>
  new SystemResponse({ requestId, content: "", toolCallsMade: [], tokenUsage: TokenUsage.empty, error })

/**
 * A failed request as its endpoint shapes errors, with the status its error says
 * (whose fault it is). Every 5xx is logged with the request id and the code; no
 * user content beyond the error's short message excerpt.
 */
const failWith = (
  path: "/v1/run" | "/v1/chat/completions",
  error: SystemError,
  requestId: string,
  status: number = statusOfError(error),
  partial?: SystemResponse
): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.as(
    status >= 500
      ? Effect.logError("request failed").pipe(
        Effect.annotateLogs({ requestId, status, code: error.code, message: Text.excerpt(error.message, 200) })
      )
      : Effect.void,
    Edge.errorResponse(path, status, error, requestId, {}, partial)
  )

const openAiErrorJson = (error: SystemError) => {
  const safe = Edge.forClient(error)
  return { error: { message: safe.message, type: openAiErrorType(statusOfError(error)), code: safe.code, param: null } }
}

/** A Guard problem as the client's mistake, naming the field. */
const problemError = (problem: Guard.Problem): SystemError =>
  Edge.invalidRequest(`${problem.field}: ${problem.message}`, { field: problem.field })

/** An id field a client may set: absent, or a string of 1 to 128 characters. */
const checkId = (raw: Record<string, unknown>, field: "requestId" | "sessionId" | "traceId"): Guard.Problem | undefined => {
  const value = raw[field]
  return value === undefined || (typeof value === "string" && value.length > 0 && value.length <= maxIdLength)
    ? undefined
    : { field, message: `expected a string of 1 to ${maxIdLength} characters` }
}

// ---------------------------------------------------------------------------
// Runs tied to their connection
// ---------------------------------------------------------------------------

/**
 * Ends a run whose caller went away: cancel (CANCELLED_SIGNAL), wait a little, then
 * interrupt. The wait holds even when the facade has not registered the request
 * yet (a client that hung up at once): its cancel stays pending and is applied
 * when the request starts, so that run too records its CANCELLED transition.
 */
const stopRun = (system: Facade, requestId: string, fiber: Fiber.RuntimeFiber<unknown>): Effect.Effect<void> =>
  Effect.flatMap(Fiber.poll(fiber), (done) =>
    Option.isSome(done)
      ? Effect.void
      : system.cancel(requestId).pipe(
          Effect.zipRight(Effect.ignore(Effect.timeout(Fiber.await(fiber), cancelGrace))),
          Effect.zipRight(Fiber.interrupt(fiber)),
          Effect.asVoid
        )
  )

/**
 * Runs `run` in its own fiber; if the caller is interrupted (the client hung up),
 * the facade is told to cancel the request instead of being torn down, so the
 * CANCELLED transition is recorded. `backstop` bounds the wait in case a run
 * outlives its own timeout hint.
 */
const runTied = (
  system: Facade,
  requestId: string,
  run: Effect.Effect<SystemResponse>,
  backstop: Duration.Duration | undefined
): Effect.Effect<SystemResponse> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function* () {
      const fiber = yield* Effect.forkDaemon(restore(run))
      const stop = stopRun(system, requestId, fiber)
      const joined = restore(
        backstop === undefined ? Effect.asSome(Fiber.join(fiber)) : Effect.timeoutOption(Fiber.join(fiber), backstop)
      ).pipe(Effect.onInterrupt(() => stop))
      const outcome = yield* joined
      if (Option.isSome(outcome)) return outcome.value
      yield* stop
      return failedResponse(
        requestId,
        new SystemError({
          code: "CANCELLED_TIMEOUT",
          category: "Cancellation",
          retryable: false,
          message: `The request exceeded the server's time limit of ${Duration.format(backstop!)}`,
          details: {}
        })
      )
    })
  )

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

type Item =
  | { readonly _tag: "Delta"; readonly text: string }
  | { readonly _tag: "Done"; readonly response: SystemResponse }

const sse = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`

const handlers = (options: Options) =>
  HttpApiBuilder.group(PaganticApi, "pagantic", (handlers) =>
    Effect.gen(function* () {
      const system = yield* PaganticSystem
      const engine = yield* Engine
      const ids = yield* Effect.serviceOption(IdGenerator)
      // OpenAI's API is stateless (the client sends the whole history each time),
      // so the session a chat completion opened is dropped once it is answered.
      const store = yield* Effect.serviceOption(ConversationStore)
      const forget = (response: SystemResponse) =>
        Option.isSome(store) && response.sessionId !== undefined ? store.value.clear(response.sessionId) : Effect.void
      const maxBodyBytes = options.maxBodyBytes ?? defaults.maxBodyBytes
      const limit = Duration.decode(options.requestTimeout ?? defaults.requestTimeout)
      const limitMs = Duration.isFinite(limit) && Duration.toMillis(limit) > 0 ? Duration.toMillis(limit) : undefined
      const backstop = limitMs === undefined ? undefined : Duration.sum(limit, cancelGrace)

      const newRequestId = Option.isSome(ids)
        ? ids.value.next("req")
        : Effect.sync(() => `req_${globalThis.crypto.randomUUID()}`)
      // never from the IdGenerator: a session id is a capability, it must not be guessable
      const newSessionId = Effect.sync(() => `session_${globalThis.crypto.randomUUID()}`)
      const now = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

      const limits: Guard.Limits = { ...Guard.defaultLimits, ...options.limits }
      // Requests running now, by id: a client-chosen id that is in use is refused
      // (409), so no client can address, and cancel, another client's request.
      const inFlight = new Set<string>()
      const claim = <A, E, R>(requestId: string, effect: Effect.Effect<A, E, R>) =>
        Effect.acquireUseRelease(
          Effect.sync(() => inFlight.add(requestId)),
          () => effect,
          () => Effect.sync(() => inFlight.delete(requestId))
        )

      const run = (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const generated = yield* newRequestId
          const body = yield* Effect.either(Body.readJson(request, maxBodyBytes))
          if (Either.isLeft(body)) {
            return yield* failWith("/v1/run", Edge.invalidRequest(body.left.message), generated, body.left.status)
          }
          const raw = body.right
          const checked = Either.flatMap(Guard.checkShape(raw, limits), () => Guard.checkRun(raw, limits))
          if (Either.isLeft(checked)) return yield* failWith("/v1/run", problemError(checked.left), generated)
          if (!isRecord(raw)) {
            return yield* failWith("/v1/run", Edge.invalidRequest("the body must be a JSON object (a SystemRequest)"), generated)
          }
          const badId = checkId(raw, "requestId") ?? checkId(raw, "sessionId") ?? checkId(raw, "traceId")
          if (badId !== undefined) return yield* failWith("/v1/run", problemError(badId), generated)
          const requestId = typeof raw.requestId === "string" ? raw.requestId : generated
          if (inFlight.has(requestId)) {
            return yield* failWith(
              "/v1/run",
              Edge.invalidRequest(`requestId: a request with this id is running; ids must be unique`, { field: "requestId" }),
              generated,
              409
            )
          }
          // Sessions are the server's: it issues their ids (unguessable), and a client
          // continues only a session the server holds.
          let sessionId: string | undefined = undefined
          if (raw.mode === "chat") {
            if (typeof raw.sessionId === "string") {
              const known = Option.isSome(store) && (yield* store.value.load(raw.sessionId)).length > 0
              if (!known) {
                return yield* failWith(
                  "/v1/run",
                  Edge.invalidRequest(
                    "sessionId: no such session on this server; omit sessionId to start one (the server issues its id)",
                    { field: "sessionId" }
                  ),
                  requestId
                )
              }
            } else {
              sessionId = yield* newSessionId
            }
          }
          const traceId = traceIdOf(request.headers["traceparent"])
          const envelope = {
            ...raw,
            requestId,
            ...(sessionId === undefined ? {} : { sessionId }),
            ...(raw.traceId === undefined && traceId !== undefined ? { traceId } : {}),
            hints: withTimeout(raw.hints, limitMs)
          }
          const response = yield* claim(requestId, runTied(system, requestId, system.runUnknown(envelope), backstop))
          if (response.error !== undefined) {
            return yield* failWith("/v1/run", response.error, requestId, statusOfError(response.error), response)
          }
          return response
        })

      const chat = (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const requestId = yield* newRequestId
          const refuse = (error: SystemError, status?: number) =>
            failWith("/v1/chat/completions", error, requestId, status)
          const body = yield* Effect.either(Body.readJson(request, maxBodyBytes))
          if (Either.isLeft(body)) return yield* refuse(Edge.invalidRequest(body.left.message), body.left.status)
          const checked = Either.flatMap(Guard.checkShape(body.right, limits), () => Guard.checkChat(body.right, limits))
          if (Either.isLeft(checked)) return yield* refuse(problemError(checked.left))
          const decoded = Schema.decodeUnknownEither(ChatCompletionRequest, { errors: "all" })(body.right)
          if (Either.isLeft(decoded)) {
            const issues = Issues.describe(decoded.left, "a chat completion request object")
            return yield* refuse(Edge.invalidRequest(`Invalid chat completion request: ${issues.join("; ")}`, { issues }))
          }
          const completion = decoded.right
          const envelope = OpenAi.toEnvelope(completion, {
            requestId,
            traceId: traceIdOf(request.headers["traceparent"]),
            timeoutMs: limitMs
          })
          if (Either.isLeft(envelope)) return yield* refuse(Edge.invalidRequest(envelope.left))
          // decoded here rather than in the facade, so a problem names the client's field (max_tokens, not hints.maxTokens)
          const systemRequest = Schema.decodeUnknownEither(SystemRequest, { errors: "all" })(envelope.right)
          if (Either.isLeft(systemRequest)) {
            const issues = Issues.describe(systemRequest.left, "a chat completion request object", "the request", OpenAi.clientField)
            return yield* refuse(Edge.invalidRequest(`Invalid chat completion request: ${issues.join("; ")}`, { issues }))
          }
          const structured = OpenAi.isStructured(completion)
          const meta = {
            id: OpenAi.completionId(requestId),
            model: (yield* engine.modelInfo).name,
            created: yield* now
          }

          if (completion.stream !== true) {
            const response = yield* runTied(system, requestId, system.run(systemRequest.right), backstop)
            yield* forget(response)
            if (response.error !== undefined) return yield* refuse(response.error)
            return OpenAi.toCompletion(response, { ...meta, structured })
          }

          // -- streaming: status and headers wait for the first delta or the answer,
          // so that an early failure is still a plain JSON error with its status.
          const queue = yield* Queue.unbounded<Item>()
          const fiber = yield* Effect.forkDaemon(
            system
              .run(systemRequest.right, {
                onProgress: (p) => (p._tag === "TextDelta" ? Queue.offer(queue, { _tag: "Delta", text: p.text }) : Effect.void)
              })
              .pipe(
                Effect.tap(forget),
                Effect.flatMap((response) => Queue.offer(queue, { _tag: "Done", response }))
              )
          )
          const stop = stopRun(system, requestId, fiber)
          const first = yield* Queue.take(queue).pipe(Effect.onInterrupt(() => stop))
          if (first._tag === "Done" && first.response.error !== undefined) {
            return yield* refuse(first.response.error)
          }
          const events = Stream.concat(Stream.succeed(first), Stream.fromQueue(queue)).pipe(
            Stream.takeUntil((item) => item._tag === "Done"),
            Stream.mapAccum(false, (streamed, item): readonly [boolean, ReadonlyArray<string>] => {
              if (item._tag === "Delta") return [true, item.text === "" ? [] : [sse(OpenAi.chunk(meta, { content: item.text }))]]
              const response = item.response
              if (response.error !== undefined) return [streamed, [sse(openAiErrorJson(response.error))]]
              const content = OpenAi.contentOf(response, structured)
              return [
                streamed,
                [
                  ...(streamed || content === "" ? [] : [sse(OpenAi.chunk(meta, { content }))]),
                  sse(
                    OpenAi.chunk(meta, {}, OpenAi.finishReasonOf(response.stopReason), {
                      usage: OpenAi.usageOf(response),
                      pagantic: OpenAi.extensionOf(response)
                    })
                  )
                ]
              ]
            }),
            Stream.mapConcat((lines) => lines),
            Stream.prepend(Chunk.of(sse(OpenAi.chunk(meta, { role: "assistant", content: "" })))),
            Stream.concat(Stream.succeed("data: [DONE]\n\n")),
            Stream.encodeText,
            Stream.ensuring(stop)
          )
          return HttpServerResponse.stream(events, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", "x-request-id": requestId }
          })
        })

      return handlers
        .handleRaw("run", ({ request }) => run(request))
        .handleRaw("chatCompletions", ({ request }) => chat(request))
        .handle("health", () => Effect.map(engine.modelInfo, (model) => ({ status: "ok" as const, model })))
    })
  )

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/**
 * The API with its handlers and its edge (host and key checks, JSON 404/405/500,
 * CORS when configured), without a server: for `HttpApiBuilder.toWebHandler` or a
 * custom server.
 */
export const layerApi = (options: Options = {}): Layer.Layer<HttpApi.Api, never, PaganticSystem | Engine> => {
  const edge = Edge.middleware({
    host: options.host ?? defaults.host,
    apiKey: options.apiKey,
    allowedHosts: options.allowedHosts
  })
  const cors = options.corsOrigins !== undefined && options.corsOrigins.length > 0
    ? HttpMiddleware.cors({
      allowedOrigins: options.corsOrigins,
      allowedHeaders: ["authorization", "content-type", "traceparent"],
      allowedMethods: ["GET", "POST"]
    })
    : undefined
  return HttpApiBuilder.api(PaganticApi).pipe(
    Layer.provide(handlers(options)),
    Layer.provide(HttpApiBuilder.middleware((app) => (cors === undefined ? edge(app) : cors(edge(app)))))
  )
}

/** A warning at start when the server listens beyond loopback without an API key. */
export const warnIfOpen = (options: Options): Layer.Layer<never> => {
  const host = options.host ?? defaults.host
  return Edge.isLoopback(host) || options.apiKey !== undefined
    ? Layer.empty
    : Layer.effectDiscard(
      Effect.logWarning(
        `pagantic serve listens on ${host} WITHOUT an API key: anyone who can reach this address can run the model and its tools. Set PAGANTIC_API_KEY (or --api-key) or listen on 127.0.0.1.`
      )
    )
}

/** The adapter on a Node HTTP server, listening on 127.0.0.1:8080 unless told otherwise. */
export const layer = (options: Options = {}) =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(layerApi(options)),
    Layer.provide(warnIfOpen(options)),
    Layer.provideMerge(
      NodeHttpServer.layer(createServer, { port: options.port ?? defaults.port, host: options.host ?? defaults.host })
    )
  )

const commaList = (name: string) =>
  Config.map(Config.withDefault(Config.string(name), ""), (text) =>
    text.split(",").map((item) => item.trim()).filter((item) => item !== ""))

/** The options from the environment (see `layerConfig`); `overrides` win over it. */
export const optionsConfig = (overrides: Options = {}): Config.Config<Options> =>
  Config.map(
    Config.all({
      port: Config.withDefault(
        Config.integer("PAGANTIC_PORT").pipe(
          Config.validate({ message: "a port from 0 to 65535", validation: (port) => port >= 0 && port <= 65_535 })
        ),
        defaults.port
      ),
      host: Config.withDefault(Config.string("PAGANTIC_HOST"), defaults.host),
      maxBodyBytes: Config.withDefault(Config.integer("PAGANTIC_MAX_BODY_BYTES"), defaults.maxBodyBytes),
      requestTimeout: Config.withDefault(Config.duration("PAGANTIC_REQUEST_TIMEOUT"), defaults.requestTimeout),
      apiKey: Config.option(Config.redacted("PAGANTIC_API_KEY")),
      allowedHosts: commaList("PAGANTIC_ALLOWED_HOSTS"),
      corsOrigins: commaList("PAGANTIC_CORS_ORIGINS")
    }),
    (env): Options => {
      const defined = Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) as Options
      return {
        ...env,
        apiKey: Option.getOrUndefined(env.apiKey),
        ...defined
      }
    }
  )

/**
 * The adapter configured from the environment: PAGANTIC_PORT (default 8080),
 * PAGANTIC_HOST (default 127.0.0.1), PAGANTIC_MAX_BODY_BYTES (default 1 MiB),
 * PAGANTIC_REQUEST_TIMEOUT (default 5 minutes, e.g. "90 seconds"),
 * PAGANTIC_API_KEY (a Bearer key; none by default), PAGANTIC_ALLOWED_HOSTS and
 * PAGANTIC_CORS_ORIGINS (comma lists). Options given in `overrides` win over the
 * environment. It logs the address it listens on.
 */
export const layerConfig = (overrides: Options = {}) =>
  Layer.unwrapEffect(Effect.map(optionsConfig(overrides), (options) => HttpServer.withLogAddress(layer(options))))

/**
 * Serves until interrupted (for `pagantic serve` and `serve.ts`): the facade and
 * engine come from `system`; options not given come from the environment.
 */
export const serve = <E>(
  system: Layer.Layer<PaganticSystem | Engine, E>,
  options?: Options
): Effect.Effect<never, E | ServeError | ConfigError.ConfigError> =>
  Layer.launch(layerConfig(options).pipe(Layer.provide(system)))
