/**
 * A run loop's settings: the services it runs with (`Runtime`, taken once), a
 * LoopConfig checked into the `Settings` a run needs (defaults applied, bad
 * values refused by name as CONFIG_INVALID_REQUEST), and the abort trigger as an
 * Effect that completes when the run must stop.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import type * as Duration from "effect/Duration"
import { ConfigurationFailure, type InferenceFailure, type ToolFailure } from "../../domain/Failure.js"
import type * as DomainMessage from "../../domain/Message.js"
import { CostTracker } from "../../services/CostTracker.js"
import * as Engine from "../../services/Engine.js"
import * as RetryPolicy from "../../services/RetryPolicy.js"
import * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Ids from "../internal/Ids.js"
import * as Observed from "../internal/Observed.js"
import * as Spans from "../internal/Spans.js"
import * as RunMessage from "./Message.js"
import { nativeTools } from "./Strategies.js"
import type {
  AbortTrigger,
  LoopConfig,
  LoopEvent,
  RequestDefaults,
  Steps,
  Strategy
} from "./Types.js"

/** The services a loop runs with, taken once. */
export interface Runtime {
  readonly engine: Engine.Service
  readonly registry: Option.Option<ToolRegistry.Service>
  readonly cost: Option.Option<CostTracker["Type"]>
  readonly model: Effect.Effect<string>
  readonly nextId: Ids.NextId
  /** The same generator's synchronous draw, when it has one: a message id without an effect. */
  readonly unsafeNextId: Ids.UnsafeNextId | undefined
  /** EventLog, Metrics and CostTracker when present, provided to every run. */
  readonly observe: Context.Context<never>
}

export const runtime: Effect.Effect<Runtime, never, Engine.Engine> = Effect.contextWith((context) => runtimeOf(context))

/** The run's services, read from `context` in one step. */
export const runtimeOf = (context: Context.Context<Engine.Engine>): Runtime => {
  const engine = Context.get(context, Engine.Engine)
  return {
    engine,
    registry: Context.getOption(context, ToolRegistry.ToolRegistry),
    cost: Context.getOption(context, CostTracker),
    model: Spans.lazyModelName(engine.modelInfo),
    nextId: Ids.nextIdOf(context as Context.Context<never>),
    unsafeNextId: Ids.unsafeNextIdOf(context as Context.Context<never>),
    observe: Observed.servicesOf(context as Context.Context<never>)
  }
}

/** A LoopConfig checked, defaults applied. */
export interface Settings<Out, E> {
  readonly strategy: Strategy<Out>
  readonly maxIterations: number
  readonly transformContext: Option.Option<(messages: ReadonlyArray<RunMessage.RunMessage>) => Effect.Effect<ReadonlyArray<RunMessage.RunMessage>, E>>
  readonly onEvent: Option.Option<(event: LoopEvent<Out>) => Effect.Effect<void>>
  readonly request: RequestDefaults
  readonly allowTools: ReadonlyArray<string> | undefined
  readonly toolConcurrency: number
  readonly toolTimeout: Duration.DurationInput | undefined
  readonly toolRetry: Schedule.Schedule<unknown, ToolFailure>
  readonly inferenceRetry: Schedule.Schedule<unknown, InferenceFailure>
  readonly stopOnToolError: boolean
  readonly tokenBudget: Option.Option<number>
  readonly costBudget: Option.Option<number>
  readonly abort: Option.Option<Effect.Effect<void>>
  /** True when the abort was an AbortSignal already aborted. */
  readonly abortedAlready: boolean
  readonly definitions: ReadonlyArray<DomainMessage.ToolDefinition>
  readonly steps: Steps
}

export const defaultMaxIterations = 20
export const defaultToolConcurrency = 4

const positiveInt = (name: string, value: number | undefined, fallback: number): Either.Either<number, string> =>
  value === undefined
    ? Either.right(fallback)
    : Number.isInteger(value) && value >= 1
    ? Either.right(value)
    : Either.left(`${name} must be a whole number of at least 1, got ${value}`)

const positive = (name: string, value: number | undefined): Either.Either<Option.Option<number>, string> =>
  value === undefined
    ? Either.right(Option.none())
    : Number.isFinite(value) && value > 0
    ? Either.right(Option.some(value))
    : Either.left(`${name} must be a finite number above 0, got ${value}`)

/** The config as the settings of a run, or a CONFIG_INVALID_REQUEST naming what is wrong. */
export const check = <Out, E>(
  rt: Runtime,
  config: LoopConfig<Out, E>
): Either.Either<Settings<Out, E>, ConfigurationFailure> => {
  const problems: Array<string> = []
  const take = <A>(e: Either.Either<A, string>, fallback: A): A => {
    if (Either.isLeft(e)) {
      problems.push(e.left)
      return fallback
    }
    return e.right
  }
  const maxIterations = take(positiveInt("maxIterations", config.maxIterations, defaultMaxIterations), 1)
  const concurrency = take(positiveInt("maxToolConcurrency", config.maxToolConcurrency, defaultToolConcurrency), 1)
  const tokenBudget = take(positive("budget.tokens", config.budget?.tokens), Option.none())
  const costBudget = take(positive("budget.cost", config.budget?.cost), Option.none())
  if (Option.isSome(costBudget) && Option.isNone(rt.cost)) {
    problems.push("budget.cost needs a CostTracker in the context; none is provided")
  }
  if (problems.length > 0) {
    return Either.left(
      ConfigurationFailure.invalidRequest(`Invalid run loop configuration: ${problems.join("; ")}`, {
        details: { problems }
      })
    )
  }
  const strategy = config.strategy ?? (nativeTools() as unknown as Strategy<Out>)
  const abort = abortEffect(config.abort)
  return Either.right({
    strategy,
    maxIterations,
    transformContext: Option.fromNullable(config.transformContext),
    onEvent: Option.fromNullable(config.onEvent),
    request: config.request ?? {},
    allowTools: config.allowTools,
    toolConcurrency: config.parallelTools === false ? 1 : concurrency,
    toolTimeout: config.toolTimeout,
    toolRetry: config.toolRetry ?? RetryPolicy.tool,
    inferenceRetry: config.inferenceRetry ?? RetryPolicy.inference,
    stopOnToolError: config.toolErrorMode === "stop",
    tokenBudget,
    costBudget,
    abort,
    abortedAlready: config.abort !== undefined && isAbortSignal(config.abort) && config.abort.aborted,
    definitions:
      strategy.toolUsePolicy === "none" || Option.isNone(rt.registry) ? [] : rt.registry.value.definitions(config.allowTools),
    steps: config.steps ?? {}
  })
}

const isAbortSignal = (trigger: AbortTrigger): trigger is AbortSignal =>
  typeof (trigger as AbortSignal).addEventListener === "function" && "aborted" in trigger

/** An abort trigger as an Effect that completes when the run must stop. */
export const abortEffect = (trigger: AbortTrigger | undefined): Option.Option<Effect.Effect<void>> => {
  if (trigger === undefined) return Option.none()
  if (!isAbortSignal(trigger)) return Option.some(trigger)
  return Option.some(
    Effect.async<void>((resume) => {
      if (trigger.aborted) {
        resume(Effect.void)
        return
      }
      const onAbort = () => resume(Effect.void)
      trigger.addEventListener("abort", onAbort, { once: true })
      return Effect.sync(() => trigger.removeEventListener("abort", onAbort))
    })
  )
}

