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
  /**
   * The output encoded by the handler's output schema: JSON-ready. Made when first
   * read and kept (the output itself was checked against the schema when the step
   * ended).
   */
  readonly encoded: unknown
  readonly attempts: number
  /** Clock times, epoch milliseconds. */
  readonly startedAt: number
  readonly finishedAt: number
}

/** A step that ran and failed. */
export interface StepFailure {
  readonly name: string
  readonly type: string
  readonly error: Failure
}

/**
 * A step that did not run to the end and did not fail itself: a step it depends
 * on failed or was skipped (`dependency_failed`, naming that `dependency`), or the
 * run was stopped (`stopped`: a stop signal, or fail-fast after another step's
 * failure; `interrupted` when it was running then).
 */
export interface SkippedStep {
  readonly name: string
  readonly type: string
  readonly reason: "dependency_failed" | "stopped"
  readonly dependency?: string | undefined
  readonly interrupted: boolean
  readonly message: string
}

export type PlanOutcome = Data.TaggedEnum<{
  /** Every step completed; `output` is the last step's output. */
  Completed: {
    readonly steps: ReadonlyArray<StepResult>
    readonly output: unknown
    readonly trace: Plan.PlanTrace
  }
  /**
   * Not every step completed. `completed` are the steps that finished, in plan
   * order; `failedStep` and `error` the first failure (or, when the run was
   * stopped, the first step that did not start, with CANCELLED_SIGNAL);
   * `failures` every step that failed and `skipped` every step that did not run
   * to the end without failing itself, both in plan order.
   */
  Failed: {
    readonly completed: ReadonlyArray<StepResult>
    readonly failedStep: string
    readonly error: Failure
    readonly failures: ReadonlyArray<StepFailure>
    readonly skipped: ReadonlyArray<SkippedStep>
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
