/**
 * Mode plan: the request's plan (or the Planner's) run by a PlanExecutor with the
 * facade's handlers and policy. The answer's content is the text of the final
 * step's output, its structured output every step's encoded output, its tool
 * calls those of the tool steps, its confidence that of its validate or
 * retrieval steps (see `confidenceOf`); a failed plan keeps the outputs it got as
 * its partial output.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { ToolCallRecord } from "../../domain/System.js"
import { InferenceResult } from "../../services/Engine.js"
import type * as Lifecycle from "../Lifecycle.js"
import * as PlanExecutor from "../PlanExecutor.js"
import * as Check from "./Check.js"
import * as Confidence from "./Confidence.js"
import type * as Partial from "./Partial.js"
import type { Environment } from "./Environment.js"
import type { Outcome } from "./Types.js"

const textOf = (output: unknown): string =>
  typeof output === "string"
    ? output
    : output instanceof InferenceResult
      ? output.content
      : typeof output === "object" && output !== null && "content" in output && typeof output.content === "string"
        ? output.content
        : (JSON.stringify(output) ?? "")

/** The calls the tool steps made, as the response reports tool calls. */
const toolCallsOf = (steps: ReadonlyArray<PlanExecutor.StepResult>): ReadonlyArray<ToolCallRecord> =>
  steps.flatMap((s) => {
    const out = s.output as { id?: unknown; name?: unknown; content?: unknown; arguments?: unknown }
    return s.type === "tool" && typeof out.name === "string"
      ? [
        new ToolCallRecord({
          id: String(out.id ?? s.name),
          name: out.name,
          arguments: (s.input as { arguments?: Record<string, unknown> }).arguments ?? {},
          result: String(out.content ?? ""),
          isError: false,
          durationMs: s.finishedAt - s.startedAt
        })
      ]
      : []
  })

/**
 * The confidence of a completed plan, where its steps produced one: the pass rate
 * of its last validate step's report ("validation"), else the best score of its
 * last retrieve or rerank step when its scores are on the [0, 1] scale (a model
 * reranker's; a BM25 score is not a confidence) ("retrieval").
 */
export const confidenceOf = (
  steps: ReadonlyArray<PlanExecutor.StepResult>
): Confidence.Confidence | undefined => {
  const last = (found: (s: PlanExecutor.StepResult) => boolean) => [...steps].reverse().find(found)
  const validated = last((s) => s.output instanceof PlanExecutor.Validated)
  if (validated !== undefined) {
    return { confidence: (validated.output as PlanExecutor.Validated).report.passRate, confidenceSource: "validation" }
  }
  const retrieved = last((s) => s.output instanceof PlanExecutor.CandidateSet && s.output.candidates.length > 0)
  if (retrieved === undefined) return undefined
  return Confidence.retrieval((retrieved.output as PlanExecutor.CandidateSet).candidates.map((c) => c.score))
}

/** Plans (unless the request brings its plan), checks and runs the steps. */
export const run = (env: Environment, checked: Check.Plan, partial: Partial.Partial, tracker: Lifecycle.Tracker) =>
  Effect.gen(function* () {
    const { request } = checked
    yield* tracker.transition("PLAN", request.plan === undefined ? "planner" : "plan provided")
    const plan =
      request.plan ??
      (Option.isSome(env.planner)
        ? yield* env.planner.value.createPlan(request)
        : yield* Check.invalid("Mode plan needs a plan in the request or a Planner service"))
    yield* tracker.transition("PREPARE", `${plan.steps.length} steps`)
    const executor = yield* PlanExecutor.make({
      handlers: env.planHandlers,
      policy: env.options.planPolicy,
      concurrency: env.options.planConcurrency,
      retryOn: env.options.planRetryOn
    })
    yield* tracker.transition("EXECUTE", "running steps")
    const outcome = yield* executor.execute(plan)
    const steps = PlanExecutor.completedSteps(outcome)
    const outputs = PlanExecutor.encodedOutputs(steps)
    if (outcome._tag === "Failed") {
      yield* Effect.sync(() => void (partial.text = JSON.stringify(outputs)))
      return yield* outcome.error
    }
    yield* tracker.transition("VALIDATE", "every step completed")
    return {
      content: textOf(outcome.output),
      structuredOutput: outputs,
      toolCallsMade: toolCallsOf(steps),
      ...confidenceOf(steps),
      usage: PlanExecutor.usageOf(steps),
      stopReason: "finish"
    } satisfies Outcome
  })
