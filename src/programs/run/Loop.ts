/**
 * The run loop itself: call the model through the strategy, act on its reply
 * (run the tools it asks for, one at a time or concurrently under a cap), feed
 * the results back, and stop for a reason that is a value: the answer, a cut-off
 * reply, the iteration cap, the budget, a failure, an abort. Every tool call the
 * model made is answered in the transcript, even the ones that were not run.
 *
 * `execute` runs once, with the settings `check` made (run/Settings.ts: the
 * services taken once, the config checked by name).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { ConfigurationFailure, type ToolFailure } from "../../domain/Failure.js"
import type * as DomainMessage from "../../domain/Message.js"
import type { ToolCallRecord } from "../../domain/System.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as Engine from "../../services/Engine.js"
import { correctionPrompt } from "../Structured.js"
import * as Observed from "../internal/Observed.js"
import * as Inference from "./Inference.js"
import * as RunMessage from "./Message.js"
import * as Tools from "./Tools.js"
import type { Runtime, Settings } from "./Settings.js"
import type { LoopAction, LoopEvent, LoopFailure, LoopResult, StopReason } from "./Types.js"

export { check, defaultMaxIterations, defaultToolConcurrency, runtime, runtimeOf } from "./Settings.js"
export type { Runtime, Settings } from "./Settings.js"

// ---------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------

interface Stop {
  readonly reason: StopReason
  readonly error: Option.Option<LoopFailure>
}

const stop = (reason: StopReason, error?: LoopFailure): Stop => ({
  reason,
  error: error === undefined ? Option.none() : Option.some(error)
})

/** What a run has done so far: read by the abort path, so it lives outside the loop's fiber. */
interface State<Out> {
  readonly messages: Array<RunMessage.RunMessage>
  /** Adds a message with a new id (see `adder`). */
  readonly add: (build: (id: string) => RunMessage.RunMessage) => Effect.Effect<void>
  readonly records: Array<ToolCallRecord>
  usage: TokenUsage.TokenUsage
  iterations: number
  content: string
  output: Option.Option<Out>
  toolsRan: boolean
  /** The calls of the round being executed, and the outcomes that are in. */
  round: Option.Option<{ readonly calls: ReadonlyArray<DomainMessage.ToolCall>; readonly done: Map<string, Tools.Outcome> }>
}

/**
 * One run over `input`: streamed (text deltas emitted) when `streaming`. Stops
 * are values in the result; the error channel has only the transform's failure
 * and a malformed input message.
 */
export const execute = <Out, E>(
  rt: Runtime,
  settings: Settings<Out, E>,
  input: ReadonlyArray<RunMessage.Input>,
  streaming: boolean
): Effect.Effect<LoopResult<Out>, E | ConfigurationFailure> =>
  Effect.gen(() => executeSteps(rt, settings, input, streaming)).pipe(Observed.within(rt.observe))

/** The steps of `execute`: one generator function for every call (a generator function made per call costs V8 new maps). */
function* executeSteps<Out, E>(rt: Runtime, settings: Settings<Out, E>, input: ReadonlyArray<RunMessage.Input>, streaming: boolean) {
  const messages = yield* takeInput(rt, input)
  const state: State<Out> = {
    messages,
    add: adder(rt, messages),
    records: [],
    usage: TokenUsage.empty,
    iterations: 0,
    content: "",
    output: Option.none(),
    toolsRan: false,
    round: Option.none()
  }
  const startCost = Option.isSome(rt.cost) ? yield* rt.cost.value.totalCost : 0
  const spentCost = Option.isSome(rt.cost) ? Effect.map(rt.cost.value.totalCost, (t) => t - startCost) : Effect.succeed(0)
  const emit = (event: LoopEvent<Out>) => (Option.isSome(settings.onEvent) ? settings.onEvent.value(event) : Effect.void)

  const ended: Stop = settings.abortedAlready
    ? stop("aborted")
    : Option.isSome(settings.abort)
    ? yield* Effect.raceFirst(loop(rt, settings, state, emit, spentCost, streaming), Effect.as(settings.abort.value, stop("aborted")))
    // no abort to race: the loop's steps are this generator's own (delegated, not an effect of their own: two operations less)
    : yield* loopSteps(rt, settings, state, emit, spentCost, streaming)
  if (ended.reason === "aborted") yield* answerRound(state, "the run was aborted")

  const result: LoopResult<Out> = {
    messages: state.messages.slice(),
    output: state.output,
    content: state.content,
    stopReason: ended.reason,
    iterations: state.iterations,
    usage: state.usage,
    cost: yield* spentCost,
    toolCalls: state.records.slice(),
    error: ended.error
  }
  yield* emit({ _tag: "LoopFinished", result })
  return result
}

/**
 * The input as run messages: a run message is checked, a domain message gets an
 * id from the run's IdGenerator (as every message the run adds: see `adder`).
 * With ids drawn at once, a value: nothing to run.
 */
const takeInput = (
  rt: Runtime,
  input: ReadonlyArray<RunMessage.Input>
): Effect.Effect<Array<RunMessage.RunMessage>, ConfigurationFailure> => {
  const draw = rt.unsafeNextId
  const take = (message: RunMessage.Input, i: number, id: () => string): Either.Either<RunMessage.RunMessage, string> =>
    RunMessage.isRunMessage(message) ? RunMessage.checkInput(message, i) : Either.right(RunMessage.buildFromDomain(id(), message))
  const invalid = (reason: string) => ConfigurationFailure.invalidRequest(`Invalid run loop input: ${reason}`)
  if (draw !== undefined) {
    const out: Array<RunMessage.RunMessage> = []
    for (let i = 0; i < input.length; i++) {
      const checked = take(input[i]!, i, () => draw("msg"))
      if (Either.isLeft(checked)) return Effect.fail(invalid(checked.left))
      out.push(checked.right)
    }
    return Effect.succeed(out)
  }
  // ids drawn by effect, one message after another
  const from = (i: number, out: Array<RunMessage.RunMessage>): Effect.Effect<Array<RunMessage.RunMessage>, ConfigurationFailure> => {
    if (i === input.length) return Effect.succeed(out)
    const message = input[i]!
    const next = (id: string) => {
      const checked = take(message, i, () => id)
      if (Either.isLeft(checked)) return Effect.fail(invalid(checked.left))
      out.push(checked.right)
      return from(i + 1, out)
    }
    return RunMessage.isRunMessage(message) ? next("") : Effect.flatMap(rt.nextId("msg"), next)
  }
  return Effect.suspend(() => from(0, []))
}

/**
 * Adds a message with a new id to the transcript: drawn at once when the run's
 * IdGenerator can (see `IdGenerator.Service.unsafeNext`), else by its effect.
 */
const adder = (rt: Runtime, messages: Array<RunMessage.RunMessage>) => {
  const draw = rt.unsafeNextId
  return (build: (id: string) => RunMessage.RunMessage): Effect.Effect<void> => {
    if (draw === undefined) return Effect.map(rt.nextId("msg"), (id) => void messages.push(build(id)))
    messages.push(build(draw("msg")))
    return Effect.void
  }
}

/** Whether `spent` passed `limit` (strictly: spending exactly the budget is within it). */
const over = (spent: number, limit: Option.Option<number>) => Option.isSome(limit) && spent > limit.value
/** Whether no further model call fits: the budget is reached. */
const reached = (spent: number, limit: Option.Option<number>) => Option.isSome(limit) && spent >= limit.value

/** Whether an answer came in past the budget (it is kept, and flagged `finish_over_budget`). */
const overBudget = <Out, E>(settings: Settings<Out, E>, tokens: number, cost: number): boolean =>
  over(tokens, settings.tokenBudget) || over(cost, settings.costBudget)

/** Why the run cannot act on a reply that asks for more, if it cannot: the stop reason and what pending calls are told. */
const limitReached = <Out, E>(
  settings: Settings<Out, E>,
  iterations: number,
  tokens: number,
  cost: number
): Option.Option<readonly [StopReason, string]> =>
  iterations >= settings.maxIterations
    ? Option.some(["max_iterations", `iteration limit (${settings.maxIterations} model calls) reached`])
    : reached(tokens, settings.tokenBudget)
    ? Option.some(["budget_exhausted", `token budget (${Option.getOrElse(settings.tokenBudget, () => 0)}) exhausted`])
    : reached(cost, settings.costBudget)
    ? Option.some(["budget_exhausted", `cost budget (${Option.getOrElse(settings.costBudget, () => 0)}) exhausted`])
    : Option.none()

const loop = <Out, E>(
  rt: Runtime,
  settings: Settings<Out, E>,
  state: State<Out>,
  emit: (event: LoopEvent<Out>) => Effect.Effect<void>,
  spentCost: Effect.Effect<number>,
  streaming: boolean
): Effect.Effect<Stop, E> =>
  Effect.gen(() => loopSteps(rt, settings, state, emit, spentCost, streaming))

/** The steps of `loop`, one generator function for every call (see `executeSteps`). */
function* loopSteps<Out, E>(rt: Runtime, settings: Settings<Out, E>, state: State<Out>, emit: (event: LoopEvent<Out>) => Effect.Effect<void>, spentCost: Effect.Effect<number>, streaming: boolean) {
  const { strategy } = settings
  // with nobody listening to the run's events, and no CostTracker, there is nothing to emit or read
  const listening = Option.isSome(settings.onEvent)
  const costed = Option.isSome(rt.cost)
  const last: Inference.LastCall = { inferenceId: "", span: Option.none() }
  let iteration = 0
  const observation = yield* Observed.observation
  const inferenceEnv: Inference.InferenceEnv = {
    engine: rt.engine,
    observed: observation === "observed",
    // a model step may wrap the call in other services: then each call is checked as it runs
    quiet: observation === "quiet" && settings.steps.model === undefined,
    model: rt.model,
    nextId: rt.nextId,
    inferenceRetry: settings.inferenceRetry,
    onDelta: streaming ? Option.some((text: string) => emit({ _tag: "TextDelta", text, iteration })) : Option.none()
  }
  let index = 0
  const { model: modelStep, request: rewrite } = settings.steps
  const env = {
    infer: (request: Engine.InferenceRequest) => {
      const key = { iteration, index: index++ }
      const call = Inference.infer(inferenceEnv, last, rewrite === undefined ? request : rewrite(key, request))
      return modelStep === undefined ? call : modelStep(key, call)
    }
  }
  const toolEnv: Tools.ToolEnv = {
    registry: rt.registry,
    allowTools: settings.allowTools,
    toolTimeout: settings.toolTimeout,
    toolRetry: settings.toolRetry
  }
  const { add } = state

  while (true) {
    iteration = state.iterations
    index = 0
    if (listening) yield* emit({ _tag: "IterationStarted", iteration })
    const context = Option.isSome(settings.transformContext)
      ? yield* settings.transformContext.value(state.messages)
      : state.messages
    const prepared = yield* either(
      strategy.prepareRequest({ messages: RunMessage.toEngine(context), tools: settings.definitions, defaults: settings.request })
    )
    if (Either.isLeft(prepared)) return stop("error", prepared.left)
    const called = yield* Effect.either(strategy.callModel(env, prepared.right))
    if (Either.isLeft(called)) return stop("error", called.left)
    const response = called.right
    state.iterations++
    state.usage = TokenUsage.combine(state.usage, response.usage)
    state.content = response.content

    const parsed = yield* either(strategy.parseResponse(response))
    if (Either.isLeft(parsed)) {
      if (listening) yield* emit({ _tag: "ModelResponded", result: response, action: Option.none(), iteration })
      yield* add((id) => RunMessage.build(id, "assistant", response.content))
      if (response.finishReason === "length") return stop("length")
      const failure = parsed.left
      if (failure._tag === "ConstraintFailure" && failure.retryable && state.iterations < settings.maxIterations) {
        yield* add((id) => RunMessage.build(id, "user", correctionPrompt(failure), { metadata: { correction: failure.code } }))
        continue
      }
      return stop("error", failure)
    }
    const action = parsed.right
    yield* add((id) =>
      RunMessage.build(id, "assistant", response.content, action.thought === "" ? {} : { metadata: { thought: action.thought } }, {
        toolCalls: action.toolCalls
      })
    )
    if (listening) {
      yield* emit({ _tag: "ModelResponded", result: response, action: Option.some(action), iteration })
      for (const call of action.toolCalls) yield* emit({ _tag: "ToolCallRequested", call, iteration })
    }

    const tokens = state.usage.totalTokens
    if (!(yield* strategy.shouldContinue(action, iteration))) {
      yield* answerAll(state, action.toolCalls, "the strategy ended the run")
      if (action.stopReason !== undefined) return stop(action.stopReason)
      if (
        strategy.toolUsePolicy === "required" && !state.toolsRan && action.toolCalls.length === 0 &&
        state.iterations < settings.maxIterations
      ) {
        const names = settings.definitions.map((d) => d.name).join(", ")
        yield* add((id) => RunMessage.build(id, "user", `Use one of the tools (${names}) before answering.`, { metadata: { reminder: "toolUsePolicy" } }))
        continue
      }
      state.output = action.result
      return overBudget(settings, tokens, costed ? yield* spentCost : 0) ? stop("finish_over_budget") : stop("finish")
    }

    const limit = limitReached(settings, state.iterations, tokens, costed ? yield* spentCost : 0)
    if (Option.isSome(limit)) {
      yield* answerAll(state, action.toolCalls, limit.value[1])
      return stop(limit.value[0])
    }
    if (action.toolCalls.length === 0) continue

    const failed = yield* runRound(settings, toolEnv, state, action, last, emit, iteration)
    if (Option.isSome(failed)) return stop("error", failed.value)
  }
}

/**
 * `Effect.either`, with nothing to run for a value that is already a success
 * (a strategy's `Effect.succeed`: what the native-tools strategy prepares and
 * parses): yielded in a generator, a success is read in the same step.
 */
const either = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<Either.Either<A, E>, never, R> =>
  Exit.isExit(effect) && Exit.isSuccess(effect)
    ? Exit.succeed(Either.right(effect.value as A) as Either.Either<A, E>)
    : Effect.either(effect)

/** Runs the calls of one reply; with `stopOnToolError`, the first failure interrupts the rest and is returned. */
const runRound = <Out, E>(
  settings: Settings<Out, E>,
  toolEnv: Tools.ToolEnv,
  state: State<Out>,
  action: LoopAction<Out>,
  last: Inference.LastCall,
  emit: (event: LoopEvent<Out>) => Effect.Effect<void>,
  iteration: number
): Effect.Effect<Option.Option<ToolFailure>> =>
  Effect.gen(() => runRoundSteps(settings, toolEnv, state, action, last, emit, iteration))

/** The steps of `runRound`, one generator function for every call (see `executeSteps`). */
function* runRoundSteps<Out, E>(settings: Settings<Out, E>, toolEnv: Tools.ToolEnv, state: State<Out>, action: LoopAction<Out>, last: Inference.LastCall, emit: (event: LoopEvent<Out>) => Effect.Effect<void>, iteration: number) {
  const done = new Map<string, Tools.Outcome>()
  state.round = Option.some({ calls: action.toolCalls, done })
  state.toolsRan = true
  const { inferenceId, span } = last
  const toolStep = settings.steps.tool
  const runCall = (call: DomainMessage.ToolCall, index: number) =>
    Effect.flatMap(
      toolStep === undefined ? Tools.run(toolEnv, call, inferenceId, span) : toolStep({ iteration, call, index }, Tools.run(toolEnv, call, inferenceId, span)),
      (o): Effect.Effect<void, ToolFailure> => {
        done.set(call.id, o)
        const failed = settings.stopOnToolError && Option.isSome(o.failure) ? Effect.fail(o.failure.value) : Effect.void
        return Option.isSome(settings.onEvent)
          ? Effect.zipRight(emit({ _tag: "ToolResultReady", record: o.record, iteration }), failed)
          : failed
      }
    )
  const calls = action.toolCalls
  const outcome = yield* Effect.either(
    // one call runs in this fiber, as it is (no fiber pool, no forEach)
    calls.length === 1
      ? runCall(calls[0]!, 0)
      : Effect.forEach(calls, runCall, { concurrency: settings.toolConcurrency, discard: true })
  )
  yield* answerRound(state, "a sibling call failed and the run stopped")
  return Either.isLeft(outcome) ? Option.some(outcome.left) : Option.none()
}

/** Closes the round in flight: results that are in, in call order; the others answered "not executed". */
const answerRound = <Out>(state: State<Out>, reason: string): Effect.Effect<void> =>
  Effect.gen(() => answerRoundSteps(state, reason))

/** The steps of `answerRound`, one generator function for every call (see `executeSteps`). */
function* answerRoundSteps<Out>(state: State<Out>, reason: string) {
  if (Option.isNone(state.round)) return
  const { calls, done } = state.round.value
  state.round = Option.none()
  for (const call of calls) {
    const o = done.get(call.id)
    if (o !== undefined) {
      state.records.push(o.record)
      yield* state.add(toolMessage(o.result))
    } else {
      yield* state.add(toolMessage(Tools.notExecuted(call, reason).result))
    }
  }
}

/** Answers calls that will not run, so every call in the transcript has its result. */
const answerAll = <Out>(
  state: State<Out>,
  calls: ReadonlyArray<DomainMessage.ToolCall>,
  reason: string
): Effect.Effect<void> =>
  // most answers carry no calls: nothing to run
  calls.length === 0
    ? Effect.void
    : Effect.forEach(calls, (call) => state.add(toolMessage(Tools.notExecuted(call, reason).result)), { discard: true })

const toolMessage = (result: RunMessage.RunToolResult) => (id: string): RunMessage.RunMessage =>
  RunMessage.build(id, "tool", result.content, {}, { toolResult: result })
