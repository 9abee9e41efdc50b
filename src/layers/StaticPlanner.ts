/**
 * A Planner from a table: routes are tried in order and the first whose `when`
 * accepts the request builds the plan. No route is ORCHESTRATION_STEP_MISMATCH
 * with `details.rule = "noPlan"`. Every plan is checked (graph and policy) and
 * carries its PlanTrace.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { OrchestrationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import * as Plan from "../domain/Plan.js"
import type { SystemRequest } from "../domain/System.js"
import type { Service } from "../services/Planner.js"
import { Planner } from "../services/Planner.js"

/** The content of the last user message of a request ("" when there is none). */
export const lastUserContent = (request: SystemRequest): string => {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const m = request.messages[i]!
    if (Message.isUser(m)) return m.content
  }
  return ""
}

export interface Route {
  readonly name: string
  /** Whether this route serves the request. */
  readonly when: (request: SystemRequest) => boolean
  /** The steps for the request. */
  readonly steps: (request: SystemRequest) => ReadonlyArray<Plan.Step>
  /** Why these steps; recorded in the trace. Defaults to `route <name>`. */
  readonly rationale?: string
}

export interface Options {
  readonly id?: string
  readonly routes: ReadonlyArray<Route>
  readonly policy?: Plan.PlanPolicy
}

export const make = (options: Options): Service => {
  const id = options.id ?? "static"
  const policy = options.policy ?? Plan.permissive
  return {
    id,
    createPlan: Effect.fn("Planner.static")(function* (request: SystemRequest) {
      const route = options.routes.find((r) => r.when(request))
      if (route === undefined) {
        return yield* OrchestrationFailure.stepMismatch(`planner "${id}" has no plan for this request`, {
          details: { rule: "noPlan", planner: id }
        })
      }
      const plan = new Plan.ExecutionPlan({ steps: route.steps(request) })
      yield* Plan.check(plan, policy)
      return yield* Plan.withTrace(plan, id, route.rationale ?? `route ${route.name}`)
    })
  }
}

export const layer = (options: Options): Layer.Layer<Planner> =>
  Layer.succeed(Planner, Planner.of(make(options)))
