/**
 * The edge of the HTTP server, around every route: who is calling (a key and
 * the principal it belongs to, `Keys.ts`, provided to the handlers as
 * `CurrentPrincipal`),
 * through which name (the Host header of a loopback server, against DNS
 * rebinding), what an unknown path or a wrong method gets (JSON, like every other
 * error), and what a bug gets (a JSON 500 that names an error id, logged with it;
 * never an empty body, never a stack trace to the client).
 *
 * Errors are shaped by the endpoint a client called: OpenAI's `{ error }` under
 * `/v1/chat/completions`, a SystemResponse with its SystemError everywhere else.
 * A handler refuses a request with its endpoint's typed error (`refuseRun`,
 * `refuseChat`), which HttpApi encodes with its status; the edge lets those
 * through and answers for itself only outside the handlers.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { excerptCause, SystemError, SystemResponse, ToolCallRecord } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as Json from "../../domain/Json.js"
import * as Body from "./Body.js"
import { ChatFailure, type OpenAiErrorBody, type RefusalStatus, RunFailure } from "./Api.js"
import * as Guard from "./Guard.js"
import type { KeyRing } from "./Keys.js"
import { CurrentPrincipal, local } from "./Principal.js"
import { openAiErrorType, statusOfError } from "./Status.js"

/** The routes and their methods (for 404 against 405), `{x}` a path segment. */
const routes: ReadonlyArray<readonly [string, string]> = [
  ["/v1/run", "POST"],
  ["/v1/chat/completions", "POST"],
  ["/v1/responses", "POST"],
  ["/v1/queries", "POST"],
  ["/v1/models", "GET"],
  ["/v1/models/{id}", "GET"],
  ["/v1/runs", "GET"],
  ["/v1/runs/{id}", "GET"],
  ["/v1/runs/{id}/events", "GET"],
  ["/v1/runs/{id}/cancel", "POST"],
  ["/v1/runs/{id}/slots/{slot}", "POST"],
  ["/v1/responders/{id}/inbox", "GET"],
  ["/v1/events", "GET"],
  ["/v1/events/stream", "GET"],
  ["/health", "GET"],
  ["/", "GET"]
]
const routePatterns = routes.map(([route, method]) =>
  [new RegExp(`^${route.replace(/\{[a-z]+\}/g, "[^/]+")}$`), method] as const
)

/** The method of the route `path` is, if it is one. */
const allowedOn = (path: string): string | undefined => routePatterns.find(([pattern]) => pattern.test(path))?.[1]

export interface EdgeOptions {
  /**
   * The keys accepted (`Keys.make`). When set, every route but /health and the
   * open paths needs `Authorization: Bearer <key>` of one of them, and the
   * handlers see its principal as `CurrentPrincipal`; when not, everyone who
   * reaches the server is `Principal.local`, an admin.
   */
  readonly keys?: KeyRing | undefined
  /**
   * Host header names accepted (without port). Default for a loopback bind:
   * localhost, 127.0.0.1, ::1 (a web page that rebinds its own name to 127.0.0.1
   * still sends its own name, and is refused). Default for other binds: any.
   */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /** Paths served without the key besides /health: static files that carry no data (the runs page). */
  readonly openPaths?: ReadonlyArray<string> | undefined
  /** Origins whose pages may call the API (CORS): their requests are not cross-site refusals. */
  readonly corsOrigins?: ReadonlyArray<string> | undefined
}

/** The methods that change nothing: never refused as cross-site. */
const safeMethods = new Set(["GET", "HEAD", "OPTIONS"])

/**
 * Why a state-changing request came from another site's page, or undefined: a
 * browser says so in `Sec-Fetch-Site` (cross-site or same-site: another port
 * of localhost is same-site), else in an `Origin` that is not the server's own.
 * A form or a fetch in `no-cors` mode needs no preflight, so without this a
 * page could cancel a run (or post to a `--no-auth` server). Clients that are
 * not browsers send neither header.
 */
export const crossSite = (
  headers: Readonly<Record<string, string | undefined>>,
  allowedOrigins: ReadonlyArray<string>
): { readonly field: string; readonly value: string } | undefined => {
  const origin = headers["origin"]
  if (origin !== undefined && allowedOrigins.includes(origin)) return undefined
  const site = headers["sec-fetch-site"]
  if (site === "cross-site" || site === "same-site") return { field: "Sec-Fetch-Site", value: site }
  if (origin === undefined) return undefined
  const own = headers["host"]
  let host: string | undefined
  try {
    host = origin === "null" ? undefined : new URL(origin).host
  } catch {
    host = undefined
  }
  return host !== undefined && own !== undefined && host === own.toLowerCase() ? undefined : { field: "Origin", value: origin }
}

const loopbackNames = ["localhost", "127.0.0.1", "::1", "[::1]"]

/** The whole 127.0.0.0/8 block is loopback: a server bound to 127.0.0.2 is reached by that name. */
const isLoopbackName = (name: string) => loopbackNames.includes(name) || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name)

/** Whether a bind address is loopback only. */
export const isLoopback = (host: string): boolean =>
  host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host)

/** The Host names a server bound to `host` accepts, or undefined for any. */
export const hostsFor = (host: string, allowed: ReadonlyArray<string> | undefined): ReadonlyArray<string> | undefined =>
  allowed !== undefined && allowed.length > 0
    ? allowed.map((h) => h.toLowerCase())
    : isLoopback(host)
    ? loopbackNames
    : undefined

const hostnameOf = (header: string): string => {
  const h = header.trim().toLowerCase()
  if (h.startsWith("[")) return h.slice(0, h.indexOf("]") + 1)
  const colon = h.lastIndexOf(":")
  return colon === -1 ? h : h.slice(0, colon)
}

const encodeResponse = Schema.encodeSync(SystemResponse)

const printableAscii = /^[\x21-\x7e]*$/

/**
 * The request id as an `x-request-id` value: as the client sent it when it is
 * printable ASCII, otherwise its UTF-8 bytes percent-encoded (a header value
 * carries no control characters and Node refuses anything past Latin-1: setting
 * it raw would fail the response after the handler ran). The body carries the id
 * unchanged.
 */
export const requestIdHeader = (requestId: string): string =>
  printableAscii.test(requestId) && !requestId.includes("%")
    ? requestId
    : Array.from(Buffer.from(requestId, "utf8"), (byte) =>
      byte >= 0x21 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`).join("")

/**
 * The edge's own answers (401, 403, 404, 405, 500), outside any endpoint's
 * handler, shaped as the endpoint at `path` shapes its errors.
 */
export const errorResponse = (
  path: string,
  status: number,
  error: SystemError,
  requestId: string,
  headers: Record<string, string> = {}
): HttpServerResponse.HttpServerResponse => {
  return HttpServerResponse.unsafeJson(
    path === "/v1/chat/completions" || path === "/v1/responses" || path === "/v1/models" || path.startsWith("/v1/models/")
      ? openAiError(error, status)
      : encodeResponse(failedResponse(error, requestId, undefined)),
    { status, headers: { "x-request-id": requestIdHeader(requestId), ...headers } }
  )
}

/**
 * A refused request as its endpoint's typed error, with the status its error
 * says (whose fault it is). Every 5xx is logged with the request id and the code;
 * no user content beyond the error's short message excerpt. The response carries
 * the request id in `x-request-id`.
 */
const refusal = <F>(error: SystemError, requestId: string, status: RefusalStatus, failure: F): Effect.Effect<never, F> =>
  Effect.gen(function* () {
    if (status >= 500) {
      yield* Effect.logError("request failed").pipe(
        Effect.annotateLogs({ requestId, status, code: error.code, message: Text.excerpt(error.message, 200) })
      )
    }
    yield* HttpApp.appendPreResponseHandler((_, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "x-request-id", requestIdHeader(requestId)))
    )
    return yield* Effect.fail(failure)
  })

/** Refuses a `/v1/run` request: its SystemResponse (with partial output, when there is one) under `error`. */
export const refuseRun = (
  error: SystemError,
  requestId: string,
  status: RefusalStatus = statusOfError(error),
  partial?: SystemResponse
): Effect.Effect<never, RunFailure> =>
  refusal(error, requestId, status, new RunFailure({ status, response: failedResponse(error, requestId, partial) }))

/** Refuses a `/v1/chat/completions` request: OpenAI's `{ error }`. */
export const refuseChat = (
  error: SystemError,
  requestId: string,
  status: RefusalStatus = statusOfError(error)
): Effect.Effect<never, ChatFailure> =>
  refusal(error, requestId, status, new ChatFailure({ status, body: openAiError(error, status, requestId) }))

/**
 * A refused request's SystemResponse: its partial output, and the tool calls it
 * made (it reports what it did), each call's arguments and result cut to an
 * excerpt as the error's details are: a refusal never sends a client's large
 * input back.
 */
/**
 * The longest excerpt of a caller's input an error response quotes: the project's
 * default excerpt (domain/Text), so an error never sends a long hostile string back
 * whole.
 */
const QUOTED = Text.defaultExcerptLength
const quoted = { maxString: QUOTED, maxDepth: 5, maxItems: 20 } as const

const failedResponse = (error: SystemError, requestId: string, partial: SystemResponse | undefined): SystemResponse => {
  const base = partial ?? new SystemResponse({ requestId, content: "", toolCallsMade: [], tokenUsage: TokenUsage.empty })
  return new SystemResponse(
    {
      ...base,
      toolCallsMade: base.toolCallsMade.map((call) =>
        new ToolCallRecord({
          ...call,
          id: Text.excerpt(call.id, QUOTED),
          name: Text.excerpt(call.name, QUOTED),
          arguments: Text.bounded(call.arguments, quoted) as Record<string, unknown>,
          result: Text.excerpt(call.result, QUOTED)
        }, true)
      ),
      error: forClient(error)
    },
    true
  )
}

/**
 * An error as OpenAI's `{ error }` body (also an SSE event once a stream has
 * begun): the taxonomy code as `code`, the field at fault as `param` (the
 * details' `param`, else their `field`), and the rest of the SystemError under
 * `pagantic`.
 */
export const openAiError = (error: SystemError, status: number = statusOfError(error), requestId?: string): OpenAiErrorBody => {
  const safe = forClient(error)
  const { param, field } = error.details
  return {
    error: {
      message: safe.message,
      type: openAiErrorType(status),
      code: safe.code,
      param: typeof param === "string" ? Text.excerpt(param, 200) : typeof field === "string" ? Text.excerpt(field, 200) : null,
      pagantic: {
        ...(requestId === undefined ? {} : { requestId }),
        category: safe.category,
        retryable: safe.retryable,
        details: safe.details
      }
    }
  }
}

/**
 * An error as a client may see it: the message and every string in the details
 * cut to a short excerpt, nesting and counts bounded, stack-frame lines dropped.
 */
export const forClient = (error: SystemError): SystemError =>
  new SystemError(
    {
      ...error,
      message: Text.excerpt(error.message, 1_000),
      details: Text.bounded(withoutStacks(error.details), quoted) as Record<string, unknown>,
      ...(error.causedBy === undefined ? {} : { causedBy: excerptCause(error.causedBy, QUOTED) })
    },
    true
  )

const STACK_FRAME = /^\s*at\s.*(\(.*\)|:\d+:\d+)\s*$/

const withoutStacks = (details: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(details).map(([k, v]) => [
      k,
      typeof v === "string" ? v.split("\n").filter((line) => !STACK_FRAME.test(line)).join("\n") : v
    ])
  )

/** A Guard problem as the client's mistake, naming the field. */
export const fromProblem = (problem: Guard.Problem): SystemError =>
  invalidRequest(`${problem.field}: ${problem.message}`, { field: problem.field })

/** A client's mistake at the edge (CONFIG_INVALID_REQUEST, not retryable). */
export const invalidRequest = (message: string, details: Record<string, unknown> = {}): SystemError =>
  new SystemError({
    code: "CONFIG_INVALID_REQUEST",
    category: "ConfigurationFailure",
    retryable: false,
    message,
    details
  })

const newErrorId = Effect.sync(() => `req_${globalThis.crypto.randomUUID()}`)

/**
 * The edge as a middleware over the API's app: host and key first, then the
 * routes; an unknown route is 404 (405 with `Allow` for a known path), a defect
 * anywhere below is a logged JSON 500.
 */
export const middleware = (options: EdgeOptions & { readonly host: string }) => {
  const hosts = hostsFor(options.host, options.allowedHosts)
  const open = new Set(["/health", ...(options.openPaths ?? [])])
  return (app: HttpApp.Default): HttpApp.Default =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const path = pathOf(request.url)
      if (hosts !== undefined) {
        const header = request.headers["host"]
        const name = header === undefined ? undefined : hostnameOf(header)
        const accepted = name !== undefined && (hosts === loopbackNames ? isLoopbackName(name) : hosts.includes(name))
        if (!accepted) {
          return errorResponse(
            path,
            403,
            invalidRequest(
              `The Host header ${header === undefined ? "is missing" : JSON.stringify(Text.excerpt(header, 60))}: this server answers to ${
                hosts.join(", ")
              } (set allowedHosts / PAGANTIC_ALLOWED_HOSTS to add a name)`,
              { field: "Host" }
            ),
            yield* newErrorId
          )
        }
      }
      if (!safeMethods.has(request.method)) {
        const foreign = crossSite(request.headers, options.corsOrigins ?? [])
        if (foreign !== undefined) {
          return errorResponse(
            path,
            403,
            invalidRequest(
              `A ${request.method} from another site's page is refused (${foreign.field}: ${JSON.stringify(Text.excerpt(foreign.value, 60))}): call this server from its own page or from a client that is not a browser (set corsOrigins / PAGANTIC_CORS_ORIGINS to allow an origin)`,
              { field: foreign.field }
            ),
            yield* newErrorId
          )
        }
      }
      if (options.keys === undefined) return yield* Effect.provideService(app, CurrentPrincipal, local)
      if (open.has(path)) return yield* app
      const header = request.headers["authorization"] ?? ""
      const match = /^Bearer\s+(.+)$/i.exec(header.trim())
      const principal = match === null ? undefined : options.keys.authenticate(match[1]!)
      if (principal === undefined) {
        return errorResponse(
          path,
          401,
          invalidRequest(
            match === null
              ? "This server needs an API key: send Authorization: Bearer <key> (pagantic serve prints its key at start; pagantic keys add makes more)"
              : "The API key in the Authorization header is not valid",
            { field: "Authorization" }
          ),
          yield* newErrorId,
          { "www-authenticate": "Bearer" }
        )
      }
      return yield* Effect.provideService(app, CurrentPrincipal, principal)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Effect.gen(function* () {
          if (Cause.isInterruptedOnly(cause)) return yield* Effect.failCause(cause as Cause.Cause<never>)
          const failure = Cause.failureOption(cause)
          // an endpoint's typed refusal: HttpApi encodes it with its status
          if (Option.isSome(failure) && isRefusal(failure.value)) return yield* Effect.failCause(cause as Cause.Cause<never>)
          const request = yield* HttpServerRequest.HttpServerRequest
          const path = pathOf(request.url)
          if (Option.isSome(failure) && isRouteNotFound(failure.value)) {
            // a known route asked with its own method matched no handler (a path
            // parameter past the router's length limit): not found, not a method problem
            const allowed = allowedOn(path)
            return allowed === undefined || allowed === request.method
              ? errorResponse(
                path,
                404,
                invalidRequest(`No route ${request.method} ${Text.excerpt(path, 80)}: the routes are ${describeRoutes()}`, {
                  field: "path"
                }),
                yield* newErrorId
              )
              : errorResponse(
                path,
                405,
                invalidRequest(`${Text.excerpt(request.method, 20)} is not allowed on ${path}: use ${allowed}`, {
                  field: "method"
                }),
                yield* newErrorId,
                { allow: allowed }
              )
          }
          const errorId = yield* newErrorId
          yield* Effect.logError("HTTP request failed with a defect").pipe(
            Effect.annotateLogs({ errorId, method: request.method, path: Text.excerpt(path, 80) }),
            Effect.annotateLogs("cause", Text.excerpt(Cause.pretty(cause), 2_000))
          )
          return errorResponse(
            path,
            500,
            new SystemError({
              code: "ORCHESTRATION_DEFECT",
              category: "OrchestrationFailure",
              retryable: false,
              message: `Internal error (logged as ${errorId})`,
              details: {}
            }),
            errorId
          )
        })
      )
    )
}

const isRefusal = (e: unknown): boolean => e instanceof RunFailure || e instanceof ChatFailure

const isRouteNotFound = (e: unknown): boolean =>
  typeof e === "object" && e !== null && (e as { readonly _tag?: unknown })._tag === "RouteNotFound"

const describeRoutes = () => routes.map(([path, method]) => `${method} ${path}`).join(", ")

const pathOf = (url: string): string => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/**
 * The body of a request to an endpoint shaped like `/v1/run`: read within
 * `maxBodyBytes` (JSON only), bounded by the guard's shape limits and then by
 * `check`, and a JSON object (`what` names what it should be); otherwise the
 * refusal, under the server-generated `requestId`.
 */
export const readRunBody = (
  request: HttpServerRequest.HttpServerRequest,
  settings: { readonly maxBodyBytes: number; readonly limits: Guard.Limits },
  check: (body: unknown, limits: Guard.Limits) => Either.Either<void, Guard.Problem>,
  what: string,
  requestId: string
): Effect.Effect<Record<string, unknown>, RunFailure> =>
  Effect.gen(() => readRunBodySteps(request, settings, check, what, requestId))

/** The steps of `readRunBody`, one generator function for every request (a generator function made per call costs V8 new maps). */
function* readRunBodySteps(request: HttpServerRequest.HttpServerRequest, settings: { readonly maxBodyBytes: number; readonly limits: Guard.Limits }, check: (body: unknown, limits: Guard.Limits) => Either.Either<void, Guard.Problem>, what: string, requestId: string) {
  const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
  if (Either.isLeft(body)) return yield* refuseRun(invalidRequest(body.left.message), requestId, body.left.status)
  const raw = body.right
  const checked = Either.flatMap(Guard.checkShape(raw, settings.limits), () => check(raw, settings.limits))
  if (Either.isLeft(checked)) return yield* refuseRun(fromProblem(checked.left), requestId)
  if (!Json.isObject(raw)) return yield* refuseRun(invalidRequest(`the body must be a JSON object (${what})`), requestId)
  return raw
}
