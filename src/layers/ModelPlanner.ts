/**
 * A Planner that asks the Engine for a plan constrained to the plan JSON schema
 * (step types limited to the policy's), decodes the reply into a PlanDraft (not
 * JSON: CONSTRAINT_JSON_INVALID; not a plan: CONSTRAINT_SCHEMA_INVALID), retries
 * those on a Schedule, and checks the plan against the dependency rules and the
 * PlanPolicy. Every plan carries its PlanTrace. Its calls follow the request
 * they are made in (`Engine.inRequest`): they carry its hints where the planner
 * sets none, and count in its token usage.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type * as Schedule from "effect/Schedule"
import type { ConstraintFailure } from "../domain/Failure.js"
import { decodeJsonAs } from "../domain/Json.js"
import * as Message from "../domain/Message.js"
import * as Plan from "../domain/Plan.js"
import type { SystemRequest } from "../domain/System.js"
import { Engine, InferenceRequest, inRequest } from "../services/Engine.js"
import type { Service } from "../services/Planner.js"
import { Planner } from "../services/Planner.js"
import * as RetryPolicy from "../services/RetryPolicy.js"

export interface Options {
  readonly id?: string
  /** The policy the plan must satisfy; its allowed step types (or `stepTypes`) go into the schema. */
  readonly policy?: Plan.PlanPolicy
  /** Step types the model may use when the policy does not list them. Default: the built-in ones. */
  readonly stepTypes?: ReadonlyArray<string>
  /** Extra guidance for the model (what each step type does, examples). */
  readonly instructions?: string
  /** How a reply that is not a plan is retried. Default: 2 retries, exponential from 100ms. */
  readonly retry?: Schedule.Schedule<unknown>
  readonly maxTokens?: number
}

/** How a planner retries a reply that is not a plan: 2 retries, exponential from 100 ms. */
export const retryPolicy: Schedule.Schedule<unknown> = RetryPolicy.planner

const decodeDraft = (raw: string): Either.Either<Plan.PlanDraft, ConstraintFailure> =>
  decodeJsonAs(Plan.PlanDraft, raw, { notJson: "the plan is not JSON", wrongShape: "the reply is not a plan" })

export const make = (options: Options = {}): Effect.Effect<Service, never, Engine> =>
  Effect.gen(function* () {
    const engine = inRequest(yield* Engine)
    const id = options.id ?? "model"
    const policy = options.policy ?? Plan.permissive
    const stepTypes = policy.allowedStepTypes ?? options.stepTypes ?? Plan.BuiltinStepType.literals
    const schema = Plan.draftJsonSchema(stepTypes)
    const system = [
      "You are a planner. Break the user's request into a short pipeline of steps.",
      `Step types: ${stepTypes.join(", ")}.`,
      policy.maxSteps === undefined ? "" : `Use at most ${policy.maxSteps} steps.`,
      policy.requireLinear ? "Steps run one after another; do not use dependsOn." : "",
      "A step without input takes the previous step's output. Answer with JSON only: {\"rationale\": string, \"steps\": [...]}.",
      options.instructions ?? ""
    ].filter((s) => s !== "").join("\n")

    const draft = (request: SystemRequest) =>
      engine.infer(
        new InferenceRequest({
          messages: [Message.system(system), ...request.messages],
          schema,
          temperature: 0,
          ...(options.maxTokens === undefined ? {} : { maxTokens: options.maxTokens })
        })
      ).pipe(
        Effect.flatMap((result) => decodeDraft(result.content)),
        Effect.retry({ schedule: options.retry ?? retryPolicy, while: (e) => e._tag === "ConstraintFailure" })
      )

    return {
      id,
      createPlan: Effect.fn("Planner.model")(function* (request: SystemRequest) {
        const d = yield* draft(request)
        const plan = new Plan.ExecutionPlan({
          steps: d.steps.map((s) =>
            new Plan.Step({
              name: s.name,
              type: s.type,
              ...(s.input === undefined ? {} : { input: s.input }),
              ...(s.dependsOn === undefined ? {} : { dependsOn: s.dependsOn })
            })
          )
        })
        yield* Plan.check(plan, policy)
        return yield* Plan.withTrace(plan, id, d.rationale)
      })
    }
  })

export const layer = (options: Options = {}): Layer.Layer<Planner, never, Engine> =>
  Layer.effect(Planner, Effect.map(make(options), Planner.of))
