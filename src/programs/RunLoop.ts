/**
 * RunLoop: the general agent loop, with the model interaction as a strategy.
 *
 * A run takes a transcript and a configuration and repeats: transform the
 * context, let the strategy prepare a request and call the model, parse the reply
 * into an action (tool calls, a thought, a final answer), run the tools and feed
 * their results back, until the strategy says the run is done or a limit stops
 * it. Built-in strategies: `nativeTools` (the engine's own tool calling, what
 * AgentLoop does), `react` (a grammar-constrained JSON action per reply) and
 * `structured(schema)` (one typed answer).
 *
 * Why a run stopped is a value (`finish`, `length`, `max_iterations`, `error`,
 * `aborted`, `budget_exhausted`, `finish_over_budget`), and so is the failure
 * behind an `error` (a context overflow: `isContextOverflow`). An abort interrupts
 * the model call and the tools in flight; every tool call the model made is
 * answered in the transcript, the ones not run with "not executed".
 *
 * The transcript is a list of RunMessages: ids, metadata, raw tool results, and
 * an `internal` role for notes that are kept and never sent to an engine.
 *
 * Services: Engine is required; ToolRegistry, CostTracker (needed for a cost
 * budget), EventLog, Metrics and IdGenerator are used when present, taken once
 * when the loop is made.
 *
 * Durable runs: a run does two things outside itself, call the model and run a
 * tool, and `steps` wraps each one with its structural key (iteration and call
 * index; iteration and tool call). A durable layer journals a step's result
 * there and, replaying a run, returns it instead of calling again: `runDurable`
 * does so when the Durable service is in the context (`durableSteps` are its
 * steps; see run/Durable.ts), and runs as `run` when it is not.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import { isFailure } from "../domain/Failure.js"
import type { ConfigurationFailure, InferenceFailure } from "../domain/Failure.js"
import { Durable } from "../services/Durable.js"
import type * as Engine from "../services/Engine.js"
import { currentCorrelation, withCorrelation } from "../services/EventLog.js"
import { ToolRegistry } from "../services/ToolRegistry.js"
import * as DurableLoop from "./run/Durable.js"
import * as Observed from "./internal/Observed.js"
import * as Loop from "./run/Loop.js"
import type { Input } from "./run/Message.js"
import { LoopFinished } from "./run/Types.js"
import type { LoopConfig, LoopEvent, LoopResult, StopReason } from "./run/Types.js"

export * as RunMessage from "./run/Message.js"
export { nativeTools, react, ReactAction, reactGrammar, reactInstructions, reactSchema, structured } from "./run/Strategies.js"
export type { NativeToolsOptions } from "./run/Strategies.js"
export { LoopFinished, StopReasons } from "./run/Types.js"
export type {
  AbortTrigger,
  Budget,
  LoopAction,
  LoopConfig,
  LoopEnv,
  LoopEvent,
  LoopFailure,
  LoopResult,
  ModelStepKey,
  PrepareInput,
  RequestDefaults,
  Steps,
  StopReason,
  Strategy,
  StrategyError,
  ToolOutcome,
  ToolStepKey,
  ToolUsePolicy
} from "./run/Types.js"
export { defaultMaxIterations, defaultToolConcurrency } from "./run/Loop.js"
export { durableSteps, ToolOutcomeSchema } from "./run/Durable.js"
export type { DurableError, DurableOptions } from "./run/Durable.js"

/** Whether a failure is the engine's context window overflowing (INFERENCE_CONTEXT_EXCEEDED). */
export const isContextOverflow = (error: unknown): error is InferenceFailure =>
  isFailure(error) && error.code === "INFERENCE_CONTEXT_EXCEEDED"

/** What a run can fail with: a bad configuration or input, a loop run a second time (LoopFinished), or the transform's own failure. */
export type RunLoopError<E> = ConfigurationFailure | LoopFinished | E

/** A loop made once, run once. */
export interface RunLoop<Out, E = never> {
  /** Runs to a stop reason; a second call, or a call while running, fails (the loop has finished). */
  readonly run: (messages: ReadonlyArray<Input>) => Effect.Effect<LoopResult<Out>, RunLoopError<E>>
  /** The run as a stream of its events, ending with `LoopFinished`. */
  readonly runStream: (messages: ReadonlyArray<Input>) => Stream.Stream<LoopEvent<Out>, RunLoopError<E>>
  /** Whether the loop has run to a stop. */
  readonly finished: Effect.Effect<boolean>
}

type Phase = { readonly _tag: "Idle" } | { readonly _tag: "Running" } | { readonly _tag: "Finished"; readonly stopReason: StopReason }

/**
 * Builds a loop: the services are taken from the context now, the configuration
 * is checked now (a bad value is a CONFIG_INVALID_REQUEST naming it).
 */
export const make: <Out = string, E = never>(
  config?: LoopConfig<Out, E>
) => Effect.Effect<RunLoop<Out, E>, ConfigurationFailure, Engine.Engine> = Observed.fn("RunLoop.make")(function* <
  Out = string,
  E = never
>(config: LoopConfig<Out, E> = {}) {
  const rt = yield* Loop.runtime
  const settings = yield* Either.match(Loop.check(rt, config), { onLeft: Effect.fail, onRight: Effect.succeed })
  const phase = yield* Ref.make<Phase>({ _tag: "Idle" })

  const begin = Effect.flatten(
    Ref.modify(phase, (p): readonly [Effect.Effect<void, LoopFinished>, Phase] =>
      p._tag === "Idle"
        ? [Effect.void, { _tag: "Running" }]
        : [
          Effect.fail(
            p._tag === "Running"
              ? new LoopFinished({ phase: "running", message: "This run loop is already running; make a new loop for another run" })
              : new LoopFinished({
                phase: "finished",
                stopReason: p.stopReason,
                message: `This run loop has finished (stop reason ${p.stopReason}); make a new loop to run again`
              })
          ),
          p
        ]
    )
  )

  const once = (messages: ReadonlyArray<Input>, emit: (e: LoopEvent<Out>) => Effect.Effect<void>, streaming: boolean) =>
    Effect.zipRight(
      begin,
      withRequestScope(
        Loop.execute(rt, withEmit(settings, emit), messages, streaming).pipe(
          Effect.onExit((exit) =>
            Ref.set<Phase>(
              phase,
              exit._tag === "Success" ? { _tag: "Finished", stopReason: exit.value.stopReason } : { _tag: "Idle" }
            )
          )
        ),
        rt
      )
    )

  return {
    run: (messages) => once(messages, noEmit, false).pipe(Observed.span("RunLoop.run")),
    runStream: (messages) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          const mailbox = yield* Mailbox.make<LoopEvent<Out>, RunLoopError<E>>()
          yield* once(messages, (e) => Effect.asVoid(mailbox.offer(e)), true).pipe(
            Observed.span("RunLoop.runStream"),
            Mailbox.into(mailbox),
            Effect.forkScoped
          )
          return Mailbox.toStream(mailbox)
        })
      ),
    finished: Effect.map(Ref.get(phase), (p) => p._tag === "Finished")
  } satisfies RunLoop<Out, E>
})

/** Runs `messages` once with `config`: `make` then `run`. */
export const run = <Out = string, E = never>(
  messages: ReadonlyArray<Input>,
  config: LoopConfig<Out, E> = {}
): Effect.Effect<LoopResult<Out>, ConfigurationFailure | E, Engine.Engine> =>
  Effect.flatMap(make(config), (loop) => onlyRun(loop.run(messages)))

/** Runs `messages` once with `config`, as a stream of events ending with `LoopFinished`. */
export const runStream = <Out = string, E = never>(
  messages: ReadonlyArray<Input>,
  config: LoopConfig<Out, E> = {}
): Stream.Stream<LoopEvent<Out>, ConfigurationFailure | E, Engine.Engine> =>
  Stream.unwrap(Effect.map(make(config), (loop) => Stream.catchAll(loop.runStream(messages), (e) => Stream.fromEffect(onlyRun(Effect.fail(e))))))

/**
 * Runs `messages` once with `config`; inside a durable run (the Durable service in
 * the context) every model call and tool call is a journaled step keyed under
 * `durable.key`, so a run re-driven after a crash calls the engine and the tools
 * only for what its journal does not have. A journal failure ends it (typed).
 * Outside a durable run it is `run`.
 */
export const runDurable = <Out = string, E = never>(
  messages: ReadonlyArray<Input>,
  config: LoopConfig<Out, E> & { readonly durable?: DurableLoop.DurableOptions | undefined } = {}
): Effect.Effect<LoopResult<Out>, ConfigurationFailure | E | DurableLoop.DurableError, Engine.Engine> =>
  Effect.gen(function* () {
    const durable = yield* Effect.serviceOption(Durable)
    if (Option.isNone(durable)) return yield* run(messages, config)
    const registry = yield* Effect.serviceOption(ToolRegistry)
    const steps = DurableLoop.durableSteps(durable.value, config.durable, registry)
    return yield* DurableLoop.surfaceJournalFailures(run(messages, { ...config, steps }))
  })

/**
 * `runDurable` as a stream of the run's events, ending with `LoopFinished`. Inside
 * a durable run the model and tool calls are journaled steps: a stream re-driven
 * after a crash emits the loop's events again from the journal (iterations, the
 * model's replies, tool calls and results) and ends with the same result, but a
 * replayed model call streams no text deltas (they went to the process that made
 * the call). Outside a durable run it is `runStream`.
 */
export const runDurableStream = <Out = string, E = never>(
  messages: ReadonlyArray<Input>,
  config: LoopConfig<Out, E> & { readonly durable?: DurableLoop.DurableOptions | undefined } = {}
): Stream.Stream<LoopEvent<Out>, ConfigurationFailure | E | DurableLoop.DurableError, Engine.Engine> =>
  Stream.unwrap(
    Effect.gen(function* () {
      const durable = yield* Effect.serviceOption(Durable)
      if (Option.isNone(durable)) return runStream(messages, config)
      const registry = yield* Effect.serviceOption(ToolRegistry)
      const steps = DurableLoop.durableSteps(durable.value, config.durable, registry)
      return DurableLoop.surfaceJournalFailuresStream(runStream(messages, { ...config, steps }))
    })
  )

const noEmit = () => Effect.void

/** A loop made for one run cannot be finished already: LoopFinished there would be a defect. */
const onlyRun = <A, E>(effect: Effect.Effect<A, E | LoopFinished>): Effect.Effect<A, Exclude<E, LoopFinished>> =>
  Effect.catchIf(effect, (e): e is LoopFinished => e instanceof LoopFinished, Effect.die) as Effect.Effect<A, Exclude<E, LoopFinished>>

/** The caller's onEvent, then the stream's. */
const withEmit = <Out, E>(settings: Loop.Settings<Out, E>, emit: (e: LoopEvent<Out>) => Effect.Effect<void>): Loop.Settings<Out, E> =>
  emit === noEmit
    ? settings
    : {
      ...settings,
      onEvent: Option.some(
        Option.match(settings.onEvent, {
          onNone: () => emit,
          onSome: (own) => (e: LoopEvent<Out>) => Effect.zipRight(own(e), emit(e))
        })
      )
    }

/** A request id for the run's events when the caller has none and somebody observes (only events and spans read it). */
const withRequestScope = <A, E>(effect: Effect.Effect<A, E>, rt: Loop.Runtime): Effect.Effect<A, E> =>
  Effect.flatMap(currentCorrelation, (correlation) =>
    correlation.requestId === "unscoped"
      ? Effect.flatMap(Observed.listened, (observed) =>
        observed ? Effect.flatMap(rt.nextId("req"), (requestId) => withCorrelation({ requestId })(effect)) : effect)
      : effect)
