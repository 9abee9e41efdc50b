/**
 * A plan checked before anything runs: every step type has a handler, the graph
 * is sound, the policy holds, and the phases, when given, fit the graph; each
 * step is paired with its handler and the indices of the steps it depends on
 * (what ./Graph.ts runs).
 */
import * as Either from "effect/Either"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Plan from "../../domain/Plan.js"
import type { StepHandler } from "./Handler.js"

/** A step of a checked plan, with the handler that runs it. */
export interface CheckedStep {
  readonly step: Plan.Step
  readonly handler: StepHandler
  /** The names of the steps whose output it takes. */
  readonly dependsOn: ReadonlyArray<string>
  /** Their indices in the plan, in the same order. */
  readonly dependencies: ReadonlyArray<number>
}

/**
 * Checks the plan against the handlers and the policy, and pairs every step with
 * its handler: an Either, so the executor checks in the step that starts the run.
 *
 * The graph check is Plan.check's. When the step names are unique and every step
 * depends only on steps before it (a plan in the order it runs, as planners
 * write them), the graph is sound without a search (no unknown dependency, no
 * cycle: every edge points back): then only the policy is checked. Otherwise
 * Plan.check decides, and names the rule a rejected plan breaks.
 */
export const check = (
  handlers: ReadonlyMap<string, StepHandler>,
  plan: Plan.ExecutionPlan,
  policy: Plan.PlanPolicy
): Either.Either<ReadonlyArray<CheckedStep>, OrchestrationFailure> => {
  const count = plan.steps.length
  const indexOf = new Map<string, number>()
  const dependsOn: Array<ReadonlyArray<string>> = []
  let backwards = true
  for (let index = 0; index < count; index++) {
    const step = plan.steps[index]!
    if (!handlers.has(step.type)) {
      return Either.left(new OrchestrationFailure({
        code: "ORCHESTRATION_STEP_MISMATCH",
        retryable: false,
        message: `step "${step.name}" has type "${step.type}", which has no handler`,
        details: { rule: "unknownStepType", step: step.name, type: step.type, known: [...handlers.keys()] }
      }))
    }
    const deps = Plan.dependenciesOf(plan, index)
    dependsOn.push(deps)
    if (backwards) {
      for (const d of deps) if (!indexOf.has(d)) backwards = false
      if (indexOf.has(step.name)) backwards = false
      else indexOf.set(step.name, index)
    }
  }
  const valid = backwards ? Plan.checkPolicy(plan, policy) : Plan.check(plan, policy)
  if (Either.isLeft(valid)) return Either.left(valid.left)
  if (!backwards) for (let index = 0; index < count; index++) indexOf.set(plan.steps[index]!.name, index)
  const checked: Array<CheckedStep> = []
  for (let index = 0; index < count; index++) {
    const step = plan.steps[index]!
    const deps = dependsOn[index]!
    checked.push({ step, handler: handlers.get(step.type)!, dependsOn: deps, dependencies: deps.map((d) => indexOf.get(d)!) })
  }
  return Either.right(checked)
}

/**
 * Checks that `phases` fit the plan: every step in exactly one phase, and every
 * dependency of a step in an earlier phase (a rejected set is
 * ORCHESTRATION_STEP_MISMATCH with `details.rule` "phases").
 */
export const checkPhases = (
  steps: ReadonlyArray<CheckedStep>,
  phases: ReadonlyArray<ReadonlyArray<string>>
): Either.Either<void, OrchestrationFailure> => {
  const reject = (message: string, details: Record<string, unknown>) =>
    Either.left(OrchestrationFailure.stepMismatch(message, { details: { rule: "phases", ...details } }))
  const phaseOf = new Map<string, number>()
  for (const [k, phase] of phases.entries()) {
    for (const name of phase) {
      if (phaseOf.has(name)) return reject(`step "${name}" is in more than one phase`, { step: name })
      phaseOf.set(name, k)
    }
  }
  const names = new Set(steps.map((s) => s.step.name))
  const stranger = [...phaseOf.keys()].find((name) => !names.has(name))
  if (stranger !== undefined) return reject(`the phases name "${stranger}", which is not a step of the plan`, { step: stranger })
  for (const { dependsOn, step } of steps) {
    const k = phaseOf.get(step.name)
    if (k === undefined) return reject(`step "${step.name}" is in no phase`, { step: step.name })
    const late = dependsOn.find((d) => (phaseOf.get(d) ?? Infinity) >= k)
    if (late !== undefined) {
      return reject(`step "${step.name}" (phase ${k + 1}) depends on "${late}", which is not in an earlier phase`, {
        step: step.name,
        dependency: late
      })
    }
  }
  return Either.void
}
