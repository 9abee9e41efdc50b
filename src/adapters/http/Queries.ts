/**
 * `POST /v1/queries`: an `infer.query.v1` query in, its committed answer out.
 *
 * The body is the query itself plus two transport fields: `async` (true: answer
 * 202 with the run id as soon as the run is started) and `requestId`. The handler
 * reads the body (bounded in bytes), bounds it (`Guard`: depth, sizes, the inline
 * answer schema), wraps the query in a SystemRequest of mode query with the
 * server's time limit, and hands it to `PaganticSystem`, which checks the query
 * (each wrong field named; a CEL problem with its position) and runs it.
 *
 *   200  the KNOW, in the SystemResponse's `query` (answer, confidence, pattern,
 *        calls; the run id when queries are durable runs)
 *   202  the run is started, not finished: asked with `"async": true`, or the
 *        query asks a human (its answer may take days). Follow it through the
 *        runs endpoints with `query.runId`.
 *   4xx/5xx  the SystemResponse with its `error`, as `/v1/run` refuses.
 *
 * Every answer carries the request id in `x-request-id`. A durable run the query
 * starts is owned by the caller (its principal's name).
 *
 * A query waits for its answer within the server's request limit: past it the
 * request ends CANCELLED_TIMEOUT and its run is cancelled. A client that hangs up
 * cancels it the same way. Longer queries are asked with `async`.
 *
 * On a server whose queries are durable runs (it has `Runs`), each query takes a
 * place among the durable runs in flight (`Admission`) until its run ends (for a
 * 202, after the answer): past the limit it is 429 with `Retry-After` and no run
 * starts; a query the server would refuse anyway is refused for what it is.
 */
import * as HttpApp from "@effect/platform/HttpApp"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SystemResponse } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import { PaganticSystem } from "../../programs/Facade.js"
import { Runs } from "../../services/Runs.js"
import * as Admission from "./Admission.js"
import type { Settings } from "./Config.js"
import * as Edge from "./Edge.js"
import * as Refusals from "./Refusals.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import * as Owners from "./Owners.js"
import { CurrentPrincipal } from "./Principal.js"
import { ownerOf } from "./Runs.js"
import { statusOfError, traceIdOf } from "./Status.js"

/** The longest request id a client may send. */
const maxIdLength = 128

const describe = (value: unknown): string => Text.excerpt(JSON.stringify(value) ?? String(value), 40)

/** The transport fields, taken off the query. */
const transport = (raw: Record<string, unknown>): Either.Either<
  { readonly async: boolean; readonly requestId: string | undefined; readonly query: Record<string, unknown> },
  Guard.Problem
> => {
  const { async, requestId, ...query } = raw
  if (async !== undefined && typeof async !== "boolean") {
    return Either.left({ field: "async", message: `expected true or false, got ${describe(async)}` })
  }
  if (requestId !== undefined && !(typeof requestId === "string" && requestId.length > 0 && requestId.length <= maxIdLength)) {
    return Either.left({ field: "requestId", message: `expected a string of 1 to ${maxIdLength} characters` })
  }
  return Either.right({ async: async === true, requestId, query })
}

const encode = Schema.encodeSync(SystemResponse)

const refuse = Refusals.refuseRun

/**
 * The handler of `/v1/queries`, built once per server (it keeps the ids of the
 * requests running); with durable runs, a query takes one of `places` until its run ends.
 */
export const make = (settings: Settings, places: Admission.Places = Admission.runPlaces(settings)) =>
  Effect.gen(function* () {
    const system = yield* PaganticSystem
    const newRequestId = yield* Lifetime.newRequestIds
    const inFlight = Lifetime.makeInFlight()
    const runs = yield* Effect.serviceOption(Runs)
    const owners = yield* Owners.RequestOwners

    /** A place for the request's run, held until `ended`; undefined when queries are not durable runs here. */
    const placeFor = (envelope: unknown, requestId: string) =>
      Effect.gen(function* () {
        if (Option.isNone(runs)) return undefined
        const place = yield* places.take((yield* CurrentPrincipal).name)
        if (Either.isRight(place)) return place.right
        const refused = yield* system.check(envelope)
        if (refused !== undefined) return yield* refuse(refused, requestId, statusOfError(refused))
        return yield* Admission.refuse(place.left, requestId)
      })

    /** Frees `release` once the run the response names ends (a run still going: in a fiber of its own). */
    const releaseAfter = (response: SystemResponse, release: Effect.Effect<void>) => {
      const runId = response.query?.runId
      return Option.isNone(runs) || runId === undefined || response.query?.status === "completed"
        ? release
        : Effect.asVoid(Effect.forkDaemon(Effect.ensuring(Effect.ignore(runs.value.await(runId)), release)))
    }

    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const generated = yield* newRequestId
        const raw = yield* Edge.readRunBody(request, settings, Guard.checkQuery, "an infer.query.v1 query", generated)
        const fields = transport(raw)
        if (Either.isLeft(fields)) return yield* refuse(Refusals.fromProblem(fields.left), generated)
        const requestId = fields.right.requestId ?? generated
        // another principal's id and a running one are refused alike: an id tells nobody whose it is
        if (!(yield* owners.claim(requestId, yield* CurrentPrincipal)) || inFlight.has(requestId)) {
          return yield* refuse(
            Refusals.invalidRequest(`requestId: this id is in use; ids must be unique`, { field: "requestId" }),
            generated,
            409
          )
        }
        const traceId = traceIdOf(request.headers["traceparent"])
        const envelope = {
          mode: "query",
          messages: [],
          requestId,
          ...(traceId === undefined ? {} : { traceId }),
          ...(settings.limitMs === undefined ? {} : { hints: { timeout: settings.limitMs } }),
          query: fields.right.query
        }
        yield* HttpApp.appendPreResponseHandler((_, reply) =>
          Effect.succeed(HttpServerResponse.setHeader(reply, "x-request-id", Refusals.requestIdHeader(requestId)))
        )
        const release = (yield* placeFor(envelope, requestId)) ?? Effect.void
        const response = yield* inFlight.claim(
          requestId,
          Lifetime.runTied(
            system,
            requestId,
            system.runUnknown(envelope, { detach: fields.right.async, owner: ownerOf(yield* CurrentPrincipal) }),
            settings.backstop
          )
        ).pipe(Effect.onExit((exit) => Exit.isSuccess(exit) ? releaseAfter(exit.value, release) : release))
        if (response.error !== undefined) return yield* refuse(response.error, requestId, statusOfError(response.error), response)
        if (response.query !== undefined && response.query.status !== "completed") {
          return HttpServerResponse.unsafeJson(encode(response), { status: 202 })
        }
        return response
      })
  })
