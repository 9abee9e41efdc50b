/**
 * The facade: the one way into the system.
 *
 * Adapters (CLI, HTTP) decode their input into a SystemRequest and call `run`;
 * the facade walks the request through the lifecycle (INIT -> [PLAN] -> PREPARE ->
 * EXECUTE -> [VALIDATE] -> COMPLETE, or ERROR / CANCELLED from anywhere), routes
 * it by mode to a loop, and always answers with a SystemResponse: a failure of the
 * taxonomy becomes its SystemError, a defect is labelled ORCHESTRATION_DEFECT, a
 * timeout ends in CANCELLED_TIMEOUT and a caller's `cancel` in CANCELLED_SIGNAL,
 * each with whatever partial output exists. Every event of the request carries its
 * request id (and session id in chat), and every move of the lifecycle is an event.
 *
 * Services are captured when the facade is made: Engine (absent: every request
 * answers CONFIG_NO_ENGINE), Constraint (required), and when present ToolRegistry,
 * ContextProvider, ConversationStore, SessionState, PromptProvider (the system
 * prompt of a request without one, checked at PREPARE), Planner, EventLog,
 * Metrics, IdGenerator.
 *
 * Its parts live in facade/: the INIT checks (Check), the mode runners (Modes,
 * Chat, Extraction, Plan), the cancellation registry (Cancellations), one
 * request from start to end (Run) and the response (Response).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SystemRequest, toSystemError } from "../domain/System.js"
import type { Constraint } from "../services/Constraint.js"
import * as Cancellations from "./facade/Cancellations.js"
import * as Check from "./facade/Check.js"
import * as Environment from "./facade/Environment.js"
import * as Response from "./facade/Response.js"
import * as Run from "./facade/Run.js"
import type { Facade, Options } from "./facade/Types.js"

export type { Execution, Facade, Options, Progress, RunOptions } from "./facade/Types.js"

/** The facade as a service, for adapters. */
export class PaganticSystem extends Context.Tag("pagantic/System")<PaganticSystem, Facade>() {}

/** How long a cancel that came before its request stays pending, by default. */
const defaultPendingCancelWindow = "5 seconds"

/** Makes a facade over the services in context (see the module header for which it uses). */
export const make = (options: Options = {}): Effect.Effect<Facade, never, Constraint> =>
  Effect.gen(function* () {
    const env = yield* Environment.make(options)
    const cancellations = yield* Cancellations.make({
      pendingWindow: options.pendingCancelWindow ?? defaultPendingCancelWindow
    })
    const execute: Facade["execute"] = (request, runOptions = {}) =>
      Run.execute(env, cancellations, request, runOptions, Run.toExecution)
    // the response alone: no lifecycle state nor moves built for a caller that reads neither
    const run: Facade["run"] = (request, runOptions = {}) => Run.execute(env, cancellations, request, runOptions, Run.toResponse)

    const runUnknown: Facade["runUnknown"] = (input, runOptions = {}) =>
      Effect.flatMap(Effect.either(Schema.decodeUnknown(SystemRequest, { errors: "all" })(input)), (decoded) => {
        if (decoded._tag === "Right") return run(decoded.right, runOptions)
        const raw = typeof input === "object" && input !== null ? (input as Record<string, unknown>) : {}
        return Effect.gen(function* () {
          const generated = yield* env.nextId("req")
          const requestId = typeof raw.requestId === "string" ? raw.requestId : generated
          // the request is over: a cancel that waited for it must not hit a later one reusing the id
          yield* cancellations.finish(requestId)
          return Response.rejected(requestId, decoded.left)
        })
      })

    const check: Facade["check"] = (input) =>
      Effect.flatMap(Effect.either(Schema.decodeUnknown(SystemRequest, { errors: "all" })(input)), (decoded) =>
        decoded._tag === "Left"
          ? Effect.succeed(Response.rejected("", decoded.left).error)
          : Effect.map(Check.check(env, decoded.right), (admission) =>
            admission.checked._tag === "Left" ? toSystemError(admission.checked.left) : undefined))

    return {
      run,
      runUnknown,
      check,
      execute,
      cancel: cancellations.cancel
    } satisfies Facade
  })

/** The facade as a layer. */
export const layer = (options: Options = {}): Layer.Layer<PaganticSystem, never, Constraint> =>
  Layer.effect(PaganticSystem, make(options))
