/**
 * A human responder's inbox over HTTP: the page a responder keeps open listens
 * here for the slots it is asked to answer.
 *
 *   GET /v1/responders/{id}/inbox       server-sent events, until the client goes
 *
 * While a client listens, the responder counts as connected, so the
 * Notifications rule sends their notices here rather than to a push channel or
 * polling. The stream starts with one `open` event (`{ responder, pending }`),
 * then a `slot` event for each notice sent while nobody listened: those left for
 * polling (not yet past their deadline nor, as their run shows, closed; they come
 * again on each connection) and the digest's (taken: they come once); then a `slot`
 * event for each notice as it is sent. A comment line every 15 seconds keeps the
 * connection up. A `slot` event's data is what answering takes: the run and slot,
 * its deadline (ISO 8601), the CALL it answers, the question, the slot's shape
 * name and, for a query, its `answer_shape` (read from the run when the server
 * has it), and the links to the run and to `POST /v1/runs/{id}/slots/{slot}`,
 * where the answer goes. Its `id` is the run id and slot key, for a client to
 * skip a slot it has seen.
 *
 * An inbox is its responder's: only the principal of that responder (role
 * `responder`, its id) and an admin may read it; anyone else gets 404, the same
 * for every id. The event carries no secret: the responder answers with its own
 * key, an admin as the operator. The slot's secret goes only where a link must
 * open the slot without a key (a webhook, a notification), never to a page. A
 * browser's EventSource cannot send an Authorization header; a page reads the
 * stream with fetch.
 *
 * A server without a Notifications service answers 404, saying so; a malformed
 * responder id is 400 (an id longer than the router takes is a 404).
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Json from "../../domain/Json.js"
import * as Text from "../../domain/Text.js"
import type { Notice } from "../../services/Notifications.js"
import { Notifications } from "../../services/Notifications.js"
import { Runs } from "../../services/Runs.js"
import * as Refusals from "./Refusals.js"
import * as Lifetime from "./Lifetime.js"
import { CurrentPrincipal, isResponder } from "./Principal.js"
import { checkKey } from "./Runs.js"

/** How often an idle inbox sends a comment line. */
export const keepAliveEvery = "15 seconds"

/** What a slot takes, read from its run: the slot's shape name and the query's `answer_shape`. */
export interface Shape {
  readonly shape?: string | undefined
  readonly answerShape?: unknown
  /** The slot's status in its run (unknown when the server does not have the run). */
  readonly status?: string | undefined
}

/** A notice as a `slot` event's data. */
export const eventOf = (notice: Notice, shape: Shape = {}) => {
  const run = `/v1/runs/${encodeURIComponent(notice.runId)}`
  return {
    responder: notice.responder,
    runId: notice.runId,
    slot: notice.slot,
    deadline: new Date(notice.deadline).toISOString(),
    call: notice.call,
    input: notice.input,
    maxLatencySecs: notice.maxLatencySecs,
    ...(shape.shape === undefined ? {} : { shape: shape.shape }),
    ...(shape.answerShape === undefined ? {} : { answerShape: shape.answerShape }),
    links: { run, respond: `${run}/slots/${encodeURIComponent(notice.slot)}` }
  }
}

const sseEvent = (event: string, data: unknown, id?: string) =>
  Sse.encoder.write({ _tag: "Event", event, id, data: JSON.stringify(data) })

/** The handler of the inbox, built once per server. */
export const make = Effect.gen(function* () {
  const notifications = yield* Effect.serviceOption(Notifications)
  const runs = yield* Effect.serviceOption(Runs)
  const newRequestId = yield* Lifetime.newRequestIds

  /** The slot's shape, from its run's thread when the server has the run (else nothing more). */
  const shapeOf = (notice: Notice): Effect.Effect<Shape> =>
    Option.isNone(runs) ? Effect.succeed({}) : runs.value.exportThread(notice.runId).pipe(
      Effect.map((thread): Shape => {
        const slot = thread.slots.find((s) => s.key === notice.slot)
        const payload = thread.payload
        return {
          shape: slot?.shape,
          status: slot?.status,
          answerShape: Json.isObject(payload) && Json.isObject(payload.answer_shape) ? payload.answer_shape : undefined
        }
      }),
      Effect.orElseSucceed((): Shape => ({}))
    )

  const slotEvent = (notice: Notice, shape: Shape) => sseEvent("slot", eventOf(notice, shape), `${notice.runId} ${notice.slot}`)

  return (_request: HttpServerRequest.HttpServerRequest, responder: string) =>
    Effect.gen(function* () {
      const requestId = yield* newRequestId
      if (Option.isNone(notifications)) {
        return yield* Refusals.refuseRun(
          Refusals.invalidRequest(
            "this server has no notification channels (provide Notifications, e.g. NotificationChannels.layer, to its HTTP layer)",
            { field: "path" }
          ),
          requestId,
          404
        )
      }
      const bad = checkKey(responder, "id")
      if (bad !== undefined) return yield* Refusals.refuseRun(Refusals.fromProblem(bad), requestId)
      const principal = yield* CurrentPrincipal
      if (!(principal.role === "admin" || isResponder(principal, responder))) {
        return yield* Refusals.refuseRun(
          Refusals.invalidRequest(`id: no inbox ${JSON.stringify(Text.excerpt(responder, 60))} for this caller`, { field: "id" }),
          requestId,
          404
        )
      }
      const service = notifications.value
      // what went out while nobody listened: the notices left for polling (kept) and the digest (taken)
      // (a slot its run shows closed since, answered or expired, is left out)
      const sent = [...(yield* service.pending(responder)), ...(yield* service.takeDigest(responder))]
      const pending = (yield* Effect.forEach(sent, (notice) => Effect.map(shapeOf(notice), (shape) => [notice, shape] as const)))
        .filter(([, shape]) => shape.status === undefined || shape.status === "open")
      const opening = Stream.fromIterable([
        sseEvent("open", { responder, pending: pending.length }),
        ...pending.map(([notice, shape]) => slotEvent(notice, shape))
      ])
      const keepAlive = Stream.repeatEffectWithSchedule(Effect.succeed(": keep-alive\n\n"), Schedule.spaced(keepAliveEvery)).pipe(
        Stream.drop(1)
      )
      // the inbox is consumed (the responder connected) from the moment the merge starts
      const body = Stream.merge(
        Stream.mapEffect(service.inbox(responder), (notice) => Effect.map(shapeOf(notice), (shape) => slotEvent(notice, shape))),
        Stream.concat(opening, keepAlive)
      ).pipe(
        Stream.encodeText
      )
      return HttpServerResponse.stream(body, {
        contentType: "text/event-stream",
        headers: { "cache-control": "no-cache", "x-request-id": Refusals.requestIdHeader(requestId) }
      })
    })
})
