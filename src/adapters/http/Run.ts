/**
 * `POST /v1/run`: a SystemRequest in, the SystemResponse out. The handler reads
 * the body (bounded in bytes), checks what only the transport can (bounds, ids,
 * sessions the server holds), adds what only the transport knows (a request id,
 * the W3C `traceparent` trace id, the server's time limit) and hands the envelope
 * to `PaganticSystem.runUnknown`, which decodes and checks it.
 *
 * A request may ask not to wait: `Prefer: respond-async` (RFC 7240), optionally
 * with `wait=N` (seconds). When the server keeps durable runs and offers request
 * runs (`RequestRun.RequestRuns`), the request is checked (decoded and the
 * facade's INIT checks: a bad one is refused as usual and no run is started),
 * then started as a durable run; the answer is
 * 202 with `{ runId, requestId, status, links, timeoutMs, deadline }`, `Location: /v1/runs/{id}` and
 * `Preference-Applied: respond-async`, unless the run ends within `wait` seconds:
 * then the answer is the response itself (or its refusal), as without the
 * preference, with the run's id in `x-run-id`. The run goes on in the server (a
 * client that hangs up does not cancel it); `GET /v1/runs/{id}` gives the
 * SystemResponse as its result, or the request's error; `POST
 * /v1/runs/{id}/cancel` cancels it (CANCELLED_SIGNAL). Such a run has the
 * server's time limit for async runs (`asyncRunTimeout`, not the request limit:
 * a shorter `hints.timeout` from the client wins), stated in the 202 as
 * `timeoutMs` and `deadline`; past it the run ends failed, CANCELLED_TIMEOUT (a
 * run re-driven after a restart gets its whole limit again). Its request id
 * stays in use until it ends. Such a run takes a place among the server's durable
 * runs in flight (`Admission`) until it ends: past the limit (the server's, or
 * the principal's) the request is 429 with `Retry-After` and nothing starts. A
 * server without them answers in the request, with no `Preference-Applied`.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Json from "../../domain/Json.js"
import { SystemResponse, toSystemError } from "../../domain/System.js"
import { PaganticSystem } from "../../programs/Facade.js"
import { RequestRuns } from "../../programs/facade/RequestRun.js"
import { ConversationStore } from "../../services/ConversationStore.js"
import type { RunInfo, RunsError } from "../../services/Runs.js"
import { Runs } from "../../services/Runs.js"
import * as Admission from "./Admission.js"
import type { RunAccepted } from "./Api.js"
import type { Settings } from "./Config.js"
import * as Edge from "./Edge.js"
import * as Refusals from "./Refusals.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import * as Owners from "./Owners.js"
import { CurrentPrincipal } from "./Principal.js"
import { ownerOf } from "./Runs.js"
import { statusOfError, traceIdOf } from "./Status.js"

/** The longest id (request, session, trace) a client may send. */
const maxIdLength = 128

/** An id field a client may set: absent, or a string of 1 to 128 characters. */
const checkId = (raw: Record<string, unknown>, field: "requestId" | "sessionId" | "traceId"): Guard.Problem | undefined => {
  const value = raw[field]
  return value === undefined || (typeof value === "string" && value.length > 0 && value.length <= maxIdLength)
    ? undefined
    : { field, message: `expected a string of 1 to ${maxIdLength} characters` }
}

/** The timeout hint (ms) of `hints`, when it has a positive one. */
const timeoutOf = (hints: unknown): number | undefined =>
  Json.isObject(hints) && typeof hints.timeout === "number" && hints.timeout > 0 ? hints.timeout : undefined

/** The server's limit as the envelope's timeout hint (ms); a shorter hint from the client wins. */
const withTimeout = (hints: unknown, limitMs: number | undefined): unknown => {
  if (limitMs === undefined) return hints
  if (hints === undefined) return { timeout: limitMs }
  if (!Json.isObject(hints)) return hints
  const t = hints.timeout
  if (t === undefined || t === 0) return { ...hints, timeout: limitMs }
  return typeof t === "number" && t > 0 ? { ...hints, timeout: Math.min(t, limitMs) } : hints
}

const refuse = Refusals.refuseRun

// ---------------------------------------------------------------------------
// Prefer: respond-async
// ---------------------------------------------------------------------------

/** The longest `wait` honoured, in seconds (a longer one is cut to it, or to the server's limit when shorter). */
export const maxWaitSeconds = 3_600

/** What a request's `Prefer` header asks of `/v1/run`. */
export interface Preference {
  readonly async: boolean
  /** `wait=N`: how long to answer in the request before answering 202 (0 when not given). */
  readonly wait: Duration.Duration
}

/**
 * Reads `Prefer` (RFC 7240): a comma list of preferences, each a token, an
 * optional `=value` and `;` parameters, tokens case-insensitive. `respond-async`
 * and `wait=N` (N whole seconds) are understood; anything else, and a malformed
 * `wait`, is ignored, as the RFC says of preferences a server does not follow.
 */
export const preferenceOf = (header: string | undefined, limitMs: number | undefined): Preference => {
  let async = false
  let waitSeconds = 0
  for (const part of (header ?? "").slice(0, 1_024).split(",")) {
    const [token = "", value] = (part.split(";")[0] ?? "").split("=").map((p) => p.trim())
    const name = token.toLowerCase()
    if (name === "respond-async" && value === undefined) async = true
    if (name === "wait" && value !== undefined && /^\d{1,9}$/.test(value.replace(/^"(.*)"$/, "$1"))) {
      waitSeconds = Number(value.replace(/^"(.*)"$/, "$1"))
    }
  }
  const capMs = Math.min(maxWaitSeconds * 1_000, limitMs ?? Infinity)
  return { async, wait: Duration.millis(Math.min(waitSeconds * 1_000, capMs)) }
}

const decodeResponse = Schema.decodeUnknown(SystemResponse)

/** The links of an accepted run. */
const linksOf = (runId: string) => {
  const self = `/v1/runs/${encodeURIComponent(runId)}`
  return { self, events: `${self}/events`, cancel: `${self}/cancel` }
}

/**
 * The handler of `/v1/run`, built once per server (it keeps the ids of the
 * requests running); an async run takes one of `places` until it ends.
 */
export const make = (settings: Settings, places: Admission.Places = Admission.runPlaces(settings)) =>
  Effect.gen(function* () {
    const system = yield* PaganticSystem
    const store = yield* Effect.serviceOption(ConversationStore)
    const owners = yield* Owners.RequestOwners
    const newRequestId = yield* Lifetime.newRequestIds
    // never from the IdGenerator: a session id is a capability, it must not be guessable
    const newSessionId = Effect.sync(() => `session_${globalThis.crypto.randomUUID()}`)
    const inFlight = Lifetime.makeInFlight()
    const runs = yield* Effect.serviceOption(Runs)
    const requestRuns = yield* Effect.serviceOption(RequestRuns)
    const durable = Option.isSome(runs) && Option.isSome(requestRuns)
      ? Option.some({ runs: runs.value, definition: requestRuns.value.definition })
      : Option.none()

    /**
     * Starts the envelope as a durable run; its request id and its place stay
     * taken until the run ends (in a fiber of its own: the client may go away,
     * the run goes on).
     */
    const startRun = (
      service: Runs["Type"],
      definition: RequestRuns["Type"]["definition"],
      requestId: string,
      envelope: unknown,
      release: Effect.Effect<void>
    ): Effect.Effect<string, RunsError> =>
      Effect.gen(function* () {
        const started = yield* Deferred.make<string, RunsError>()
        const hold = Effect.gen(function* () {
          const runId = yield* service.start(definition, envelope, { owner: ownerOf(yield* CurrentPrincipal) })
          yield* Deferred.succeed(started, runId)
          yield* service.await(runId)
        }).pipe(Effect.catchAll((error) => Deferred.fail(started, error)), Effect.ignore)
        yield* Effect.forkDaemon(Effect.ensuring(inFlight.claim(requestId, hold), release))
        return yield* Deferred.await(started)
      })

    /** A run that ended within the wait, answered as the request would have been. */
    const answerOf = (info: RunInfo, requestId: string) =>
      Effect.gen(function* () {
        yield* HttpApp.appendPreResponseHandler((_, reply) =>
          Effect.succeed(HttpServerResponse.setHeader(reply, "x-run-id", Refusals.requestIdHeader(info.id)))
        )
        if (info.status === "completed") {
          const decoded = yield* Effect.either(decodeResponse(info.result))
          if (Either.isRight(decoded)) return decoded.right
        }
        const error = toSystemError(
          info.error ??
            OrchestrationFailure.defect(`run ${info.id} ended ${info.status} without a response this server reads`, {
              details: { runId: info.id }
            })
        )
        return yield* refuse(error, requestId, statusOfError(error))
      })

    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const generated = yield* newRequestId
        const raw = yield* Edge.readRunBody(request, settings, Guard.checkRun, "a SystemRequest", generated)
        const badId = checkId(raw, "requestId") ?? checkId(raw, "sessionId") ?? checkId(raw, "traceId")
        if (badId !== undefined) return yield* refuse(Refusals.fromProblem(badId), generated)
        const requestId = typeof raw.requestId === "string" ? raw.requestId : generated
        const principal = yield* CurrentPrincipal
        // another principal's id and a running one are refused alike: an id tells nobody whose it is
        if (!(yield* owners.claim(requestId, principal)) || inFlight.has(requestId)) {
          return yield* refuse(
            Refusals.invalidRequest(`requestId: this id is in use; ids must be unique`, { field: "requestId" }),
            generated,
            409
          )
        }
        // Sessions are their principal's: the server issues their ids (unguessable),
        // keeps them under the principal's name, and a client continues only a
        // session of its own (another's is not found, like one that never was).
        let sessionKey = typeof raw.sessionId === "string" ? Owners.sessionKey(principal, raw.sessionId) : undefined
        if (raw.mode === "chat") {
          if (sessionKey !== undefined) {
            const known = Option.isSome(store) && (yield* store.value.load(sessionKey)).length > 0
            if (!known) {
              return yield* refuse(
                Refusals.invalidRequest(
                  "sessionId: no such session; omit sessionId to start one (the server issues its id)",
                  { field: "sessionId" }
                ),
                requestId,
                404
              )
            }
          } else {
            sessionKey = Owners.sessionKey(principal, yield* newSessionId)
          }
        }
        const traceId = traceIdOf(request.headers["traceparent"])
        const preference = preferenceOf(request.headers["prefer"], settings.limitMs)
        const envelope = {
          ...raw,
          requestId,
          ...(sessionKey === undefined ? {} : { sessionId: sessionKey }),
          ...(raw.traceId === undefined && traceId !== undefined ? { traceId } : {})
        }
        if (preference.async && Option.isSome(durable)) {
          const hints = withTimeout(raw.hints, settings.asyncLimitMs)
          const runEnvelope = hints === undefined ? envelope : { ...envelope, hints }
          const timeoutMs = timeoutOf(hints)
          // checked before anything starts (decoded, then the facade's INIT checks): a bad request starts no run
          const refused = yield* system.check(runEnvelope)
          if (refused !== undefined) return yield* refuse(refused, requestId, statusOfError(refused))
          const { definition, runs: service } = durable.value
          const place = yield* places.take((yield* CurrentPrincipal).name)
          if (Either.isLeft(place)) return yield* Admission.refuse(place.left, requestId)
          const startedAt = yield* Clock.currentTimeMillis
          const runId = yield* startRun(service, definition, requestId, runEnvelope, place.right).pipe(
            Effect.catchAll((error) => refuse(toSystemError(error), requestId))
          )
          if (Duration.toMillis(preference.wait) > 0) {
            const ended = yield* Effect.timeoutOption(service.await(runId), preference.wait).pipe(
              Effect.catchAll(() => Effect.succeed(Option.none<RunInfo>()))
            )
            if (Option.isSome(ended)) return yield* answerOf(ended.value, requestId)
          }
          const info = yield* Effect.option(service.poll(runId))
          const links = linksOf(runId)
          const body: RunAccepted = {
            runId,
            requestId,
            status: Option.isSome(info) ? info.value.status : "running",
            links,
            ...(timeoutMs === undefined ? {} : { timeoutMs, deadline: new Date(startedAt + timeoutMs).toISOString() })
          }
          return HttpServerResponse.unsafeJson(body, {
            status: 202,
            headers: {
              location: links.self,
              "preference-applied": "respond-async",
              "x-request-id": Refusals.requestIdHeader(requestId)
            }
          })
        }
        const response = yield* inFlight.claim(
          requestId,
          Lifetime.runTied(
            system,
            requestId,
            system.runUnknown({ ...envelope, hints: withTimeout(raw.hints, settings.limitMs) }, { owner: ownerOf(yield* CurrentPrincipal) }),
            settings.backstop
          )
        )
        const answer = response.sessionId === undefined
          ? response
          : new SystemResponse({ ...response, sessionId: Owners.sessionIdOf(principal, response.sessionId) }, true)
        if (answer.error !== undefined) return yield* refuse(answer.error, requestId, statusOfError(answer.error), answer)
        return answer
      })
  })
