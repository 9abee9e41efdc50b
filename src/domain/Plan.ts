/**
 * Layer 0: execution plans.
 *
 * A Planner turns a SystemRequest into an ExecutionPlan; the PlanExecutor runs it.
 * Plans are data: they arrive over HTTP or from a model, so every type here is a
 * Schema that decodes from JSON. A step names its type (which handler runs it), an
 * optional explicit input (absent means "the output of what I depend on") and an
 * optional `dependsOn`: absent means "the previous step" (the linear pipeline of
 * the plan), `[]` means "nothing" (a root that may run concurrently with
 * others), and a list names the steps whose outputs it joins.
 *
 * The structural checks live here too, because planners and the executor apply
 * the same rules: a PlanPolicy (max steps, allowed types, linear only, timeout per
 * step) and the dependency graph (unique names, known dependencies, no cycles).
 * A rejected plan is an OrchestrationFailure whose `details.rule` names the rule;
 * too many steps is ORCHESTRATION_ITERATION_LIMIT, every other rejection is
 * ORCHESTRATION_STEP_MISMATCH (it is never retryable: the plan must change).
 */
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { OrchestrationFailure } from "./Failure.js"
import type { JsonSchema } from "./JsonSchema.js"

// ---------------------------------------------------------------------------
// Steps and plans
// ---------------------------------------------------------------------------

/** The built-in step types; custom handlers add their own. */
export const BuiltinStepType = Schema.Literal("infer", "tool", "retrieve", "rerank", "validate")
export type BuiltinStepType = typeof BuiltinStepType.Type

/** A step's name: trimmed, 1 to 128 characters (messages quote it; it is an id, not a text). */
export const StepName = Schema.NonEmptyTrimmedString.pipe(Schema.maxLength(128)).annotations({ identifier: "StepName" })

/** What kind of work a step performs: a built-in type or a registered custom one (at most 64 characters). */
export const StepType = Schema.NonEmptyTrimmedString.pipe(Schema.maxLength(64)).annotations({ identifier: "StepType" })
export type StepType = typeof StepType.Type

/** One unit of work in a plan. */
export class Step extends Schema.Class<Step>("Step")({
  name: StepName,
  type: StepType,
  /** Explicit input; absent means the output of the step(s) this one depends on. */
  input: Schema.optional(Schema.Unknown),
  /** Absent: the previous step. `[]`: none (a root). Otherwise the named steps. */
  dependsOn: Schema.optional(Schema.Array(StepName))
}) {}

/** Metadata about how a plan was made, for observability. */
export class PlanTrace extends Schema.Class<PlanTrace>("PlanTrace")({
  plannerId: Schema.String,
  rationale: Schema.String,
  createdAt: Schema.DateTimeUtc,
  stepCount: Schema.NonNegativeInt
}) {}

/** An ordered list of steps, with the trace of the planner that made it. */
export class ExecutionPlan extends Schema.Class<ExecutionPlan>("ExecutionPlan")({
  steps: Schema.Array(Step),
  trace: Schema.optional(PlanTrace)
}) {}

/** Constraints on plan shape, applied before any step runs. */
export class PlanPolicy extends Schema.Class<PlanPolicy>("PlanPolicy")({
  /** Upper bound on plan length; absent means unbounded. */
  maxSteps: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** Whitelist of step types; absent means every type with a handler. */
  allowedStepTypes: Schema.optional(Schema.Array(StepType)),
  /** When true the plan must be a chain in list order: no roots after the first step, no joins. */
  requireLinear: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  /** Deadline for each step (retries included), in milliseconds on the wire. */
  timeoutPerStep: Schema.optional(Schema.DurationFromMillis)
}) {}

/** A policy that allows everything. */
export const permissive: PlanPolicy = new PlanPolicy({})

// ---------------------------------------------------------------------------
// Structural checks
// ---------------------------------------------------------------------------

/** The steps a step depends on, with the linear default made explicit. */
export const dependenciesOf = (plan: ExecutionPlan, index: number): ReadonlyArray<string> => {
  const step = plan.steps[index]
  if (step === undefined) return []
  if (step.dependsOn !== undefined) return step.dependsOn
  const previous = plan.steps[index - 1]
  return previous === undefined ? [] : [previous.name]
}

const rejected = (
  code: "ORCHESTRATION_STEP_MISMATCH" | "ORCHESTRATION_ITERATION_LIMIT",
  rule: string,
  message: string,
  details: Record<string, unknown> = {}
): OrchestrationFailure =>
  (code === "ORCHESTRATION_STEP_MISMATCH" ? OrchestrationFailure.stepMismatch : OrchestrationFailure.iterationLimit)(
    message,
    { details: { rule, ...details } }
  )

/**
 * Checks the dependency graph: unique step names, known dependencies, no
 * self-dependency and no cycle. A cycle is reported with its path (`a -> b -> a`).
 */
export const checkGraph = (plan: ExecutionPlan): Either.Either<void, OrchestrationFailure> => {
  const names = new Map<string, number>()
  for (const [i, step] of plan.steps.entries()) {
    if (names.has(step.name)) {
      return Either.left(
        rejected("ORCHESTRATION_STEP_MISMATCH", "duplicateStep", `plan has two steps named "${step.name}"`, {
          step: step.name
        })
      )
    }
    names.set(step.name, i)
  }
  const edges = plan.steps.map((_, i) => dependenciesOf(plan, i))
  for (const [i, deps] of edges.entries()) {
    const step = plan.steps[i]!
    for (const dep of deps) {
      if (!names.has(dep)) {
        return Either.left(
          rejected(
            "ORCHESTRATION_STEP_MISMATCH",
            "unknownDependency",
            `step "${step.name}" depends on unknown step "${dep}"`,
            { step: step.name, dependency: dep }
          )
        )
      }
    }
  }
  // Depth-first search with colours; the grey stack is the cycle when we meet a grey node.
  const colour = new Array<0 | 1 | 2>(plan.steps.length).fill(0)
  const stack: Array<number> = []
  const visit = (i: number): ReadonlyArray<string> | undefined => {
    colour[i] = 1
    stack.push(i)
    for (const dep of edges[i]!) {
      const j = names.get(dep)!
      if (colour[j] === 1) {
        const from = stack.indexOf(j)
        return [...stack.slice(from), j].map((k) => plan.steps[k]!.name)
      }
      if (colour[j] === 0) {
        const found = visit(j)
        if (found !== undefined) return found
      }
    }
    stack.pop()
    colour[i] = 2
    return undefined
  }
  for (let i = 0; i < plan.steps.length; i++) {
    if (colour[i] === 0) {
      const cycle = visit(i)
      if (cycle !== undefined) {
        // Dependencies point backwards in time; print the cycle in execution order.
        const ordered = [...cycle].reverse()
        return Either.left(
          rejected(
            "ORCHESTRATION_STEP_MISMATCH",
            "cycle",
            `plan has a dependency cycle: ${ordered.join(" -> ")}`,
            { cycle: ordered }
          )
        )
      }
    }
  }
  return Either.void
}

/** Checks a plan against a policy (max steps, allowed types, linearity). */
export const checkPolicy = (plan: ExecutionPlan, policy: PlanPolicy): Either.Either<void, OrchestrationFailure> => {
  if (policy.maxSteps !== undefined && plan.steps.length > policy.maxSteps) {
    return Either.left(
      rejected(
        "ORCHESTRATION_ITERATION_LIMIT",
        "maxSteps",
        `plan has ${plan.steps.length} steps, the policy allows at most ${policy.maxSteps}`,
        { stepCount: plan.steps.length, maxSteps: policy.maxSteps }
      )
    )
  }
  if (policy.allowedStepTypes !== undefined) {
    const allowed = new Set(policy.allowedStepTypes)
    const bad = plan.steps.find((s) => !allowed.has(s.type))
    if (bad !== undefined) {
      return Either.left(
        rejected(
          "ORCHESTRATION_STEP_MISMATCH",
          "allowedStepTypes",
          `step "${bad.name}" has type "${bad.type}", which the policy does not allow`,
          { step: bad.name, type: bad.type, allowedStepTypes: policy.allowedStepTypes }
        )
      )
    }
  }
  if (policy.requireLinear) {
    for (let i = 0; i < plan.steps.length; i++) {
      const deps = dependenciesOf(plan, i)
      const expected = i === 0 ? [] : [plan.steps[i - 1]!.name]
      if (deps.length !== expected.length || deps.some((d, k) => d !== expected[k])) {
        const step = plan.steps[i]!
        return Either.left(
          rejected(
            "ORCHESTRATION_STEP_MISMATCH",
            "requireLinear",
            `step "${step.name}" breaks the linear order the policy requires`,
            { step: step.name, dependsOn: deps }
          )
        )
      }
    }
  }
  return Either.void
}

/** The graph check, then the policy check. */
export const check = (plan: ExecutionPlan, policy: PlanPolicy = permissive): Either.Either<void, OrchestrationFailure> =>
  Either.flatMap(checkGraph(plan), () => checkPolicy(plan, policy))

// ---------------------------------------------------------------------------
// The plan schema a model answers with
// ---------------------------------------------------------------------------

/** What a model-based planner asks the model for: a rationale and steps with string inputs. */
export class PlanDraft extends Schema.Class<PlanDraft>("PlanDraft")({
  rationale: Schema.String,
  steps: Schema.Array(
    Schema.Struct({
      name: Schema.NonEmptyTrimmedString,
      type: StepType,
      input: Schema.optional(Schema.String),
      dependsOn: Schema.optional(Schema.Array(StepName))
    })
  )
}) {}

/** The JSON schema (pagantic's subset) of a PlanDraft, with step types limited to `stepTypes`. */
export const draftJsonSchema = (stepTypes: ReadonlyArray<string>): JsonSchema => ({
  type: "object",
  properties: {
    rationale: { type: "string", description: "why these steps were chosen" },
    steps: {
      type: "array",
      items: {
        type: "object",
        properties: {
          name: { type: "string", description: "unique step name" },
          type: { type: "string", enum: stepTypes },
          input: { type: "string", description: "explicit input; omit to use the previous step's output" },
          dependsOn: { type: "array", items: { type: "string" } }
        },
        required: ["name", "type"]
      }
    }
  },
  required: ["rationale", "steps"]
})

/** The plan with its trace (who made it, why, when, how many steps), stamped with the current time. */
export const withTrace = (plan: ExecutionPlan, plannerId: string, rationale: string): Effect.Effect<ExecutionPlan> =>
  Effect.map(DateTime.now, (createdAt) =>
    new ExecutionPlan({
      steps: plan.steps,
      trace: new PlanTrace({ plannerId, rationale, createdAt, stepCount: plan.steps.length })
    }))
