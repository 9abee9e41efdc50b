/**
 * Step handlers: what runs the steps of one type. A handler declares the Schema
 * of its input and of its output, so a plan step that receives the wrong input
 * fails at that step (ORCHESTRATION_STEP_MISMATCH), and its output is encoded to
 * JSON by its own schema. Any Effect program can be a handler (`fromProgram`);
 * `withValidation` and `validatedBy` add a VALIDATE check that re-runs the step
 * when it rejects the output.
 */
import * as Effect from "effect/Effect"
import type * as Schema from "effect/Schema"
import type { ConstraintFailure, Failure, ValidationFailure } from "../../domain/Failure.js"
import type * as Plan from "../../domain/Plan.js"
import type { Rule } from "../../services/Validator.js"
import { Validator } from "../../services/Validator.js"

/** What a handler knows about the step it runs. */
export interface StepContext {
  readonly step: Plan.Step
  /** 1 on the first attempt, incremented on every retry. */
  readonly attempt: number
}

/** Runs steps of one type: typed input in, typed output out. `R` is what it needs; `make` provides it. */
export interface StepHandler<I = any, O = any, R = any> {
  readonly type: string
  readonly input: Schema.Schema<I, any, never>
  readonly output: Schema.Schema<O, any, never>
  readonly run: (input: I, context: StepContext) => Effect.Effect<O, Failure, R>
  /** Whether a retryable ConstraintFailure/ValidationFailure re-runs the step. Default true. */
  readonly retry?: boolean | undefined
}

/** The services the given handlers need. */
export type HandlersContext<H extends ReadonlyArray<StepHandler>> = H[number] extends infer X
  ? X extends StepHandler<any, any, infer R> ? R : never
  : never

/** Defines a handler for a step type. */
export const handler = <I, II, O, OI, E extends Failure, R>(
  type: string,
  options: {
    readonly input: Schema.Schema<I, II, never>
    readonly output: Schema.Schema<O, OI, never>
    readonly run: (input: I, context: StepContext) => Effect.Effect<O, E, R>
    readonly retry?: boolean | undefined
  }
): StepHandler<I, O, R> => ({
  type,
  input: options.input,
  output: options.output,
  run: options.run,
  retry: options.retry
})

/**
 * Wraps any Effect program as a step handler: an AgentLoop chat, a
 * SpecializedLoop or RedundantLoop call, a custom pipeline.
 *
 *   PlanExecutor.fromProgram("research", Schema.String, Schema.String,
 *     (prompt) => Effect.flatMap(AgentLoop.make(), (agent) => agent.chat(prompt)).pipe(Effect.map((r) => r.content)))
 */
export const fromProgram = <I, II, O, OI, E extends Failure, R>(
  type: string,
  input: Schema.Schema<I, II, never>,
  output: Schema.Schema<O, OI, never>,
  program: (input: I, context: StepContext) => Effect.Effect<O, E, R>
): StepHandler<I, O, R> => handler(type, { input, output, run: program })

/**
 * Adds a check after the handler runs: a ValidationFailure or ConstraintFailure
 * it raises is VALIDATE rejecting the output, and (when retryable) re-runs the step.
 */
export const withValidation = <I, O, R, R2>(
  self: StepHandler<I, O, R>,
  check: (output: O, context: StepContext) => Effect.Effect<void, ValidationFailure | ConstraintFailure, R2>
): StepHandler<I, O, R | R2> => ({
  ...self,
  retry: true,
  run: (input, context) => Effect.tap(self.run(input, context), (output) => check(output, context))
})

/** Validates the handler's output text with the Validator in context (its rules, or `rules`). */
export const validatedBy = <I, O, R>(
  self: StepHandler<I, O, R>,
  text: (output: O) => string,
  rules?: ReadonlyArray<Rule>
): StepHandler<I, O, R | Validator> =>
  withValidation(self, (output) => Effect.flatMap(Validator, (v) => Effect.asVoid(v.validate(text(output), rules))))
