/**
 * The plain-Effect equivalent of the "PlanExecutor, 3 steps" row of
 * bench/hotpath.bench.ts: what an Effect user writes without pagantic to give
 * its caller what `executor.execute(chain)` gives it for that plan (three `infer`
 * steps a -> b -> c with explicit inputs, on an executor made once with
 * `PlanExecutor.make({ handlers: [PlanExecutor.infer()] })` and its defaults,
 * run with no options, nobody observing, no request tracker).
 *
 * What the executor guarantees its caller for this plan, and where (file:line
 * at the commit that added this file; Graph.ts, Step.ts, Handlers.ts and
 * Outcome.ts are in src/programs/plan/, Observed.ts in src/programs/internal/),
 * each here in the cheapest plain Effect:
 *
 * 1. The plan's structure is checked before any step runs, a rejected plan
 *    failing the effect with a typed error (OrchestrationFailure): every step
 *    type has a handler, unique names, known dependencies, no cycle
 *    (src/programs/plan/Graph.ts:69-96, src/domain/Plan.ts:108); the policy
 *    (the default `Plan.permissive`, src/programs/PlanExecutor.ts:178,
 *    src/domain/Plan.ts:78) sets no limit, so Plan.checkPolicy
 *    (src/domain/Plan.ts:178) rejects nothing here. Here: `checkPlan`, a loop
 *    over the list (unique names, every dependency a step before it: known,
 *    acyclic), failing with PlanRejected. One step type only: no handler lookup.
 * 2. Steps in dependency order, one after another (a chain: never two ready at
 *    once; Graph.ts:388-402); each step's input is its explicit `input`
 *    (Graph.ts:250), so no dependency's output is passed on. Here: the list's
 *    order, a `for` loop.
 * 3. A step's input checked against the handler's input schema (InferInput,
 *    Handlers.ts:63; Step.ts:118) and its output against InferenceResult
 *    (Handlers.ts:64; Step.ts:126): here the types do it (a string prompt in,
 *    the Engine's typed InferenceResult out), no work at run time.
 * 4. The engine called with a user message of the input
 *    (Handlers.ts:51,68-73), metered only when somebody observes or a
 *    CostTracker is present (Observed.ts:129; neither here). Here: the same
 *    request as the row's `plainPlan`, `engine.infer` directly.
 * 5. Each completed step's result kept by name, in plan order, with its input,
 *    output and clock times (startedAt / finishedAt, Step.ts:121,128;
 *    Outcome.ts:13-28). Here: an array of records and `Clock.currentTimeMillis`
 *    before and after each call. Left out: `type` (always "infer") and
 *    `attempts` (always 1: no retry, below), constants here; `encoded`, which the
 *    executor makes only when read (Step.ts:180-219) and this caller never
 *    reads (a caller that wants it encodes with Schema.encode(InferenceResult)).
 * 6. The outcome: `Completed` with the steps, the last step's output and the
 *    plan's trace (a manual trace made at the start: createdAt from the clock,
 *    the step count; Graph.ts:211-213,373), or, when a step fails, `Failed` with
 *    the steps completed, the failed step's name and its typed failure, and the
 *    steps that did not run, each naming the step it waited on (fail-fast, the
 *    default: PlanExecutor.ts:179, Graph.ts:331-355,384; the `failures` list is
 *    that one failure). The effect succeeds with a failed outcome; a defect or
 *    an interruption is not a value (Graph.ts:337, Effect's semantics). Here:
 *    `Effect.either` on the engine call (it catches failures only), a tagged
 *    union built by hand; the trace's constant `plannerId` / `rationale` left
 *    out, its time from `DateTime.now`.
 *
 * What the executor's defaults do NOT do for this plan, and so is not here:
 * - Retries: by default a step re-runs on `Validator.retryPolicy`
 *   (PlanExecutor.ts:182) only for a retryable ConstraintFailure or
 *   ValidationFailure (`retryOn` "validation", Step.ts:57,354); an `infer` step
 *   fails only with an InferenceFailure, so it never re-runs: no Effect.retry.
 * - A deadline: only `PlanPolicy.timeoutPerStep` sets one (Step.ts:130-131);
 *   the permissive policy has none: no Effect.timeout.
 * - Concurrency (a chain), a stop signal, priorities, phases (no options given).
 * - Events, spans, metrics, cost: only when an EventLog, Metrics, CostTracker or
 *   an exporting tracer is present (PlanExecutor.ts:206, Graph.ts:462,
 *   Step.ts:95); none is. The request tracker's step count (Graph.ts:401): no
 *   tracked request here.
 * - A scope of the run's own: only for an executor made where a Scope was
 *   (PlanExecutor.ts:150, Graph.ts:455); the row's is not.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type { InferenceResult } from "../src/services/Engine.js"

/** A step of the plan: a prompt for the engine, after the steps it depends on. */
export interface PlainStep {
  readonly name: string
  readonly input: string
  readonly dependsOn: ReadonlyArray<string>
}

/** The same plan as the row's `chain`. */
export const plainChain: ReadonlyArray<PlainStep> = [
  { name: "a", input: "one", dependsOn: [] },
  { name: "b", input: "two", dependsOn: ["a"] },
  { name: "c", input: "three", dependsOn: ["b"] }
]

/** A step that completed: what it was given, what the engine answered, when. */
export interface PlainStepResult {
  readonly name: string
  readonly input: string
  readonly output: InferenceResult
  readonly startedAt: number
  readonly finishedAt: number
}

export interface PlainTrace {
  readonly createdAt: DateTime.Utc
  readonly stepCount: number
}

export type PlainOutcome =
  | {
    readonly _tag: "Completed"
    readonly steps: ReadonlyArray<PlainStepResult>
    /** The last step's output (none for a plan of no steps). */
    readonly output: InferenceResult | undefined
    readonly trace: PlainTrace
  }
  | {
    readonly _tag: "Failed"
    readonly completed: ReadonlyArray<PlainStepResult>
    readonly failedStep: string
    readonly error: InferenceFailure
    /** The steps that did not run, each with the step it waited on (in a chain: the one before it). */
    readonly skipped: ReadonlyArray<{ readonly name: string; readonly dependency: string }>
    readonly trace: PlainTrace
  }

/** A plan whose structure is wrong: nothing ran. */
export class PlanRejected extends Data.TaggedError("PlanRejected")<{ readonly step: string; readonly reason: string }> {}

/**
 * The plan's structure: unique names, and every dependency a step listed before
 * (so known, and no cycle): the list is then an order that runs each step after
 * what it depends on.
 */
const checkPlan = (steps: ReadonlyArray<PlainStep>): Either.Either<void, PlanRejected> => {
  const seen = new Set<string>()
  for (const step of steps) {
    if (seen.has(step.name)) return Either.left(new PlanRejected({ step: step.name, reason: "duplicate name" }))
    for (const d of step.dependsOn) {
      if (!seen.has(d)) return Either.left(new PlanRejected({ step: step.name, reason: `unknown or later dependency "${d}"` }))
    }
    seen.add(step.name)
  }
  return Either.void
}

/** Runs `steps` in order, each an engine call, stopping at the first failure (returned as a value). */
export const runPlainPlan = (steps: ReadonlyArray<PlainStep>): Effect.Effect<PlainOutcome, PlanRejected, Engine> =>
  Effect.gen(function* () {
    yield* checkPlan(steps)
    const engine = yield* Engine
    const trace: PlainTrace = { createdAt: yield* DateTime.now, stepCount: steps.length }
    const completed: Array<PlainStepResult> = []
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i]!
      const startedAt = yield* Clock.currentTimeMillis
      const reply = yield* Effect.either(engine.infer(new InferenceRequest({ messages: [Message.user(step.input)] }, true)))
      if (Either.isLeft(reply)) {
        return {
          _tag: "Failed",
          completed,
          failedStep: step.name,
          error: reply.left,
          skipped: steps.slice(i + 1).map((s) => ({ name: s.name, dependency: s.dependsOn[0] ?? step.name })),
          trace
        } as const
      }
      completed.push({ name: step.name, input: step.input, output: reply.right, startedAt, finishedAt: yield* Clock.currentTimeMillis })
    }
    return { _tag: "Completed", steps: completed, output: completed.at(-1)?.output, trace } as const
  })

/** The row's baseline: the plan run, its outcome checked as the row checks the executor's. */
export const plainPlanEquivalent: Effect.Effect<void, PlanRejected, Engine> = Effect.flatMap(
  runPlainPlan(plainChain),
  (outcome) =>
    outcome._tag === "Completed" && outcome.steps.length === 3
      ? Effect.void
      : Effect.dieMessage(`plain plan ended ${outcome._tag}`)
)
