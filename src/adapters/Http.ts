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
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
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
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { createServer } from "node:http"
import * as Issues from "../domain/Issues.js"
import { SystemError, SystemResponse } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Facade } from "../programs/Facade.js"
import { PaganticSystem } from "../programs/Facade.js"
import { Engine } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import { ConversationStore } from "../services/Memory.js"
import type { ErrorStatus } from "./http/Api.js"
import { ChatCompletionRequest, PaganticApi } from "./http/Api.js"
import * as OpenAi from "./http/OpenAi.js"
import { openAiErrorType, statusOf, traceIdOf } from "./http/Status.js"

export * as Api from "./http/Api.js"
export { statusOf, traceIdOf } from "./http/Status.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

export interface Options {
  /** Default 8080; 0 picks a free port (read it from `HttpServer.HttpServer`'s address). */
  readonly port?: number
  /** Default "127.0.0.1": loopback only unless asked otherwise. */
  readonly host?: string
  /** Largest accepted request body. Default 1 MiB; larger bodies get 413. */
  readonly maxBodyBytes?: number
  /**
   * Longest a request may run. Default 5 minutes. Sent to the facade as the
   * request's timeout hint (a shorter hint from the client wins), so the request
   * ends in CANCELLED_TIMEOUT (504) with its partial output.
   */
  readonly requestTimeout?: Duration.DurationInput
}

const defaults = {
  port: 8080,
  host: "127.0.0.1",
  maxBodyBytes: 1024 * 1024,
  requestTimeout: Duration.minutes(5)
}

/** After a cancel, how long the facade gets to record CANCELLED before its fiber is interrupted. */
const cancelGrace = Duration.seconds(5)

// ---------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------

interface BodyProblem {
  readonly status: 400 | 413
  readonly message: string
}

/**
 * Reads the body as text, at most `maxBytes`. Past the limit the rest is drained
 * and dropped (not destroyed, which would cut the connection before the 413).
 */
const readText = (
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number
): Effect.Effect<string, BodyProblem> =>
  Effect.async<string, BodyProblem>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let size = 0
    let settled = false
    const detach = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const settle = (result: Effect.Effect<string, BodyProblem>) => {
      if (settled) return
      settled = true
      detach()
      resume(result)
    }
    function onData(chunk: Buffer) {
      size += chunk.length
      if (size <= maxBytes) {
        chunks.push(chunk)
        return
      }
      settle(Effect.fail(tooLarge(maxBytes)))
      source.resume()
    }
    function onEnd() {
      settle(Effect.succeed(Buffer.concat(chunks).toString("utf8")))
    }
    function onError() {
      settle(Effect.fail({ status: 400, message: "The request body could not be read" }))
    }
    if (source.readableEnded) {
      settle(Effect.fail({ status: 400, message: "The request body was already consumed" }))
      return
    }
    source.on("data", onData)
    source.on("end", onEnd)
    source.on("error", onError)
    return Effect.sync(detach)
  })

const tooLarge = (maxBytes: number): BodyProblem => ({
  status: 413,
  message: `The request body exceeds the limit of ${maxBytes} bytes`
})

const readJson = (
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number
): Effect.Effect<unknown, BodyProblem> => {
  const declared = Number(request.headers["content-length"])
  if (Number.isFinite(declared) && declared > maxBytes) return Effect.fail(tooLarge(maxBytes))
  return Effect.flatMap(readText(request, maxBytes), (text) =>
    text.trim() === ""
      ? Effect.fail<BodyProblem>({ status: 400, message: "The request body is empty: send a JSON object" })
      : Effect.try({
          try: (): unknown => JSON.parse(text),
          catch: (e): BodyProblem => ({
            status: 400,
            message: `The request body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`
          })
        })
  )
}

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

const invalidRequest = (message: string, details: Record<string, unknown> = {}): SystemError =>
  new SystemError({
    code: "CONFIG_INVALID_REQUEST",
    category: "ConfigurationFailure",
    retryable: false,
    message,
    details
  })

const failedResponse = (requestId: string, error: SystemError): SystemResponse =>
  new SystemResponse({ requestId, content: "", toolCallsMade: [], tokenUsage: TokenUsage.empty, error })

const STACK_FRAME = /^\s*at\s.*(\(.*\)|:\d+:\d+)\s*$/

/** A safety net at the edge: string details lose their stack-frame lines (a defect's pretty cause has them). */
const withoutStacks = (error: SystemError): SystemError => {
  const details = Object.fromEntries(
    Object.entries(error.details).map(([k, v]) => [
      k,
      typeof v === "string" ? v.split("\n").filter((line) => !STACK_FRAME.test(line)).join("\n") : v
    ])
  )
  return new SystemError({ ...error, details }, true)
}

const encodeResponse = Schema.encodeSync(SystemResponse)

/*
 * Failures are sent as raw responses with the status of their code: the bodies
 * are exactly the classes `Api.ts` declares per status (HttpApi's own error
 * encoding cannot tell classes with the same fields apart, so it is bypassed).
 */
const runFailure = (
  response: SystemResponse,
  status: ErrorStatus = statusOf(response.error!.code)
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(
    encodeResponse(new SystemResponse({ ...response, error: withoutStacks(response.error!) }, true)),
    { status }
  )

const chatFailure = (
  error: SystemError,
  status: ErrorStatus = statusOf(error.code)
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(
    { error: { message: error.message, type: openAiErrorType(status), code: error.code, param: null } },
    { status }
  )

const openAiErrorJson = (error: SystemError) => ({
  error: { message: error.message, type: openAiErrorType(statusOf(error.code)), code: error.code, param: null }
})

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
      const now = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

      const run = (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const generated = yield* newRequestId
          const body = yield* Effect.either(readJson(request, maxBodyBytes))
          if (Either.isLeft(body)) {
            return runFailure(failedResponse(generated, invalidRequest(body.left.message)), body.left.status)
          }
          const traceId = traceIdOf(request.headers["traceparent"])
          const raw = body.right
          const envelope = isRecord(raw)
            ? {
                ...raw,
                ...(raw.requestId === undefined ? { requestId: generated } : {}),
                ...(raw.traceId === undefined && traceId !== undefined ? { traceId } : {}),
                hints: withTimeout(raw.hints, limitMs)
              }
            : raw
          const requestId = isRecord(envelope) && typeof envelope.requestId === "string" ? envelope.requestId : generated
          const response = yield* runTied(system, requestId, system.runUnknown(envelope), backstop)
          if (response.error !== undefined) return runFailure(response)
          return response
        })

      const chat = (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const requestId = yield* newRequestId
          const body = yield* Effect.either(readJson(request, maxBodyBytes))
          if (Either.isLeft(body)) {
            return chatFailure(invalidRequest(body.left.message), body.left.status)
          }
          const decoded = Schema.decodeUnknownEither(ChatCompletionRequest, { errors: "all" })(body.right)
          if (Either.isLeft(decoded)) {
            const issues = Issues.describe(decoded.left, "a chat completion request object")
            return chatFailure(invalidRequest(`Invalid chat completion request: ${issues.join("; ")}`, { issues }))
          }
          const completion = decoded.right
          const envelope = OpenAi.toEnvelope(completion, {
            requestId,
            traceId: traceIdOf(request.headers["traceparent"]),
            timeoutMs: limitMs
          })
          if (Either.isLeft(envelope)) return chatFailure(invalidRequest(envelope.left))
          const structured = OpenAi.isStructured(completion)
          const meta = {
            id: OpenAi.completionId(requestId),
            model: (yield* engine.modelInfo).name,
            created: yield* now
          }

          if (completion.stream !== true) {
            const response = yield* runTied(system, requestId, system.runUnknown(envelope.right), backstop)
            yield* forget(response)
            if (response.error !== undefined) return chatFailure(response.error)
            return OpenAi.toCompletion(response, { ...meta, structured })
          }

          // -- streaming: status and headers wait for the first delta or the answer,
          // so that an early failure is still a plain JSON error with its status.
          const queue = yield* Queue.unbounded<Item>()
          const fiber = yield* Effect.forkDaemon(
            system
              .runUnknown(envelope.right, {
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
            return chatFailure(first.response.error)
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

/** The API with its handlers, without a server (for `HttpApiBuilder.toWebHandler` or a custom server). */
export const layerApi = (options: Options = {}): Layer.Layer<HttpApi.Api, never, PaganticSystem | Engine> =>
  HttpApiBuilder.api(PaganticApi).pipe(Layer.provide(handlers(options)))

/** The adapter on a Node HTTP server, listening on 127.0.0.1:8080 unless told otherwise. */
export const layer = (options: Options = {}) =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(layerApi(options)),
    Layer.provideMerge(
      NodeHttpServer.layer(createServer, { port: options.port ?? defaults.port, host: options.host ?? defaults.host })
    )
  )

/**
 * The adapter configured from the environment: PAGANTIC_PORT (default 8080),
 * PAGANTIC_HOST (default 127.0.0.1), PAGANTIC_MAX_BODY_BYTES (default 1 MiB),
 * PAGANTIC_REQUEST_TIMEOUT (default 5 minutes, e.g. "90 seconds"). It logs the
 * address it listens on.
 */
export const layerConfig = () =>
  Layer.unwrapEffect(
    Effect.map(
      Config.all({
        port: Config.withDefault(Config.integer("PAGANTIC_PORT"), defaults.port),
        host: Config.withDefault(Config.string("PAGANTIC_HOST"), defaults.host),
        maxBodyBytes: Config.withDefault(Config.integer("PAGANTIC_MAX_BODY_BYTES"), defaults.maxBodyBytes),
        requestTimeout: Config.withDefault(Config.duration("PAGANTIC_REQUEST_TIMEOUT"), defaults.requestTimeout)
      }),
      (options) => HttpServer.withLogAddress(layer(options))
    )
  )

/** Serves until interrupted (for `pagantic serve` and `serve.ts`): the facade and engine come from `system`. */
export const serve = <E>(
  system: Layer.Layer<PaganticSystem | Engine, E>,
  options?: Options
): Effect.Effect<never, E | ServeError | ConfigError.ConfigError> =>
  Layer.launch(
    (options === undefined ? layerConfig() : HttpServer.withLogAddress(layer(options))).pipe(Layer.provide(system))
  )
