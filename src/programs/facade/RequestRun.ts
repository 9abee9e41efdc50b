/**
 * A request as a durable run: a SystemRequest (as its wire JSON) answered by the
 * facade in one journaled step, so that a request can outlive the call that asked
 * it (HTTP answers 202 with the run id and the client follows the run).
 *
 * The run's payload is the request's JSON as the client sent it (with what the
 * transport added: its request id, trace id); its result is the SystemResponse.
 * The facade runs inside one step: a crash while it runs re-runs the request at
 * most once more on restart; a request whose response is recorded is never run
 * again. A response that carries an error ends the run failed with that error
 * (its code, category, message and details), after the response is recorded.
 * Cancelling the run (`Runs.cancel`) interrupts the request: it ends cancelled,
 * CANCELLED_SIGNAL.
 *
 * The facade runs on the Runs layer (a query is a run too), and the Runs layer
 * runs this definition, so the facade is bound late: `make` gives the definition
 * to register with the Runs layer and a layer that binds the facade in context to
 * it. A run re-driven at start waits for that layer to be built.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type { Failure } from "../../domain/Failure.js"
import { Failure as FailureSchema, OrchestrationFailure } from "../../domain/Failure.js"
import type { SystemError } from "../../domain/System.js"
import { SystemResponse } from "../../domain/System.js"
import { Durable } from "../../services/Durable.js"
import * as Runs from "../../services/Runs.js"
import { PaganticSystem } from "../Facade.js"
import type { Facade } from "./Types.js"

/** The definition's name, recorded with each run. */
export const name = "pagantic.request"

/** The run definition of requests: the request's JSON in, the SystemResponse out. */
export type RequestDefinition = Runs.Definition<unknown, unknown, SystemResponse, typeof SystemResponse.Encoded, never>

/** The request runs a server offers: the definition its Runs layer registered. */
export interface Service {
  readonly definition: RequestDefinition
}

/** Requests as durable runs; present when the Runs layer in context registered the definition and a facade is bound to it. */
export class RequestRuns extends Context.Tag("pagantic/RequestRuns")<RequestRuns, Service>() {}

/** A definition waiting for its facade. */
export interface Unbound {
  /** To register with the Runs layer. */
  readonly definition: RequestDefinition
  /** Binds the facade in context to the definition's runs, and provides `RequestRuns`. */
  readonly layer: Layer.Layer<RequestRuns, never, PaganticSystem>
  /**
   * Binds a facade that `facade` builds when a run first asks for it, once: a
   * process that opens the runs but answers no request never builds one.
   */
  readonly bindLazily: (facade: Effect.Effect<Facade>) => Effect.Effect<void>
}

/**
 * The failure a response's error stands for: the category's class with its code,
 * retryability, message and details (a tool's name, a constraint's raw text and
 * violations, a validation's failed rules come back from the details).
 */
export const failureOf = (error: SystemError): Failure => {
  const details = error.details
  const decoded = Schema.decodeUnknownEither(FailureSchema)({
    _tag: error.category,
    code: error.code,
    retryable: error.retryable,
    message: error.message,
    details,
    ...(error.category === "ToolFailure"
      ? {
        tool: typeof details.tool === "string" ? details.tool : "unknown",
        ...(typeof details.toolCallId === "string" ? { toolCallId: details.toolCallId } : {})
      }
      : {}),
    ...(error.category === "ConstraintFailure"
      ? {
        ...(typeof details.raw === "string" ? { raw: details.raw } : {}),
        ...(Array.isArray(details.violations) ? { violations: details.violations } : {})
      }
      : {}),
    ...(error.category === "ValidationFailure" && Array.isArray(details.failedRules) ? { failedRules: details.failedRules } : {})
  })
  return Either.getOrElse(decoded, () =>
    OrchestrationFailure.defect(`a response's error does not read as a failure: ${error.code}: ${error.message}`, {
      details: { code: error.code }
    }))
}

/** The program of one request run. */
const program = (system: Deferred.Deferred<Facade>) => (payload: unknown) =>
  Effect.gen(function* () {
    const durable = yield* Durable
    const facade = yield* Deferred.await(system)
    const response = yield* durable.step("request", SystemResponse, facade.runUnknown(payload))
    if (response.error !== undefined) return yield* Effect.fail(failureOf(response.error))
    return response
  })

/** The request definition and the layer that binds a facade to it. */
export const make: Effect.Effect<Unbound> = Effect.map(Deferred.make<Facade>(), (system) => {
  const definition: RequestDefinition = Runs.define<unknown, unknown, SystemResponse, typeof SystemResponse.Encoded, never>({
    name,
    payload: Schema.Unknown,
    success: SystemResponse,
    program: program(system)
  })
  return {
    definition,
    layer: Layer.effect(
      RequestRuns,
      Effect.flatMap(PaganticSystem, (facade) => Effect.as(Deferred.succeed(system, facade), { definition }))
    ),
    // completed with the cached effect itself: each run awaiting the facade runs it, and it builds once
    bindLazily: (facade) => Effect.flatMap(Effect.cached(facade), (once) => Effect.asVoid(Deferred.completeWith(system, once)))
  }
})
