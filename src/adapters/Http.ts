/**
 * The HTTP adapter: a thin shell around the facade on @effect/platform's HttpApi.
 *
 *   POST /v1/run               a SystemRequest in, the SystemResponse out (`http/Run.ts`)
 *   POST /v1/chat/completions  OpenAI-compatible, JSON or SSE (`http/ChatCompletions.ts`)
 *   POST /v1/responses         OpenAI's Responses API over the same path (`http/Responses.ts`)
 *   POST /v1/queries           an infer.query.v1 query, answered or started (`http/Queries.ts`)
 *   GET  /v1/models, /v1/models/{id}  OpenAI-compatible: the model served (`http/Models.ts`)
 *   GET  /health               the engine's model and "ok"
 *   /v1/runs...                the durable runs, when the server has `Runs` (`http/Runs.ts`)
 *   GET  /v1/responders/{id}/inbox  a human responder's slots (SSE), when it has `Notifications` (`http/Inbox.ts`)
 *   GET  /, /v1/events, /v1/events/stream   the runs page and the EventLog it reads (`http/Page.ts`)
 *
 * The contract is `http/Api.ts`; each endpoint has its handler here. A handler
 * adds what only the transport knows and hands the envelope to `PaganticSystem`;
 * a success is encoded by the endpoint's success schema, a refusal is the
 * endpoint's typed error (`RunFailure`, `ChatFailure`) which HttpApi sends with
 * its status (`http/Status.ts`). No prompt building, no tool execution, no
 * validation here. A run is tied to its connection (`http/Lifetime.ts`): a client
 * that hangs up cancels its request. Around every route sits the edge
 * (`http/Edge.ts`: host and key checks, JSON 404/405/500); options and their
 * environment variables are in `http/Config.ts`. This module wires them into layers.
 *
 * Bodies are read by the handlers (`handleRaw`, `http/Body.ts`), not by HttpApi's
 * payload decoding, on purpose: the edge must bound and walk raw JSON
 * (`http/Guard.ts`: depth, sizes, counts) before any schema decodes it, and the
 * platform's reader cannot give the answers a client is owed. Measured on
 * @effect/platform 0.97: past `HttpIncomingMessage.withMaxBodySize` it destroys
 * the request, so the client sees a reset connection instead of a 413; a body
 * that is not JSON is a defect (a 400 with an empty body); a missing or
 * text/plain content type is read anyway (no 415, so a web page could post
 * without a preflight); an empty body decodes as `null`. `Body.readJson` keeps
 * the byte cap (declared and streamed, draining instead of cutting), the 415 and
 * the JSON errors.
 */
import type * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type { ServeError } from "@effect/platform/HttpServerError"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as FileSystem from "@effect/platform/FileSystem"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { createServer } from "node:http"
import type { ConfigurationFailure } from "../domain/Failure.js"
import type { PaganticSystem } from "../programs/Facade.js"
import { Engine } from "../services/Engine.js"
import * as Admission from "./http/Admission.js"
import { PaganticApi } from "./http/Api.js"
import * as ChatCompletions from "./http/ChatCompletions.js"
import * as Responses from "./http/Responses.js"
import { defaults, type Options, optionsConfig, settingsOf } from "./http/Config.js"
import * as Edge from "./http/Edge.js"
import * as Inbox from "./http/Inbox.js"
import * as Keys from "./http/Keys.js"
import * as Models from "./http/Models.js"
import * as Owners from "./http/Owners.js"
import * as Page from "./http/Page.js"
import * as Queries from "./http/Queries.js"
import * as Run from "./http/Run.js"
import * as RunsHttp from "./http/Runs.js"

export * as Api from "./http/Api.js"
export { type Options, optionsConfig } from "./http/Config.js"
export * as Guard from "./http/Guard.js"
export * as Inbox from "./http/Inbox.js"
export * as Keys from "./http/Keys.js"
export * as Principal from "./http/Principal.js"
export * as Page from "./http/Page.js"
export * as PageTrace from "./http/PageTrace.js"
export { statusOf, statusOfError, traceIdOf } from "./http/Status.js"

const handlers = (options: Options, places: Admission.Places) =>
  HttpApiBuilder.group(PaganticApi, "pagantic", (handlers) =>
    Effect.gen(function* () {
      const settings = settingsOf(options)
      const engine = yield* Engine
      const run = yield* Run.make(settings, places)
      const chat = yield* ChatCompletions.make(settings)
      const responses = yield* Responses.make(settings)
      const queries = yield* Queries.make(settings, places)
      return handlers
        .handleRaw("run", ({ request }) => run(request))
        .handleRaw("chatCompletions", ({ request }) => chat(request))
        .handleRaw("responses", ({ request }) => responses(request))
        .handleRaw("queries", ({ request }) => queries(request))
        .handle("health", () => Effect.map(engine.modelInfo, (model) => ({ status: "ok" as const, model })))
    })
  )

/** OpenAI's models routes: the engine's model. */
const modelsHandlers = HttpApiBuilder.group(PaganticApi, "models", (handlers) =>
  Effect.map(Models.make, (models) =>
    handlers.handle("listModels", () => models.list).handle("showModel", ({ path }) => models.show(path.id))))

/** The runs endpoints: served on the `Runs` in context, a 404 saying so without it. */
const runsHandlers = (options: Options, places: Admission.Places) =>
  HttpApiBuilder.group(PaganticApi, "runs", (handlers) =>
    Effect.map(RunsHttp.make(settingsOf(options), places), (runs) =>
      handlers
        .handleRaw("listRuns", ({ request }) => runs.list(request))
        .handleRaw("startRun", ({ request }) => runs.start(request))
        .handleRaw("showRun", ({ path }) => runs.show(path.id))
        .handleRaw("runEvents", ({ path, request }) => runs.events(request, path.id))
        .handleRaw("cancelRun", ({ path }) => runs.cancel(path.id))
        .handleRaw("respondToSlot", ({ path, request }) => runs.respond(request, path.id, path.slot))))

/** A responder's inbox: served on the `Notifications` in context, a 404 saying so without it. */
const respondersHandlers = HttpApiBuilder.group(PaganticApi, "responders", (handlers) =>
  Effect.map(Inbox.make, (inbox) => handlers.handleRaw("responderInbox", ({ path, request }) => inbox(request, path.id))))

/**
 * The keys a server with `options` accepts: `apiKey` (the admin named `admin`),
 * `keys` and the keys file's, in one ring; undefined when none is configured
 * (everyone who reaches the server is `Principal.local`).
 */
export const keyRingOf = (
  options: Options
): Effect.Effect<Keys.KeyRing | undefined, ConfigurationFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fromFile = options.keysFile === undefined ? [] : yield* Keys.load(options.keysFile)
    const entries: ReadonlyArray<Keys.KeyEntry> = [
      ...(options.apiKey === undefined ? [] : [{ name: "admin", role: "admin" as const, key: options.apiKey }]),
      ...(options.keys ?? []),
      ...fromFile
    ]
    return entries.length === 0 && options.keysFile === undefined ? undefined : yield* Keys.make(entries)
  })

/**
 * The API with its handlers and its edge (host and key checks, JSON 404/405/500,
 * CORS when configured), without a server: for `HttpApiBuilder.toWebHandler` or a
 * custom server. A keys file that cannot be read or a malformed key fails it
 * with CONFIG_INVALID_REQUEST naming the entry.
 */
export const layerApi = (options: Options = {}): Layer.Layer<HttpApi.Api, ConfigurationFailure, PaganticSystem | Engine> =>
  Layer.unwrapEffect(Effect.map(keyRingOf(options), (keys) => {
    const edge = Edge.middleware({
      host: options.host ?? defaults.host,
      keys,
      allowedHosts: options.allowedHosts,
      openPaths: Page.staticPaths,
      corsOrigins: options.corsOrigins
    })
    const cors = options.corsOrigins !== undefined && options.corsOrigins.length > 0
      ? HttpMiddleware.cors({
        allowedOrigins: options.corsOrigins,
        allowedHeaders: ["authorization", "content-type", "traceparent", "prefer", "last-event-id"],
        exposedHeaders: ["x-request-id", "x-run-id", "location", "preference-applied"],
        allowedMethods: ["GET", "POST"]
      })
      : undefined
    // one count of durable runs in flight for every route that starts them
    const places = Admission.runPlaces(settingsOf(options))
    return HttpApiBuilder.api(PaganticApi).pipe(
      Layer.provide(handlers(options, places)),
      Layer.provide(modelsHandlers),
      Layer.provide(runsHandlers(options, places)),
      Layer.provide(respondersHandlers),
      Layer.provide(HttpApiBuilder.middleware(Effect.map(Page.middleware(settingsOf(options)), (page) => (app) => {
        const served = edge(page(app))
        return cors === undefined ? served : cors(served)
      }))),
      // one map of request owners for the handlers and the events routes
      Layer.provide(Owners.layer)
    )
  })).pipe(Layer.provide(NodeFileSystem.layer))

/** Whether a server with `options` asks for a key. */
const hasKeys = (options: Options): boolean =>
  options.apiKey !== undefined || options.keysFile !== undefined || (options.keys !== undefined && options.keys.length > 0)

/** A warning at start when the server listens beyond loopback without a key. */
export const warnIfOpen = (options: Options): Layer.Layer<never> => {
  const host = options.host ?? defaults.host
  return Edge.isLoopback(host) || hasKeys(options)
    ? Layer.empty
    : Layer.effectDiscard(
      Effect.logWarning(
        `pagantic serve listens on ${host} WITHOUT a key: anyone who can reach this address can run the model and its tools, and sees every run. Set PAGANTIC_API_KEY or PAGANTIC_KEYS_FILE, or listen on 127.0.0.1.`
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

/**
 * The adapter configured from the environment: PAGANTIC_PORT (default 8080),
 * PAGANTIC_HOST (default 127.0.0.1), PAGANTIC_MAX_BODY_BYTES (default 1 MiB),
 * PAGANTIC_REQUEST_TIMEOUT (default 5 minutes, e.g. "90 seconds"),
 * PAGANTIC_API_KEY (the admin's Bearer key; none by default), PAGANTIC_KEYS_FILE
 * (more principals, see `Keys`), PAGANTIC_ALLOWED_HOSTS and
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
): Effect.Effect<never, E | ServeError | ConfigError.ConfigError | ConfigurationFailure> =>
  Layer.launch(layerConfig(options).pipe(Layer.provide(system)))
