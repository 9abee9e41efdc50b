/**
 * Places for what a server holds at once: durable runs in flight (`/v1/run`
 * asked `respond-async`, `/v1/queries`) and event-stream listeners. A request
 * takes a place before anything starts and keeps it until what it started ends
 * (a run: completed, failed, cancelled or timed out; a listener: its stream
 * closed). Past the server's limit, or past one principal's, it is refused 429
 * ORCHESTRATION_CAPACITY_EXCEEDED with `Retry-After`, the error naming the limit
 * reached (its option, its environment variable, its value), and nothing is
 * started. Places are counted in this process: a run re-driven after a restart
 * holds none.
 */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { OrchestrationFailure } from "../../domain/Failure.js"
import type { SystemError } from "../../domain/System.js"
import { toSystemError } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import type { RunFailure } from "./Api.js"
import * as Refusals from "./Refusals.js"

/** What a refused client is told to wait before it asks again, in seconds. */
export const retryAfterSeconds = 5

/** A limit on places: how many, of what, and where it is set. */
export interface Bound {
  readonly max: number
  /** What the places are for, as a client reads it ("durable runs in flight"). */
  readonly what: string
  /** The option that sets it (`maxRunsInFlight`) and its environment variable. */
  readonly option: string
  readonly variable: string
}

/** The bound a refused request reached, and whose (undefined: the server's). */
export interface Full {
  readonly bound: Bound
  readonly principal?: string | undefined
}

export interface Places {
  /** A place for `principal`: its release (once; again does nothing), or the bound that is full. */
  readonly take: (principal: string) => Effect.Effect<Either.Either<Effect.Effect<void>, Full>>
}

/** Places within `total`, and within `perPrincipal` for each principal when given. */
export const make = (total: Bound, perPrincipal?: Bound | undefined): Places => {
  let taken = 0
  const byPrincipal = new Map<string, number>()
  return {
    take: (principal) =>
      Effect.sync(() => {
        if (taken >= total.max) return Either.left({ bound: total })
        const own = byPrincipal.get(principal) ?? 0
        if (perPrincipal !== undefined && own >= perPrincipal.max) return Either.left({ bound: perPrincipal, principal })
        taken++
        byPrincipal.set(principal, own + 1)
        let released = false
        return Either.right(Effect.sync(() => {
          if (released) return
          released = true
          taken--
          const left = (byPrincipal.get(principal) ?? 1) - 1
          if (left === 0) byPrincipal.delete(principal)
          else byPrincipal.set(principal, left)
        }))
      })
  }
}

/** The refusal of a request that found `full`. */
export const errorOf = (full: Full): SystemError => {
  const { max, option, variable, what } = full.bound
  const whose = full.principal === undefined
    ? "this server has"
    : `the principal ${JSON.stringify(Text.excerpt(full.principal, 60))} has`
  return toSystemError(
    OrchestrationFailure.capacityExceeded(
      `${whose} ${max} ${what}, as many as it takes (${option}, ${variable}): retry once one ends`,
      { details: { limit: option, max, ...(full.principal === undefined ? {} : { principal: Text.excerpt(full.principal, 60) }) } }
    )
  )
}

const retryAfter = { "retry-after": String(retryAfterSeconds) }

/** Refuses a `/v1/run`-shaped request that found `full`: 429 with `Retry-After`. */
export const refuse = (full: Full, requestId: string): Effect.Effect<never, RunFailure> =>
  Effect.zipRight(
    HttpApp.appendPreResponseHandler((_, response) => Effect.succeed(HttpServerResponse.setHeaders(response, retryAfter))),
    Refusals.refuseRun(errorOf(full), requestId, 429)
  )

/** The edge's answer to a request at `path` that found `full` (outside a handler): 429 with `Retry-After`. */
export const response = (path: string, full: Full, requestId: string): HttpServerResponse.HttpServerResponse =>
  Refusals.errorResponse(path, 429, errorOf(full), requestId, retryAfter)

/** The server's places for durable runs in flight, from its settings. */
export const runPlaces = (settings: { readonly maxRunsInFlight: number; readonly maxRunsPerPrincipal: number }): Places =>
  make(
    { max: settings.maxRunsInFlight, what: "durable runs in flight", option: "maxRunsInFlight", variable: "PAGANTIC_MAX_RUNS_IN_FLIGHT" },
    {
      max: settings.maxRunsPerPrincipal,
      what: "durable runs in flight",
      option: "maxRunsPerPrincipal",
      variable: "PAGANTIC_MAX_RUNS_PER_PRINCIPAL"
    }
  )
