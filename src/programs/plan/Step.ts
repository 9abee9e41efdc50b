/**
 * One plan step, run: its input decoded by the handler's schema (a mismatch is
 * ORCHESTRATION_STEP_MISMATCH), the handler run with its services, a retryable
 * ConstraintFailure or ValidationFailure re-running it on the schedule (reported
 * to the lifecycle as EXECUTE -> VALIDATE -> EXECUTE), the whole bounded by the
 * policy's `timeoutPerStep` (CANCELLED_TIMEOUT), and the output encoded by the
 * handler's output schema. `plan.step.start` / `plan.step.end` events, the
 * `plan_step` latency and a `PlanExecutor.step` span carry the step's name.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
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
    runThen(fiber, Observed.listenedBy(fiber), environment, step, handler, raw, policy, ended)
  )

const ended = (exit: Exit.Exit<StepResult, Failure>): Effect.Effect<StepResult, Failure> => exit

/**
 * `run`, started on `fiber` (the fiber that runs it, read when it starts: a
 * caller that is that fiber's own step calls this), its end handed to `k` as an
 * Exit: the caller goes on in the step in which the step ends. A step that
 * fails or is interrupted is an Exit too; `k` decides what that does.
 * `listened`: whether somebody observes the fiber (Observed.listenedBy), as the
 * caller found it.
 */
export const runThen = <B, E2>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  listened: boolean,
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  raw: unknown,
  policy: Plan.PlanPolicy,
  k: (exit: Exit.Exit<StepResult, Failure>) => Effect.Effect<B, E2>
): Effect.Effect<B, E2> => {
  if (listened) {
    return Effect.matchCauseEffect(
      observe(step, Effect.withFiberRuntime((now) => runStep(now, environment, step, handler, raw, policy, ended))),
      { onFailure: (cause) => k(Exit.failCause(cause)), onSuccess: (result) => k(Exit.succeed(result)) }
    )
  }
  return runStep(fiber, environment, step, handler, raw, policy, k)
}

/**
 * The step on the fiber that runs it: started at once (the clock read from the
 * fiber, the input decoded as an Either, the first attempt begun in this step),
 * one step to finish, in which its end goes to `k`.
 */
const runStep = <B, E2>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  raw: unknown,
  policy: Plan.PlanPolicy,
  k: (exit: Exit.Exit<StepResult, Failure>) => Effect.Effect<B, E2>
): Effect.Effect<B, E2> => {
  const input = decodeInput(handler.input, raw)
  if (Either.isLeft(input)) return k(Exit.fail(mismatch(step, "input", input.left)))
  const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
  const startedAt = clock.unsafeCurrentTimeMillis()
  // the attempts run one after another in this fiber
  const attempts = { count: 0 }
  const finish = (output: unknown): Exit.Exit<StepResult, Failure> => {
    const codec = codecOf(handler.output)
    const valid = codec.validate(output)
    if (Either.isLeft(valid)) return Exit.fail(mismatch(step, "output", valid.left))
    return Exit.succeed(completed(step, input.right, output, codec, attempts.count, startedAt, clock.unsafeCurrentTimeMillis()))
  }
  const timeout = policy.timeoutPerStep
  if (timeout !== undefined) {
    const bounded = Deadline.bound(
      timeout,
      (duration) => `step "${step.name}" exceeded its ${duration} deadline`,
      { step: step.name, timeoutMs: Duration.toMillis(timeout) }
    )(attemptsOf(environment, step, handler, input.right, attempts))
    return Effect.matchCauseEffect(bounded, { onFailure: (cause) => k(Exit.failCause(cause)), onSuccess: (output) => k(finish(output)) })
  }
  // No deadline: the first attempt begun here (what `attemptsOf` runs first), one match for its end; a failure
  // goes where `attemptsOf` sends it (the lifecycle told, the schedule's re-runs), in an effect of its own.
  attempts.count = 1
  const first = withServicesOn(fiber, environment, handler.run(input.right, { step, attempt: 1 }))
  return Effect.matchCauseEffect(first, {
    onFailure: (cause) =>
      Effect.matchCauseEffect(afterFirstFailure(environment, step, handler, input.right, attempts, cause), {
        onFailure: (again) => k(Exit.failCause(again)),
        onSuccess: (output) => k(finish(output))
      }),
    onSuccess: (output) => k(finish(output))
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
): StepResult => new Completed(step.name, step.type, input, output, codec, attempts, startedAt, finishedAt)

/**
 * A StepResult as an object literal with a getter would make it (the same own,
 * enumerable properties in the same order: `encoded` an accessor), at a quarter
 * of the cost: a literal's getter is a new function per object, and V8 builds
 * such an object on a slow path.
 * Here every result shares one accessor, and the codec and the encoded value are
 * private fields.
 */
class Completed implements StepResult {
  declare readonly name: string
  declare readonly type: string
  declare readonly input: unknown
  declare readonly output: unknown
  declare readonly encoded: unknown
  declare readonly attempts: number
  declare readonly startedAt: number
  declare readonly finishedAt: number
  readonly #codec: Codec
  #encoded: { readonly value: unknown } | undefined = undefined
  static readonly #encodedProperty: PropertyDescriptor = {
    get(this: Completed) {
      return this.#encode()
    },
    enumerable: true,
    configurable: true
  }
  constructor(
    name: string,
    type: string,
    input: unknown,
    output: unknown,
    codec: Codec,
    attempts: number,
    startedAt: number,
    finishedAt: number
  ) {
    const self = this as { -readonly [K in keyof StepResult]: StepResult[K] }
    self.name = name
    self.type = type
    self.input = input
    self.output = output
    Object.defineProperty(this, "encoded", Completed.#encodedProperty)
    self.attempts = attempts
    self.startedAt = startedAt
    self.finishedAt = finishedAt
    this.#codec = codec
  }
  #encode(): unknown {
    if (this.#encoded === undefined) {
      const made = this.#codec.encode(this.output)
      if (Either.isLeft(made)) throw made.left
      this.#encoded = { value: made.right }
    }
    return this.#encoded.value
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
  const attempt = attemptOf(environment, step, handler, input, attempts, retries, retryable)
  return retries ? Retry.retry(attempt, { schedule: environment.schedule, while: retryable }) : attempt
}

/** One attempt: the handler run with its services, a failure it may be re-run for reported to the lifecycle. */
const attemptOf = (
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  input: unknown,
  attempts: { count: number },
  retries: boolean,
  retryable: (error: Failure) => boolean
): Effect.Effect<unknown, Failure> =>
  Effect.suspend(() => {
    const n = ++attempts.count
    const run = withServices(environment, handler.run(input, { step, attempt: n })).pipe(
      Effect.tapError((error) => retries && retryable(error) ? rejected(step, n, error) : Effect.void)
    )
    return n > 1 ? Effect.zipRight(Lifecycle.transition("VALIDATE", "EXECUTE", n, `retry step "${step.name}"`), run) : run
  })

/** VALIDATE rejected attempt `n`: EXECUTE -> VALIDATE. */
const rejected = (step: Plan.Step, n: number, error: Failure): Effect.Effect<void> =>
  Lifecycle.transition("EXECUTE", "VALIDATE", n, `step "${step.name}": ${error.code}: ${error.message}`)

/**
 * What `attemptsOf` does once its first attempt (run by the caller) ended with
 * `cause`: the first attempt's `tapError` (the lifecycle told when the failure may
 * be retried), then `Retry.retry` handed that same end (its schedule sees the
 * same failures in the same order, the next attempts are attempt 2, 3, ...).
 */
const afterFirstFailure = (
  environment: StepEnvironment,
  step: Plan.Step,
  handler: StepHandler,
  input: unknown,
  attempts: { count: number },
  cause: Cause.Cause<Failure>
): Effect.Effect<unknown, Failure> => {
  const retries = handler.retry !== false
  if (!retries) return Effect.failCause(cause)
  const retryable = retriesOn(environment)
  const attempt = attemptOf(environment, step, handler, input, attempts, retries, retryable)
  // the first run of this is the first attempt's end, replayed; the next ones are attempts
  let replayed = false
  const again = Effect.suspend(() => {
    if (replayed) return attempt
    replayed = true
    return Effect.failCause(cause)
  })
  const retried = Retry.retry(again, { schedule: environment.schedule, while: retryable })
  const failure = Cause.failureOption(cause)
  return Option.isSome(failure) && retryable(failure.value) ? Effect.zipRight(rejected(step, 1, failure.value), retried) : retried
}

/** A handler's run with the services the executor took for it (what `make` required of its caller). */
const withServices = <A>(
  environment: StepEnvironment,
  effect: Effect.Effect<A, Failure, any>
): Effect.Effect<A, Failure> => Local.provide(effect, environment.context) as Effect.Effect<A, Failure>

/**
 * `withServices` decided on `fiber` now (the fiber about to run `effect`): as it
 * is when the fiber's context holds those services already (what Local.provide
 * decides in a step of its own).
 */
const withServicesOn = <A>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  environment: StepEnvironment,
  effect: Effect.Effect<A, Failure, any>
): Effect.Effect<A, Failure> =>
  holdsAll(fiber.currentContext, environment.context) ? effect as Effect.Effect<A, Failure> : withServices(environment, effect)

/** Whether `current` has each service of `context`, the same value under the same tag (as Local.provide looks). */
const holdsAll = (current: Context.Context<never>, context: Context.Context<never>): boolean => {
  if (context.unsafeMap.size > current.unsafeMap.size) return false
  for (const [key, service] of context.unsafeMap) if (current.unsafeMap.get(key) !== service) return false
  return true
}

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
