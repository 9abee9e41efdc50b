/**
 * One plan step, run: its input decoded by the handler's schema (a mismatch is
 * ORCHESTRATION_STEP_MISMATCH), the handler run with its services, a retryable
 * ConstraintFailure or ValidationFailure re-running it on the schedule (reported
 * to the lifecycle as EXECUTE -> VALIDATE -> EXECUTE), the whole bounded by the
 * policy's `timeoutPerStep` (CANCELLED_TIMEOUT), and the output encoded by the
 * handler's output schema. `plan.step.start` / `plan.step.end` events, the
 * `plan_step` latency and a `PlanExecutor.step` span carry the step's name.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type { Failure } from "../../domain/Failure.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Issues from "../../domain/Issues.js"
import type * as Plan from "../../domain/Plan.js"
import * as Text from "../../domain/Text.js"
import { withCorrelation } from "../../services/EventLog.js"
import { withMetrics } from "../../services/Metrics.js"
import * as Deadline from "../internal/Deadline.js"
import * as Observed from "../internal/Observed.js"
import * as Retry from "../internal/Retry.js"
import * as OrchestrateEvent from "../internal/OrchestrateEvent.js"
import * as Spans from "../internal/Spans.js"
import * as Lifecycle from "../Lifecycle.js"
import type { StepHandler } from "./Handler.js"
import type { StepResult } from "./Outcome.js"
import * as Local from "../../services/internal/Local.js"
import * as Tracing from "../../services/internal/Tracing.js"

/** What every step of an executor runs with. */
export interface StepEnvironment {
  /** The handlers' services, taken once when the executor was made. */
  readonly context: Context.Context<never>
  /** When a step is re-run. */
  readonly schedule: Schedule.Schedule<unknown>
  /**
   * Which failures re-run a step: "validation" (a retryable ConstraintFailure or
   * ValidationFailure: VALIDATE rejected the output; the default) or "retryable"
   * (any failure whose `retryable` is true). A non-retryable failure never re-runs it.
   */
  readonly retryOn?: RetryOn | undefined
}

export type RetryOn = "validation" | "retryable"

const retriesOn = (environment: StepEnvironment): ((error: Failure) => boolean) =>
  environment.retryOn === "retryable" ? (error) => error.retryable : isStepRetryable

/**
 * Runs `step` with its handler on `raw` (its explicit input or its dependencies'
 * output). Its events, span, latency and correlation (the step's name) only
 * when somebody observes (internal/Observed `listened`): else nothing reads them.
 */
export const run = (
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  raw: unknown,
  policy: Plan.PlanPolicy
): Effect.Effect<StepResult, Failure> =>
  Effect.withFiberRuntime((fiber) =>
    Observed.listenedBy(fiber)
      ? observe(step, Effect.withFiberRuntime((now) => runStep(now, environment, step, handler, raw, policy)))
      : runStep(fiber, environment, step, handler, raw, policy)
  )

/** The step on the fiber that runs it: started at once (the clock read from the fiber, the input decoded as an Either), one step to finish. */
const runStep = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  raw: unknown,
  policy: Plan.PlanPolicy
): Effect.Effect<StepResult, Failure> => {
    const input = decodeInput(handler.input, raw)
    if (Either.isLeft(input)) return Effect.fail(mismatch(step, "input", input.left))
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    const startedAt = clock.unsafeCurrentTimeMillis()
    // the attempts run one after another in this fiber
    const attempts = { count: 0 }
    const timeout = policy.timeoutPerStep
    const run = attemptsOf(environment, step, handler, input.right, attempts)
    const bounded = timeout === undefined ? run : Deadline.bound(
      timeout,
      (duration) => `step "${step.name}" exceeded its ${duration} deadline`,
      { step: step.name, timeoutMs: Duration.toMillis(timeout) }
    )(run)
    return Effect.flatMap(bounded, (output) => {
      const codec = codecOf(handler.output)
      const valid = codec.validate(output)
      if (Either.isLeft(valid)) return Effect.fail(mismatch(step, "output", valid.left))
      return Effect.succeed(completed(step, input.right, output, codec, attempts.count, startedAt, clock.unsafeCurrentTimeMillis()))
    })
}

/**
 * A completed step's result. Its output was checked against the handler's output
 * schema (a mismatch is ORCHESTRATION_STEP_MISMATCH); its encoded, JSON-ready form
 * is made when first read, and kept: on a plan of model calls, encoding every
 * step's output cost as much as the rest of the step, and most runs never read it
 * (the facade's plan mode does). An output schema whose encoding rejects a value
 * that passed it is a bug in that schema: reading `encoded` then throws its
 * ParseError (a defect where it is read).
 */
const completed = (
  step: Plan.Step,
  input: unknown,
  output: unknown,
  codec: Codec,
  attempts: number,
  startedAt: number,
  finishedAt: number
): StepResult => {
  let encoded: { readonly value: unknown } | undefined
  return {
    name: step.name,
    type: step.type,
    input,
    output,
    get encoded() {
      if (encoded === undefined) {
        const made = codec.encode(output)
        if (Either.isLeft(made)) throw made.left
        encoded = { value: made.right }
      }
      return encoded.value
    },
    attempts,
    startedAt,
    finishedAt
  }
}

/** The step's events, span, latency and correlation around its run. */
const observe = (step: Plan.Step, body: Effect.Effect<StepResult, Failure>): Effect.Effect<StepResult, Failure> =>
  Effect.gen(function* () {
    yield* Spans.annotate({ [Spans.Pagantic.stepType]: step.type })
    yield* recordStepEvent(step, "plan.step.start", {})
    return yield* body
  }).pipe(
    Effect.tapBoth({
      onFailure: (error) =>
        recordStepEvent(step, "plan.step.end", { success: false, code: error.code }, { error: error.message }),
      onSuccess: (r) =>
        Effect.zipRight(
          recordStepEvent(step, "plan.step.end", { success: true, attempts: r.attempts }, {
            durationMs: r.finishedAt - r.startedAt
          }),
          Effect.zipRight(
            Tracing.annotate({ [Spans.Pagantic.attempt]: r.attempts }),
            withMetrics((m) => m.recordLatency("plan_step", r.finishedAt - r.startedAt))
          )
        )
    }),
    withCorrelation({ stepName: step.name, causedBy: step.name }),
    Observed.span("PlanExecutor.step", {
      attributes: { step: step.name, type: step.type, [Spans.Pagantic.stepName]: step.name }
    })
  )

/** The handler run, re-run on the schedule while it fails in a way `retryOn` retries (unless the handler opts out). */
const attemptsOf = (
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  input: unknown,
  attempts: { count: number }
): Effect.Effect<unknown, Failure> => {
  const retries = handler.retry !== false
  const retryable = retriesOn(environment)
  const attempt = Effect.suspend(() => {
    const n = ++attempts.count
    const run = withServices(environment, handler.run(input, { step, attempt: n })).pipe(
      Effect.tapError((error) =>
        retries && retryable(error)
          ? Lifecycle.transition("EXECUTE", "VALIDATE", n, `step "${step.name}": ${error.code}: ${error.message}`)
          : Effect.void
      )
    )
    return n > 1 ? Effect.zipRight(Lifecycle.transition("VALIDATE", "EXECUTE", n, `retry step "${step.name}"`), run) : run
  })
  return retries ? Retry.retry(attempt, { schedule: environment.schedule, while: retryable }) : attempt
}

/** A handler's run with the services the executor took for it (what `make` required of its caller). */
const withServices = <A>(
  environment: StepEnvironment,
  effect: Effect.Effect<A, Failure, any>
): Effect.Effect<A, Failure> => Local.provide(effect, environment.context) as Effect.Effect<A, Failure>

const recordStepEvent = (
  step: Plan.Step,
  action: "plan.step.start" | "plan.step.end",
  data: Record<string, unknown>,
  extra?: OrchestrateEvent.Extra
): Effect.Effect<void> => OrchestrateEvent.record(action, { step: step.name, type: step.type, ...data }, extra)

const isStepRetryable = (error: Failure): boolean =>
  (error._tag === "ConstraintFailure" || error._tag === "ValidationFailure") && error.retryable

/**
 * A handler schema's validator, decoder and encoder, made once per schema: making
 * a validator derives the schema's type side (`typeAST`), a new AST each time, so
 * the parsers Effect memoizes per AST would be built again on every step.
 */
interface Codec {
  readonly validate: (u: unknown) => Either.Either<any, ParseResult.ParseError>
  readonly decode: (u: unknown) => Either.Either<any, ParseResult.ParseError>
  readonly encode: (u: unknown) => Either.Either<any, ParseResult.ParseError>
}
const codecs = new WeakMap<object, Codec>()
const codecOf = (schema: Schema.Schema<any, any, never>): Codec => {
  const cached = codecs.get(schema)
  if (cached !== undefined) return cached
  const made: Codec = {
    validate: Schema.validateEither(schema),
    decode: Schema.decodeUnknownEither(schema, { errors: "all" }),
    encode: Schema.encodeUnknownEither(schema)
  }
  codecs.set(schema, made)
  return made
}

/** Accepts a value already of the handler's type (a chained output), else decodes it (JSON input). */
const decodeInput = <I>(
  schema: Schema.Schema<I, any, never>,
  value: unknown
): Either.Either<I, ParseResult.ParseError> => {
  const codec = codecOf(schema)
  const typed = codec.validate(value)
  if (Either.isRight(typed)) return typed
  return codec.decode(value)
}

const mismatch = (
  step: Plan.Step,
  side: "input" | "output",
  error: ParseResult.ParseError
): OrchestrationFailure =>
  new OrchestrationFailure({
    code: "ORCHESTRATION_STEP_MISMATCH",
    retryable: false,
    message: `step "${step.name}" (${step.type}): ${side} does not match the handler's schema: ${
      Issues.describe(error, `the step's ${side}`, side).join("; ")
    }`,
    details: {
      step: step.name,
      type: step.type,
      side,
      issues: ParseResult.ArrayFormatter.formatErrorSync(error).map((i) => ({
        path: Issues.formatPath(i.path),
        message: Text.excerpt(i.message, 200)
      }))
    }
  })
