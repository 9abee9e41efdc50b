/**
 * The durable runs over HTTP, for the `Runs` the server was given:
 *
 *   GET  /v1/runs?status=&limit=        the caller's runs, newest first
 *   GET  /v1/runs/{id}                  one run (status, the slot it waits on, result or error)
 *   GET  /v1/runs/{id}/events           its thread as server-sent events, until the run ends
 *   POST /v1/runs/{id}/cancel           cancel it (CANCELLED_SIGNAL)
 *   POST /v1/runs/{id}/slots/{slot}     answer a human slot: `{ secret?, response }`
 *
 * Who may do what (the caller is `CurrentPrincipal`, set by the edge): a run is
 * its owner's, the principal that started it; the list holds only the caller's
 * runs, and a run another principal started is 404 on show, events and cancel,
 * with the body of a run that does not exist. An admin sees and acts on every
 * run. A slot is answered by the responder it was asked of, with that
 * responder's own key (no secret needed), by whoever holds the slot's secret (the
 * link a webhook or notification carried), or by an admin as the operator;
 * anyone else gets one 404 whether or not the run and the slot exist.
 *
 * A slot's response is `{ kind: "submit", answer }`, `{ kind: "accept",
 * etaSeconds }` or `{ kind: "decline", reason }`. An answer that does not match
 * the slot's shape (a label the query does not list, a wrong kind) is 422
 * naming the field of the body (`response.answer.category`) and the slot stays
 * open; a slot that is closed (answered, expired, declined, cancelled) is 422
 * ORCHESTRATION_SLOT_CLOSED, like every other request the server cannot serve as
 * asked. Who answered and did not own the run gets its status back, not its
 * result. Ids and keys are bounded (1 to 100 printable characters; the router
 * answers a longer one 404); bodies go through the edge's reader and guard
 * before anything is decoded. A server without `Runs` answers 404 on these
 * routes, saying so.
 *
 * The events are `message` events whose data is a thread record (`id` is its
 * seq, so a client that reconnects with `Last-Event-ID` gets only the records
 * after it), then one `end` event with the run as it ended. A client that hangs
 * up stops its stream.
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Json from "../../domain/Json.js"
import { SystemError, toSystemError } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import { DeclineReason } from "../../services/Durable.js"
import type { Answerer, RunInfo, RunsError, Service as RunsService } from "../../services/Runs.js"
import { Runs, RunStatus, ThreadRecord } from "../../services/Runs.js"
import type { RefusalStatus, RunFailure, RunView } from "./Api.js"
import * as Admission from "./Admission.js"
import * as Body from "./Body.js"
import type { Settings } from "./Config.js"
import * as Refusals from "./Refusals.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import type { Principal } from "./Principal.js"
import { CurrentPrincipal, owns } from "./Principal.js"
import { statusOfError } from "./Status.js"

/** The longest run id or slot key accepted in a path (the router matches no longer parameter: a 404). */
export const maxIdLength = 100

/** The most runs one list returns. */
export const maxListLimit = 1_000

const printable = /^[\x21-\x7e]+$/

const quote = (value: string) => JSON.stringify(Text.excerpt(value, 60))

/** A run id, slot key or responder id from the path: 1 to `maxIdLength` printable ASCII characters. */
export const checkKey = (value: string, field: string): Guard.Problem | undefined =>
  value.length === 0 || value.length > maxIdLength || !printable.test(value)
    ? { field, message: `expected 1 to ${maxIdLength} printable characters without spaces, got ${quote(value)}` }
    : undefined

/** The owner a run started by `principal` records: its name (the principal of no edge owns nothing). */
export const ownerOf = (principal: Principal): string | undefined => (principal.name === "" ? undefined : principal.name)

/** A run as the endpoints send it. */
export const viewOf = (info: RunInfo): RunView => ({
  id: info.id,
  definition: info.definition,
  status: info.status,
  ...(info.waitingOn === undefined ? {} : { waitingOn: info.waitingOn }),
  ...(info.result === undefined ? {} : { result: info.result }),
  ...(info.error === undefined ? {} : { error: Refusals.forClient(toSystemError(info.error)) }),
  createdAt: DateTime.formatIso(info.createdAt),
  updatedAt: DateTime.formatIso(info.updatedAt)
})

/** A run as one who answered its slot but does not own it sees it: where it stands, not what it found. */
const summaryOf = (info: RunInfo): RunView => ({
  id: info.id,
  definition: info.definition,
  status: info.status,
  ...(info.waitingOn === undefined ? {} : { waitingOn: info.waitingOn }),
  createdAt: DateTime.formatIso(info.createdAt),
  updatedAt: DateTime.formatIso(info.updatedAt)
})

/** What the list of `principal` holds: every run for an admin, its own for anyone else (nothing for a principal without a name). */
const listedFor = (principal: Principal): { readonly owner?: string } | undefined =>
  principal.role === "admin" ? {} : ownerOf(principal) === undefined ? undefined : { owner: principal.name }

/**
 * Who `principal` answers a slot as, in the order tried: an admin as the
 * operator; anyone else with the secret it sent, then as the responder it is.
 */
export const answerersOf = (principal: Principal, secret: string | undefined): ReadonlyArray<Answerer> =>
  principal.role === "admin"
    ? [{ operator: true }]
    : [
      ...(secret === undefined ? [] : [secret]),
      ...(principal.role === "responder" && principal.responder !== undefined && principal.responder !== ""
        ? [{ responder: principal.responder }]
        : [])
    ]

/**
 * The one refusal of a slot the caller may not answer: the same status and body
 * for a run that does not exist, a slot that does not, and a slot asked of
 * someone else.
 */
const slotUnknown = (id: string, slot: string): SystemError =>
  new SystemError({
    code: "ORCHESTRATION_SLOT_FORBIDDEN",
    category: "OrchestrationFailure",
    retryable: false,
    message: `slot: run ${quote(id)} has no slot ${quote(slot)} that this caller may answer`,
    details: { field: "slot" }
  })

/**
 * A response the slot refuses as sent: the service names the field in the
 * response (`answer.category`, `etaSeconds`); the client sent it under `response`.
 */
const inBody = (error: SystemError): SystemError => {
  const field = error.details.field
  if (typeof field !== "string") return error
  const message = error.message.startsWith(`${field}: `) ? error.message.slice(field.length + 2) : error.message
  return new SystemError({
    ...error,
    message: `response.${field}: ${message}`,
    details: { ...error.details, field: `response.${field}` }
  }, true)
}

const encodeRecord = Schema.encodeSync(ThreadRecord)

const sseEvent = (event: string, data: unknown, id?: string) =>
  Sse.encoder.write({ _tag: "Event", event, id, data: JSON.stringify(data) })

/** What the list's query string asks: a status and a limit, each at most once. */
const listQuery = (url: string): Either.Either<{ readonly status?: RunStatus; readonly limit?: number }, Guard.Problem> => {
  const params = new URL(url, "http://localhost").searchParams
  const statuses = params.getAll("status")
  const limits = params.getAll("limit")
  if (statuses.length > 1) return Either.left({ field: "status", message: "give status at most once" })
  if (limits.length > 1) return Either.left({ field: "limit", message: "give limit at most once" })
  const status = statuses[0]
  if (status !== undefined && !(RunStatus.literals as ReadonlyArray<string>).includes(status)) {
    return Either.left({ field: "status", message: `expected one of ${RunStatus.literals.join(", ")}, got ${quote(status)}` })
  }
  const limitText = limits[0]
  const limit = limitText === undefined ? undefined : Number(limitText)
  if (limit !== undefined && !(/^\d+$/.test(limitText!) && limit >= 1 && limit <= maxListLimit)) {
    return Either.left({ field: "limit", message: `expected a whole number from 1 to ${maxListLimit}, got ${quote(limitText!)}` })
  }
  return Either.right({
    ...(status === undefined ? {} : { status: status as RunStatus }),
    ...(limit === undefined ? {} : { limit })
  })
}

/** A slot's response as the body gives it, checked field by field. */
type Response =
  | { readonly kind: "submit"; readonly answer: unknown }
  | { readonly kind: "accept"; readonly etaSeconds: number }
  | { readonly kind: "decline"; readonly reason: DeclineReason }

const maxEtaSeconds = 366 * 24 * 3600

const slotResponse = (
  body: unknown
): Either.Either<{ readonly secret: string | undefined; readonly response: Response }, Guard.Problem> => {
  if (!Json.isObject(body)) {
    return Either.left({ field: "the body", message: "expected a JSON object { secret?, response: { kind, ... } }" })
  }
  const { response, secret } = body
  if (secret !== undefined && (typeof secret !== "string" || secret.length === 0 || secret.length > 512)) {
    return Either.left({
      field: "secret",
      message: "expected the slot's secret, a string of 1 to 512 characters (or none: a responder answers with its own key)"
    })
  }
  if (!Json.isObject(response)) {
    return Either.left({ field: "response", message: `expected an object { kind: "submit" | "accept" | "decline", ... }` })
  }
  switch (response.kind) {
    case "submit":
      return "answer" in response
        ? Either.right({ secret, response: { kind: "submit", answer: response.answer } })
        : Either.left({ field: "response.answer", message: "a submit carries its answer" })
    case "accept": {
      const eta = response.etaSeconds
      return typeof eta === "number" && Number.isFinite(eta) && eta >= 0 && eta <= maxEtaSeconds
        ? Either.right({ secret, response: { kind: "accept", etaSeconds: eta } })
        : Either.left({
          field: "response.etaSeconds",
          message: `expected a number of seconds from 0 to ${maxEtaSeconds}, got ${Text.excerpt(JSON.stringify(eta) ?? "nothing", 40)}`
        })
    }
    case "decline": {
      const reason = response.reason
      return typeof reason === "string" && (DeclineReason.literals as ReadonlyArray<string>).includes(reason)
        ? Either.right({ secret, response: { kind: "decline", reason: reason as DeclineReason } })
        : Either.left({
          field: "response.reason",
          message: `expected one of ${DeclineReason.literals.join(", ")}, got ${Text.excerpt(JSON.stringify(reason) ?? "nothing", 40)}`
        })
    }
    default:
      return Either.left({
        field: "response.kind",
        message: `expected "submit", "accept" or "decline", got ${Text.excerpt(JSON.stringify(response.kind) ?? "nothing", 40)}`
      })
  }
}

/** The handlers of the runs endpoints, built once per server. */
export const make = (settings: Settings, places: Admission.Places = Admission.runPlaces(settings)) =>
  Effect.gen(function* () {
    const runs = yield* Effect.serviceOption(Runs)
    const newRequestId = yield* Lifetime.newRequestIds

    /**
     * Runs `handle` with the Runs service and a request id; a server without Runs
     * answers 404. A failure of the Runs API is refused with its code's status, or
     * `status` when given (a run the server cannot serve as asked).
     */
    const withRuns = <A>(
      handle: (runs: RunsService, refuse: (error: SystemError, status?: RefusalStatus) => Effect.Effect<never, RunFailure>, requestId: string) => Effect.Effect<A, RunFailure>
    ) =>
      Effect.gen(function* () {
        const requestId = yield* newRequestId
        const refuse = (error: SystemError, status?: RefusalStatus) => Refusals.refuseRun(error, requestId, status)
        if (Option.isNone(runs)) {
          return yield* refuse(
            Refusals.invalidRequest(
              "this server keeps no durable runs (start it with --state or PAGANTIC_STATE, or provide Runs to its HTTP layer)",
              { field: "path" }
            ),
            404
          )
        }
        return yield* handle(runs.value, refuse, requestId)
      })

    /**
     * The run `id` as recorded, if the caller owns it; an id that is malformed is
     * 400, an unknown one and one another principal started 404 alike.
     */
    const known = (
      service: RunsService,
      refuse: (error: SystemError, status?: RefusalStatus) => Effect.Effect<never, RunFailure>,
      id: string
    ) =>
      Effect.gen(function* () {
        const bad = checkKey(id, "id")
        if (bad !== undefined) return yield* refuse(Refusals.fromProblem(bad))
        const unknown = refuse(Refusals.invalidRequest(`id: no run has the id ${quote(id)}`, { field: "id" }), 404)
        const info = yield* service.poll(id).pipe(
          Effect.catchAll((error) => error.code === "CONFIG_INVALID_REQUEST" ? unknown : refuse(toSystemError(error)))
        )
        return owns(yield* CurrentPrincipal, info.owner) ? info : yield* unknown
      })

    /** A failure of the Runs API on a run that exists: a request it cannot serve as sent is 422. */
    const refuseRunsError = (refuse: (error: SystemError, status?: RefusalStatus) => Effect.Effect<never, RunFailure>) =>
    (error: RunsError) => {
      const systemError = toSystemError(error)
      return refuse(systemError, error.code === "CONFIG_INVALID_REQUEST" ? 422 : statusOfError(systemError))
    }

    const list = (request: HttpServerRequest.HttpServerRequest) =>
      withRuns((service, refuse) =>
        Effect.gen(function* () {
          const query = listQuery(request.url)
          if (Either.isLeft(query)) return yield* refuse(Refusals.fromProblem(query.left))
          const whose = listedFor(yield* CurrentPrincipal)
          if (whose === undefined) return { runs: [] }
          const infos = yield* service.list({ ...query.right, ...whose }).pipe(
            Effect.catchAll((error) => refuse(toSystemError(error)))
          )
          return { runs: infos.map(viewOf) }
        })
      )

    /**
     * `POST /v1/runs`: a run of an offered definition, its input checked by the
     * definition's payload Schema (every problem named by its field under `input`),
     * the caller's, holding a place among the runs in flight until it ends.
     */
    const start = (request: HttpServerRequest.HttpServerRequest) =>
      withRuns((service, refuse) =>
        Effect.gen(function* () {
          const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
          if (Either.isLeft(body)) return yield* refuse(Refusals.invalidRequest(body.left.message), body.left.status)
          const shaped = Guard.checkShape(body.right, settings.limits)
          if (Either.isLeft(shaped)) return yield* refuse(Refusals.fromProblem(shaped.left))
          const wire = body.right
          const offered = settings.definitions.map((d) => quote(d.name)).join(", ")
          if (!Json.isObject(wire) || typeof wire["definition"] !== "string") {
            return yield* refuse(Refusals.fromProblem({
              field: Json.isObject(wire) ? "definition" : "the body",
              message: `expected { definition, input } with definition one of ${offered === "" ? "(none offered)" : offered}`
            }))
          }
          const name = wire["definition"]
          const definition = settings.definitions.find((d) => d.name === name)
          if (definition === undefined) {
            return yield* refuse(
              Refusals.invalidRequest(
                `definition: no definition ${quote(name)} is offered here (${offered === "" ? "none is" : `offered: ${offered}`})`,
                { field: "definition" }
              ),
              404
            )
          }
          const input = yield* Effect.either(Schema.decodeUnknown(definition.payload, { errors: "all" })(wire["input"]))
          if (Either.isLeft(input)) {
            const issues = ParseResult.ArrayFormatter.formatErrorSync(input.left).slice(0, 8)
            const fields = issues.map((issue) => ["input", ...issue.path.map(String)].join("."))
            return yield* refuse(Refusals.invalidRequest(
              issues.map((issue, i) => `${fields[i]}: ${Text.excerpt(issue.message, 200)}`).join("; "),
              { field: fields[0] ?? "input", fields }
            ))
          }
          const principal = yield* CurrentPrincipal
          const place = yield* places.take(principal.name)
          if (Either.isLeft(place)) return yield* Admission.refuse(place.left, yield* newRequestId)
          const id = yield* service.start(definition, input.right, { owner: ownerOf(principal) }).pipe(
            Effect.tapError(() => place.right),
            Effect.catchAll(refuseRunsError(refuse))
          )
          // the place is the run's until it ends
          yield* Effect.forkDaemon(Effect.ensuring(Effect.ignore(service.await(id)), place.right))
          return viewOf(yield* service.poll(id).pipe(Effect.catchAll(refuseRunsError(refuse))))
        })
      )

    const show = (id: string) => withRuns((service, refuse) => Effect.map(known(service, refuse, id), viewOf))

    const events = (request: HttpServerRequest.HttpServerRequest, id: string) =>
      withRuns((service, refuse, requestId) =>
        Effect.gen(function* () {
          yield* known(service, refuse, id)
          const lastHeader = request.headers["last-event-id"]
          const after = lastHeader !== undefined && /^\d{1,15}$/.test(lastHeader) ? Number(lastHeader) : 0
          const records = service.events(id).pipe(
            Stream.filter((record) => record.seq > after),
            Stream.map((record) => sseEvent("message", encodeRecord(record), String(record.seq)))
          )
          const end = Stream.fromEffect(
            Effect.map(service.poll(id), (info) => sseEvent("end", viewOf(info)))
          )
          const body = Stream.concat(records, end).pipe(
            Stream.catchAll((error) => Stream.succeed(sseEvent("error", { error: Refusals.forClient(toSystemError(error)) }))),
            Stream.encodeText
          )
          return HttpServerResponse.stream(body, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", "x-request-id": Refusals.requestIdHeader(requestId) }
          })
        })
      )

    const cancel = (id: string) =>
      withRuns((service, refuse) =>
        Effect.gen(function* () {
          yield* known(service, refuse, id)
          yield* service.cancel(id).pipe(Effect.catchAll(refuseRunsError(refuse)))
          return viewOf(yield* service.poll(id).pipe(Effect.catchAll(refuseRunsError(refuse))))
        })
      )

    const respond = (request: HttpServerRequest.HttpServerRequest, id: string, slot: string) =>
      withRuns((service, refuse) =>
        Effect.gen(function* () {
          const badSlot = checkKey(slot, "slot")
          if (badSlot !== undefined) return yield* refuse(Refusals.fromProblem(badSlot))
          const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
          if (Either.isLeft(body)) return yield* refuse(Refusals.invalidRequest(body.left.message), body.left.status)
          const checked = Either.flatMap(Guard.checkShape(body.right, settings.limits), () => slotResponse(body.right))
          if (Either.isLeft(checked)) return yield* refuse(Refusals.fromProblem(checked.left))
          const badId = checkKey(id, "id")
          if (badId !== undefined) return yield* refuse(Refusals.fromProblem(badId))
          const principal = yield* CurrentPrincipal
          const { response, secret } = checked.right
          const unknown = refuse(slotUnknown(id, slot), 404)
          const answerers = answerersOf(principal, secret)
          if (answerers.length === 0) return yield* unknown
          const before = yield* service.poll(id).pipe(Effect.either)
          if (Either.isLeft(before)) {
            return yield* (before.left.code === "CONFIG_INVALID_REQUEST" ? unknown : refuse(toSystemError(before.left)))
          }
          const answerAs = (answerer: Answerer) =>
            response.kind === "submit"
              ? service.respond(id, slot, answerer, response.answer)
              : response.kind === "accept"
              ? service.accept(id, slot, answerer, response.etaSeconds)
              : service.decline(id, slot, answerer, response.reason)
          // each answerer the caller may be, in turn: a refused one records nothing
          let outcome: "Accepted" | "Declined" | undefined
          for (const answerer of answerers) {
            const attempt = yield* Effect.either(answerAs(answerer))
            if (Either.isRight(attempt)) {
              outcome = attempt.right
              break
            }
            if (attempt.left.code === "ORCHESTRATION_SLOT_FORBIDDEN") continue
            if (attempt.left.code === "CONFIG_INVALID_REQUEST") return yield* refuse(inBody(toSystemError(attempt.left)), 422)
            return yield* refuseRunsError(refuse)(attempt.left)
          }
          if (outcome === undefined) return yield* unknown
          const info = yield* service.poll(id).pipe(Effect.catchAll(refuseRunsError(refuse)))
          return { outcome, run: owns(principal, info.owner) ? viewOf(info) : summaryOf(info) }
        })
      )

    return { list, start, show, events, cancel, respond }
  })
