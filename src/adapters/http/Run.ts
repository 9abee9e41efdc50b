/**
 * `POST /v1/run`: a SystemRequest in, the SystemResponse out. The handler reads
 * the body (bounded in bytes), checks what only the transport can (bounds, ids,
 * sessions the server holds), adds what only the transport knows (a request id,
 * the W3C `traceparent` trace id, the server's time limit) and hands the envelope
 * to `PaganticSystem.runUnknown`, which decodes and checks it.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Json from "../../domain/Json.js"
import { PaganticSystem } from "../../programs/Facade.js"
import { ConversationStore } from "../../services/ConversationStore.js"
import type { Settings } from "./Config.js"
import * as Edge from "./Edge.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
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

/** The server's limit as the envelope's timeout hint (ms); a shorter hint from the client wins. */
const withTimeout = (hints: unknown, limitMs: number | undefined): unknown => {
  if (limitMs === undefined) return hints
  if (hints === undefined) return { timeout: limitMs }
  if (!Json.isObject(hints)) return hints
  const t = hints.timeout
  if (t === undefined || t === 0) return { ...hints, timeout: limitMs }
  return typeof t === "number" && t > 0 ? { ...hints, timeout: Math.min(t, limitMs) } : hints
}

const refuse = Edge.refuseRun

/** The handler of `/v1/run`, built once per server (it keeps the ids of the requests running). */
export const make = (settings: Settings) =>
  Effect.gen(function* () {
    const system = yield* PaganticSystem
    const store = yield* Effect.serviceOption(ConversationStore)
    const newRequestId = yield* Lifetime.newRequestIds
    // never from the IdGenerator: a session id is a capability, it must not be guessable
    const newSessionId = Effect.sync(() => `session_${globalThis.crypto.randomUUID()}`)
    const inFlight = Lifetime.makeInFlight()

    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const generated = yield* newRequestId
        const raw = yield* Edge.readRunBody(request, settings, Guard.checkRun, "a SystemRequest", generated)
        const badId = checkId(raw, "requestId") ?? checkId(raw, "sessionId") ?? checkId(raw, "traceId")
        if (badId !== undefined) return yield* refuse(Edge.fromProblem(badId), generated)
        const requestId = typeof raw.requestId === "string" ? raw.requestId : generated
        if (inFlight.has(requestId)) {
          return yield* refuse(
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
              return yield* refuse(
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
          hints: withTimeout(raw.hints, settings.limitMs)
        }
        const response = yield* inFlight.claim(
          requestId,
          Lifetime.runTied(system, requestId, system.runUnknown(envelope), settings.backstop)
        )
        if (response.error !== undefined) return yield* refuse(response.error, requestId, statusOfError(response.error), response)
        return response
      })
  })
