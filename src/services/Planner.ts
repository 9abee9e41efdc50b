/**
 * Planning: from a request to a plan.
 *
 * A Planner creates an ExecutionPlan from a SystemRequest; the PlanExecutor runs
 * it and never creates one. The separation is deliberate: a plan can be authored
 * by hand, looked up in a table (a static planner) or proposed by a model (a
 * model-based planner, constrained to the plan schema and checked against the
 * PlanPolicy). Every plan a planner returns carries its PlanTrace.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { ConstraintFailure, InferenceFailure, OrchestrationFailure } from "../domain/Failure.js"
import type { ExecutionPlan } from "../domain/Plan.js"
import type { SystemRequest } from "../domain/System.js"

/**
 * What planning can fail with: the engine failed (model planner), the model's plan
 * is not valid JSON or not a plan (ConstraintFailure), or no plan fits the request
 * or the policy rejects it (OrchestrationFailure, `details.rule` says which).
 */
export type PlannerFailure = InferenceFailure | ConstraintFailure | OrchestrationFailure

export interface Service {
  /** A stable name for this planner; it becomes `PlanTrace.plannerId`. */
  readonly id: string
  readonly createPlan: (request: SystemRequest) => Effect.Effect<ExecutionPlan, PlannerFailure>
}

/** Creates execution plans. */
export class Planner extends Context.Tag("pagantic/Planner")<Planner, Service>() {}
