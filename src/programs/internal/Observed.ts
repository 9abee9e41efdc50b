/**
 * Observed engine and tool calls: what the loops record around one inference or
 * one tool execution, in one place.
 *
 * - `inference`: InferenceStart / InferenceEnd events, the `inference` latency,
 *   the tokens or an `inference_errors` count, all inside a `chat {model}` span
 *   (so both events carry that span's id, and the caller's span as their parent)
 *   whose id tool spans link to.
 * - `meteredInference` (single-shot callers: structured output, plan steps,
 *   replicas): the same, with an inference id of its own and the result alone.
 * - `toolCall`: ToolStart / ToolEnd events, the `tool` latency and the
 *   `tool_calls` / `tool_errors` / `tool_retries` counts, inside an
 *   `execute_tool {name}` span, with the call's correlation ids.
 *
 * What nobody listens to costs nothing: without an EventLog that keeps events or
 * a Metrics in the context, no event is built, no clock read and no metric
 * touched; and when no tracer exports spans either, no inference or tool span is
 * opened (their ids would stamp no event and link nothing; the caller's span
 * stays the current one). Spans are opened without a stack trace. The events are
 * built from the loop's own values, without re-validation.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Exit from "effect/Exit"
import * as Hash from "effect/Hash"
import * as Option from "effect/Option"
import type * as Tracer from "effect/Tracer"
import * as Construct from "../../domain/Construct.js"
import * as Event from "../../domain/Event.js"
import { canonicalJson } from "../../domain/Json.js"
import type * as Message from "../../domain/Message.js"
import { CorrelationContext } from "../../domain/System.js"
import { CostTracker } from "../../services/CostTracker.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import { currentCorrelation, EventLog, recordEvent, withCorrelation } from "../../services/EventLog.js"
import { IdGenerator } from "../../services/IdGenerator.js"
import { Metrics, withMetrics } from "../../services/Metrics.js"
import * as Tracing from "../../services/internal/Tracing.js"
import * as Spans from "./Spans.js"
import * as Local from "../../services/internal/Local.js"

// ---------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------

/** Whether an EventLog that keeps events, or Metrics that keep them, are in the context: whether anything records what is observed. */
export const recording: Effect.Effect<boolean> = Effect.contextWith((context: Context.Context<never>) => recordsIn(context))

/** Whether `context` holds an EventLog that keeps events, or Metrics that keep them. */
export const recordsIn = (context: Context.Context<never>): boolean => {
  // read from the context's map: no Option made (a request asks this five times)
  const log = context.unsafeMap.get(EventLog.key) as EventLog["Type"] | undefined
  if (log !== undefined && log.enabled !== false) return true
  const metrics = context.unsafeMap.get(Metrics.key) as Metrics["Type"] | undefined
  return metrics !== undefined && metrics.enabled !== false
}

/** Whether anybody observes `fiber`: events or metrics recorded, or spans exported. */
export const listenedBy = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean =>
  recordsIn(fiber.currentContext) || Tracing.exports(fiber.currentTracer)

/** Whether anybody observes: events or metrics recorded, or spans exported (one read of the fiber). */
export const listened: Effect.Effect<boolean> = Effect.withFiberRuntime((fiber) => Effect.succeed(listenedBy(fiber)))

/**
 * What an inference made in this fiber records (one read of the fiber): "observed" when somebody observes (see
 * `listened`), else "costed" when a CostTracker counts its usage, else "quiet": then `inference` is the call itself.
 */
export const observation: Effect.Effect<"observed" | "costed" | "quiet"> = Effect.withFiberRuntime((fiber) =>
  Effect.succeed(listenedBy(fiber) ? "observed" : fiber.currentContext.unsafeMap.has(CostTracker.key) ? "costed" : "quiet")
)

/**
 * `Effect.fn(name)`: the function's span opened only when somebody observes
 * (`span`), and never with a stack trace. Effect's opens a span and captures a
 * stack trace on every call, for nobody when nothing records or exports.
 */
export const fn = (name: string): typeof Effect.fnUntraced =>
  ((body: Parameters<typeof Effect.fnUntraced>[0], ...pipeables: Array<(a: unknown) => unknown>) => {
    const untraced = (Effect.fnUntraced as (...a: Array<unknown>) => (...args: Array<unknown>) => Effect.Effect<unknown, unknown, unknown>)(
      body,
      ...pipeables
    )
    return function (this: unknown, ...args: Array<unknown>) {
      return span(name)(untraced.apply(this, args))
    }
  }) as unknown as typeof Effect.fnUntraced

/**
 * A span around `effect` that only exists when somebody observes (`listened`):
 * with no events recorded and no tracer exporting, its id would stamp nothing.
 * Never with a stack trace.
 */
export const span = (name: string, options: Omit<Tracer.SpanOptions, "captureStackTrace"> = {}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => listenedBy(fiber) ? Tracing.spanIn(fiber, name, options, effect) : effect)

/** `span` whose options are built only when it is opened (nobody observing builds none). */
export const spanWith = (name: string, options: () => Omit<Tracer.SpanOptions, "captureStackTrace">) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => listenedBy(fiber) ? Tracing.spanIn(fiber, name, options(), effect) : effect)

/**
 * Provides the observability services `servicesOf` took (nothing to do when there
 * were none: providing an empty context costs a context merge per call).
 */
export const within = (observe: Context.Context<never>) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  observe.unsafeMap.size === 0 ? effect : Local.provide(effect, observe)

const noServices = Context.empty() as Context.Context<never>

/** The observability services of `context` (EventLog, Metrics, CostTracker), to provide later so methods require nothing. */
export function servicesOf(context: Context.Context<never>): Context.Context<never> {
  const map = context.unsafeMap
  const eventLog = map.get(EventLog.key) as EventLog["Type"] | undefined
  const metrics = map.get(Metrics.key) as Metrics["Type"] | undefined
  const cost = map.get(CostTracker.key) as CostTracker["Type"] | undefined
  // none of them (most loops): one empty context for all
  if (eventLog === undefined && metrics === undefined && cost === undefined) return noServices
  let observe = Context.empty() as Context.Context<never>
  if (eventLog !== undefined) observe = Context.add(observe, EventLog, eventLog) as Context.Context<never>
  if (metrics !== undefined) observe = Context.add(observe, Metrics, metrics) as Context.Context<never>
  if (cost !== undefined) observe = Context.add(observe, CostTracker, cost) as Context.Context<never>
  return observe
}

// ---------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------

/**
 * One engine call with its events, metrics and `chat {model}` span, under a fresh
 * inference id (drawn only when events are recorded or spans exported); the result alone.
 */
export const meteredInference = <E extends { readonly code: string; readonly message: string }, R>(
  model: Effect.Effect<string>,
  request: InferenceRequest,
  call: Effect.Effect<InferenceResult, E, R>
): Effect.Effect<InferenceResult, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const context = fiber.currentContext
    if (!listenedBy(fiber)) {
      // nobody records or exports: the call itself, its usage to a CostTracker if there is one
      const cost = Context.getOption(context, CostTracker)
      return Option.isNone(cost) ? call : Effect.map(unobserved({ model, request, call, inferenceId: "" }, cost), first)
    }
    // the id is read by events and span attributes only: drawn only here
    return Effect.flatMap(Context.get(context, IdGenerator).next("inf"), (inferenceId) =>
      Effect.map(inference({ model, request, call, inferenceId }), first))
  })

const first = <A>([a]: readonly [A, unknown]): A => a

export interface InferenceOptions<E, R> {
  readonly model: Effect.Effect<string>
  readonly request: InferenceRequest
  /** The engine call (a plain `infer`, or a stream folded into its result). */
  readonly call: Effect.Effect<InferenceResult, E, R>
  readonly inferenceId: string
}

/**
 * One engine call with its events, metrics and span; the result comes back with
 * the span, so the tool calls it asks for can link to it.
 */
export const inference = <E extends { readonly code: string; readonly message: string }, R>(
  options: InferenceOptions<E, R>
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.AnySpan>], E, R> =>
  Effect.withFiberRuntime((fiber) =>
    recordsIn(fiber.currentContext)
      ? Effect.flatMap(options.model, (name) =>
        recordedInference(name, options).pipe(Tracing.withSpan(Spans.inferenceSpanName(name), Spans.clientSpan)))
      : Tracing.exports(fiber.currentTracer)
      ? exported(fiber, options)
      : unobserved(options, Context.getOption(fiber.currentContext, CostTracker))
  )

/**
 * Spans exported, no events recorded: the `chat {model}` span opened in the
 * step that has the model's name (this one when it is known already), unless a
 * CostTracker records usage inside it.
 */
const exported = <E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  options: InferenceOptions<E, R>
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.AnySpan>], E, R> => {
  const { call, inferenceId, model, request } = options
  if (fiber.currentContext.unsafeMap.has(CostTracker.key)) {
    return Effect.flatMap(model, (name) =>
      Spans.inferenceInSpan(name, request, call, { inferenceId }).pipe(Tracing.withSpan(Spans.inferenceSpanName(name), Spans.clientSpan)))
  }
  const name = Spans.modelNameNow(model)
  return name !== undefined
    ? Spans.inferenceIn(fiber, name, request, call, { inferenceId })
    : Effect.flatMap(model, (name) =>
      Effect.withFiberRuntime<readonly [InferenceResult, Option.Option<Tracer.AnySpan>], E, R>((fiber) =>
        Spans.inferenceIn(fiber, name, request, call, { inferenceId })))
}

/**
 * Nobody records events or exports spans: no span is opened (its id would stamp
 * nothing and link nothing); the usage still reaches a CostTracker.
 */
const unobserved = <E, R>(options: InferenceOptions<E, R>, cost: Option.Option<CostTracker["Type"]>) =>
  Option.isNone(cost)
    ? Effect.map(options.call, (result) => [result, Option.none()] as const)
    : Effect.flatMap(options.call, (result) =>
      Effect.flatMap(options.model, (name) => Effect.as(cost.value.recordUsage(name, result.usage), [result, Option.none()] as const)))

const recordedInference = <E extends { readonly code: string; readonly message: string }, R>(
  name: string,
  options: InferenceOptions<E, R>
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.AnySpan>], E, R> =>
  Effect.gen(() => recordedInferenceSteps(name, options))

/** The steps of a recorded inference, one generator function for every call (a generator function made per call costs V8 new maps). */
function* recordedInferenceSteps<E extends { readonly code: string; readonly message: string }, R>(name: string, options: InferenceOptions<E, R>) {
  const { inferenceId, request } = options
  const started = yield* Clock.currentTimeMillis
  yield* recordEvent(
    (base) =>
      new Event.InferenceStart({
        ...base,
        layer: "inference",
        inferenceId,
        messageCount: request.messages.length,
        toolDefsCount: request.tools.length,
        schemaPresent: request.schema !== undefined,
        grammarPresent: request.grammar !== undefined,
        ...(request.temperature === undefined ? {} : { temperature: request.temperature })
      }, true)
  )
  const exit = yield* Effect.exit(Spans.inferenceInSpan(name, request, options.call, { inferenceId }))
  const durationMs = (yield* Clock.currentTimeMillis) - started
  yield* recordEvent((base) =>
    Exit.isSuccess(exit)
      ? new Event.InferenceEnd({
        ...base,
        layer: "inference",
          inferenceId,
          durationMs,
          tokensIn: exit.value[0].usage.promptTokens,
          tokensOut: exit.value[0].usage.outputTokens,
          finishReason: exit.value[0].finishReason,
          toolCallCount: exit.value[0].toolCalls.length
        }, true)
      : new Event.InferenceEnd({
        ...base,
        layer: "inference",
          inferenceId,
          durationMs,
          tokensIn: 0,
          tokensOut: 0,
          finishReason: "error",
          toolCallCount: 0,
          ...errorFields(failureOf(exit.cause))
        }, true)
  )
  yield* withMetrics((m) =>
    Effect.zipRight(
      m.recordLatency("inference", durationMs),
      Exit.isSuccess(exit) ? m.recordTokens(exit.value[0].usage) : m.increment("inference_errors")
    )
  )
  return yield* exit
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

export interface ToolCallOptions<A, E, R> {
  readonly call: Message.ToolCall
  /** 1 on the first attempt; a later attempt counts as a `tool_retries`. */
  readonly attempt: number
  /** The inference whose reply asked for the call, and its span (linked to). */
  readonly inferenceId: string
  readonly requestedBy: Option.Option<Tracer.AnySpan>
  readonly execute: Effect.Effect<A, E, R>
}

/** One tool execution with its events, metrics and span, under the call's correlation ids. */
export const toolCall = <A, E extends { readonly code: string; readonly message: string }, R>(
  options: ToolCallOptions<A, E, R>
): Effect.Effect<A, E, R> =>
  // Nobody records or exports: no span (its id would stamp nothing), and no correlation (only events and spans read it).
  Effect.withFiberRuntime<A, E, R>((fiber) =>
    recordsIn(fiber.currentContext)
      ? withCorrelation({ toolCallId: options.call.id, causedBy: options.call.id })(recordedTool(options))
      : Tracing.exports(fiber.currentTracer)
      // the correlation set and the span opened in one region
      ? Spans.toolIn(fiber, options.call, options.requestedBy, options.attempt, options.inferenceId, options.execute,
        Construct.unchecked(CorrelationContext, {
          ...fiber.getFiberRef(currentCorrelation),
          toolCallId: options.call.id,
          causedBy: options.call.id
        }))
      : options.execute
  )

/** A tool execution whose events or metrics are recorded, in its span. */
const recordedTool = <A, E extends { readonly code: string; readonly message: string }, R>(
  options: ToolCallOptions<A, E, R>
): Effect.Effect<A, E, R> => {
  const { attempt, call, inferenceId } = options
  return Effect.gen(() => recordedToolSteps(options, attempt, call, inferenceId))
}

/** The steps of a recorded tool execution, one generator function for every call (a generator function made per call costs V8 new maps). */
function* recordedToolSteps<A, E extends { readonly code: string; readonly message: string }, R>(options: ToolCallOptions<A, E, R>, attempt: number, call: ToolCallOptions<A, E, R>["call"], inferenceId: ToolCallOptions<A, E, R>["inferenceId"]) {
  if (attempt > 1) yield* withMetrics((m) => m.increment("tool_retries"))
  const started = yield* Clock.currentTimeMillis
  yield* recordEvent(
    (base) =>
      new Event.ToolStart({
        ...base,
        layer: "tool",
        toolName: call.name,
        toolCallId: call.id,
        inferenceId,
        argsHash: hashArgs(call.arguments),
        attempt
      }, true)
  )
  const exit = yield* Effect.exit(options.execute.pipe(Spans.tool(call, options.requestedBy, attempt, inferenceId)))
  const durationMs = (yield* Clock.currentTimeMillis) - started
  const failure = Exit.isFailure(exit) ? failureOf(exit.cause) : undefined
  yield* recordEvent(
    (base) =>
      new Event.ToolEnd({
        ...base,
        layer: "tool",
        toolName: call.name,
        toolCallId: call.id,
        durationMs,
        success: Exit.isSuccess(exit),
        ...errorFields(failure)
      }, true)
  )
  yield* withMetrics((m) =>
    Effect.zipRight(m.recordLatency("tool", durationMs), m.increment(Exit.isSuccess(exit) ? "tool_calls" : "tool_errors"))
  )
  return yield* exit
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/** A short stable hash of a call's arguments: effect's string hash of their canonical JSON, as 8 hex digits. */
const hashArgs = (args: Record<string, unknown>): string =>
  (Hash.string(canonicalJson(args)) >>> 0).toString(16).padStart(8, "0")

const errorFields = (failure: { readonly code: string; readonly message: string } | undefined) =>
  failure === undefined ? {} : { errorCode: failure.code, error: failure.message }

/** The first expected failure in a cause, if any. */
const failureOf = <E>(cause: Cause.Cause<E>): E | undefined => Option.getOrUndefined(Cause.failureOption(cause))
