/**
 * What running a plan produced: each completed step's StepResult, and the
 * PlanOutcome (`Completed` with every step, or `Failed` with the steps that
 * completed and the typed failure of the step that did not), with the helpers
 * that read an outcome: its completed steps, their encoded outputs, their usage.
 */
import * as Data from "effect/Data"
import type { Failure } from "../../domain/Failure.js"
import type * as Plan from "../../domain/Plan.js"
import * as TokenUsage from "../../domain/TokenUsage.js"

/** One step that ran to completion. */
export interface StepResult {
  readonly name: string
  readonly type: string
  /** The decoded input the handler received. */
  readonly input: unknown
  /** The handler's output. */
  readonly output: unknown
  /** The output encoded by the handler's output schema: JSON-ready. */
  readonly encoded: unknown
  readonly attempts: number
  /** Clock times, epoch milliseconds. */
  readonly startedAt: number
  readonly finishedAt: number
}

export type PlanOutcome = Data.TaggedEnum<{
  /** Every step completed; `output` is the last step's output. */
  Completed: {
    readonly steps: ReadonlyArray<StepResult>
    readonly output: unknown
    readonly trace: Plan.PlanTrace
  }
  /** A step failed (or the run was stopped); `completed` are the steps that finished, in plan order. */
  Failed: {
    readonly completed: ReadonlyArray<StepResult>
    readonly failedStep: string
    readonly error: Failure
    readonly trace: Plan.PlanTrace
  }
}>
export const PlanOutcome = Data.taggedEnum<PlanOutcome>()

/** The steps that completed, whatever the outcome. */
export const completedSteps = (outcome: PlanOutcome): ReadonlyArray<StepResult> =>
  outcome._tag === "Completed" ? outcome.steps : outcome.completed

/** The combined token usage of every step whose output carries one (inference results, loop results). */
export const usageOf = (steps: ReadonlyArray<StepResult>): TokenUsage.TokenUsage =>
  TokenUsage.combineAll(
    steps.flatMap((s) => {
      const output = s.output
      if (typeof output !== "object" || output === null || !("usage" in output)) return []
      return output.usage instanceof TokenUsage.TokenUsage ? [output.usage] : []
    })
  )

/** Each step's encoded (JSON-ready) output by step name: the plan's structured output. */
export const encodedOutputs = (steps: ReadonlyArray<StepResult>): Readonly<Record<string, unknown>> =>
  Object.fromEntries(steps.map((s) => [s.name, s.encoded]))
