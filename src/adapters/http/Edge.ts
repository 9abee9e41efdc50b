/**
 * The edge of the HTTP server, around every route: who is calling (a key and
 * the principal it belongs to, `Keys.ts`, provided to the handlers as
 * `CurrentPrincipal`),
 * through which name (the Host header of a loopback server, against DNS
 * rebinding), what an unknown path or a wrong method gets (JSON, like every other
 * error), and what a bug gets (a JSON 500 that names an error id, logged with it;
 * never an empty body, never a stack trace to the client).
 *
 * A handler refuses a request with its endpoint's typed error (`Refusals.ts`:
 * `refuseRun`, `refuseChat`), which HttpApi encodes with its status; the edge
 * lets those through and answers for itself only outside the handlers.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpApp from "@effect/platform/HttpApp"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { SystemError } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import * as Json from "../../domain/Json.js"
import * as Body from "./Body.js"
import { ChatFailure, RunFailure } from "./Api.js"
import * as Guard from "./Guard.js"
import type { KeyRing } from "./Keys.js"
import { CurrentPrincipal, local } from "./Principal.js"
import { errorResponse, fromProblem, invalidRequest, refuseRun } from "./Refusals.js"

/** The routes and their methods (for 404 against 405), `{x}` a path segment. */
const routes: ReadonlyArray<readonly [string, string]> = [
  ["/v1/run", "POST"],
  ["/v1/chat/completions", "POST"],
  ["/v1/responses", "POST"],
  ["/v1/queries", "POST"],
  ["/v1/models", "GET"],
  ["/v1/models/{id}", "GET"],
  ["/v1/runs", "GET"],
  ["/v1/runs", "POST"],
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

/** The methods of the route `path` is (as an Allow header lists them), if it is one. */
const allowedOn = (path: string): string | undefined => {
  const methods = routePatterns.filter(([pattern]) => pattern.test(path)).map(([, method]) => method)
  return methods.length === 0 ? undefined : methods.join(", ")
}

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
            return allowed === undefined || allowed.split(", ").includes(request.method)
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
