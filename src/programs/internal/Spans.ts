/**
 * What the loops put on their spans, in one place.
 *
 * Every span carries the request's correlation ids (`pagantic.request_id`,
 * `pagantic.session_id`, `pagantic.trace_id`, `pagantic.step_name`,
 * `pagantic.tool_call_id`), read from the fiber's correlation context. Inference
 * and tool spans follow OpenTelemetry's gen_ai semantic conventions: an inference
 * is a `chat {model}` span (operation `chat`, request parameters, response model,
 * usage, finish reasons) and a tool execution an `execute_tool {name}` span that
 * links to the inference span whose reply asked for it. Lifecycle states are spans
 * too (see Lifecycle.ts): `lifecycle {STATE}`, children of the request span.
 *
 * Spans are opened without capturing a stack trace, and with Effect's native
 * tracer (no tracer installed: spans that go nowhere) nothing is annotated. The
 * inference and tool spans stay while events are recorded, for their ids (events
 * carry them); with neither events nor an exporting tracer they are not opened
 * (internal/Observed).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Effectable from "effect/Effectable"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import type { ToolCall } from "../../domain/Message.js"
import type { CorrelationContext } from "../../domain/System.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import { CostTracker } from "../../services/CostTracker.js"
import { currentCorrelation } from "../../services/EventLog.js"
import * as Tracing from "../../services/internal/Tracing.js"

// ---------------------------------------------------------------------------
// Attribute names
// ---------------------------------------------------------------------------

/** OpenTelemetry gen_ai semantic-convention attribute names used by the loops. */
export const GenAi = {
  operationName: "gen_ai.operation.name",
  requestModel: "gen_ai.request.model",
  requestTemperature: "gen_ai.request.temperature",
  requestMaxTokens: "gen_ai.request.max_tokens",
  requestTopP: "gen_ai.request.top_p",
  requestSeed: "gen_ai.request.seed",
  responseModel: "gen_ai.response.model",
  responseFinishReasons: "gen_ai.response.finish_reasons",
  usageInputTokens: "gen_ai.usage.input_tokens",
  usageOutputTokens: "gen_ai.usage.output_tokens",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  toolType: "gen_ai.tool.type"
} as const

/** pagantic's own attribute names: the request's correlation ids and a few more. */
export const Pagantic = {
  requestId: "pagantic.request_id",
  sessionId: "pagantic.session_id",
  traceId: "pagantic.trace_id",
  stepName: "pagantic.step_name",
  stepType: "pagantic.step_type",
  toolCallId: "pagantic.tool_call_id",
  causedBy: "pagantic.caused_by",
  inferenceId: "pagantic.inference_id",
  toolCallIds: "pagantic.tool_call_ids",
  attempt: "pagantic.attempt",
  mode: "pagantic.mode",
  lifecycleState: "pagantic.lifecycle.state",
  lifecycleFrom: "pagantic.lifecycle.from",
  lifecycleReason: "pagantic.lifecycle.reason",
  errorCode: "pagantic.error.code"
} as const

// ---------------------------------------------------------------------------
// Who listens
// ---------------------------------------------------------------------------

/** Whether the current tracer sends spans somewhere (any tracer but Effect's native one). */
export const exporting: Effect.Effect<boolean> = Tracing.exporting

/** The options of an inference span: kind client, no stack trace captured. */
export const clientSpan: Tracer.SpanOptions = { kind: "client", captureStackTrace: false }

// ---------------------------------------------------------------------------
// Correlation
// ---------------------------------------------------------------------------

/** The correlation ids of the running fiber as span attributes. */
export const correlationAttributes: Effect.Effect<Record<string, string>> = Effect.map(
  FiberRef.get(currentCorrelation),
  (c) => correlationOf(c)
)

/** The correlation ids put on `span` as attributes, in `correlationOf`'s order. */
const putCorrelation = (span: Tracer.Span, c: CorrelationContext): void => {
  span.attribute(Pagantic.requestId, c.requestId)
  if (c.sessionId !== undefined) span.attribute(Pagantic.sessionId, c.sessionId)
  if (c.traceId !== undefined) span.attribute(Pagantic.traceId, c.traceId)
  if (c.stepName !== undefined) span.attribute(Pagantic.stepName, c.stepName)
  if (c.toolCallId !== undefined) span.attribute(Pagantic.toolCallId, c.toolCallId)
  if (c.causedBy !== undefined) span.attribute(Pagantic.causedBy, c.causedBy)
}

/** The correlation ids as span attributes. */
const correlationOf = (c: CorrelationContext): Record<string, string> => {
  const out: Record<string, string> = { [Pagantic.requestId]: c.requestId }
  if (c.sessionId !== undefined) out[Pagantic.sessionId] = c.sessionId
  if (c.traceId !== undefined) out[Pagantic.traceId] = c.traceId
  if (c.stepName !== undefined) out[Pagantic.stepName] = c.stepName
  if (c.toolCallId !== undefined) out[Pagantic.toolCallId] = c.toolCallId
  if (c.causedBy !== undefined) out[Pagantic.causedBy] = c.causedBy
  return out
}

// ---------------------------------------------------------------------------
// Trace
// ---------------------------------------------------------------------------

const W3C_TRACE_ID = /^[0-9a-f]{32}$/

/** 32 hex digits from `text`, the same for the same text (cyrb128: well mixed, not cryptographic). */
const hex128 = (text: string): string => {
  let h1 = 1779033703, h2 = 3144134277, h3 = 1013904242, h4 = 2773480762
  for (let i = 0; i < text.length; i++) {
    const k = text.charCodeAt(i)
    h1 = h2 ^ Math.imul(h1 ^ k, 597399067)
    h2 = h3 ^ Math.imul(h2 ^ k, 2869860233)
    h3 = h4 ^ Math.imul(h3 ^ k, 951274213)
    h4 = h1 ^ Math.imul(h4 ^ k, 2716044179)
  }
  h1 = Math.imul(h3 ^ (h1 >>> 18), 597399067)
  h2 = Math.imul(h4 ^ (h2 >>> 22), 2869860233)
  h3 = Math.imul(h1 ^ (h3 >>> 17), 951274213)
  h4 = Math.imul(h2 ^ (h4 >>> 19), 2716044179)
  h1 ^= h2 ^ h3 ^ h4
  h2 ^= h1
  h3 ^= h1
  h4 ^= h1
  return [h1, h2, h3, h4].map((h) => (h >>> 0).toString(16).padStart(8, "0")).join("")
}

/**
 * The OpenTelemetry trace id of a request's trace id: itself when it is one (32
 * lowercase hex digits, not all zero; case is ignored), else 32 hex digits derived
 * from it, the same for the same id.
 */
export const w3cTraceId = (traceId: string): string => {
  const lower = traceId.toLowerCase()
  if (W3C_TRACE_ID.test(lower) && !/^0+$/.test(lower)) return lower
  const derived = hex128(traceId)
  return /^0+$/.test(derived) ? "1".padStart(32, "0") : derived
}

/**
 * Runs `effect` in the trace a request's trace id names (see `w3cTraceId`): under
 * the current span when it is already in that trace (a traceparent the HTTP
 * server read), else under a remote parent span of that trace, as a caller in
 * another process would be.
 */
export const inTrace =
  (traceId: string) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.option(Effect.currentParentSpan), (parent) => {
      const trace = w3cTraceId(traceId)
      if (Option.isSome(parent) && parent.value.traceId === trace) return effect
      const remote = Tracer.externalSpan({ traceId: trace, spanId: hex128(`span:${traceId}`).slice(0, 16), sampled: true })
      return Effect.withParentSpan(effect, remote)
    })

/**
 * Whether attributes put on `span` go anywhere, as `Effect.annotateCurrentSpan`
 * decides: a span (not an external one) that does not disable propagation.
 */
const annotatable = (span: Tracer.AnySpan | undefined): span is Tracer.Span =>
  span !== undefined && span._tag === "Span" && !Context.get(span.context, Tracer.DisablePropagation)

/**
 * The span the fiber runs in, if any (`Effect.currentSpan` without its failure: an effect that fails with a
 * `NoSuchElementException`, an Error whose stack is captured, each time no span is there).
 */
export const currentSpanOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Tracer.AnySpan | undefined =>
  fiber.currentContext.unsafeMap.get(Tracer.ParentSpan.key) as Tracer.AnySpan | undefined

/** Puts the correlation ids (and `extra`) on the current span, when the tracer exports spans. */
export const annotate = (extra: Record<string, unknown> = {}): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const span = currentSpanOf(fiber)
    if (Tracing.exports(fiber.currentTracer) && annotatable(span)) {
      putCorrelation(span, fiber.getFiberRef(currentCorrelation))
      for (const key in extra) span.attribute(key, extra[key])
    }
    return Effect.void
  })

/** The span the fiber runs in (`Effect.currentSpan`) and whether the tracer exports, read in one step. */
const spanAndExporting: Effect.Effect<readonly [Option.Option<Tracer.Span>, boolean]> = Effect.withFiberRuntime((fiber) => {
  const span = currentSpanOf(fiber)
  return Effect.succeed([span !== undefined && span._tag === "Span" ? Option.some(span) : Option.none(), Tracing.exports(fiber.currentTracer)] as const)
})

// ---------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------

/**
 * The model's name, asked of `modelInfo` the first time it is read and kept
 * (two reads racing before the first answer may both ask; the name is the same);
 * known at once when `modelInfo` is a value (`Effect.succeed`).
 *
 * What it has read is kept on the effect itself, an instance of a class (a loop
 * makes one per run): not in a WeakMap keyed by it (V8's young-generation
 * collector keeps every key of a WeakMap alive through a scavenge, so a WeakMap of
 * per-call keys has each call's objects survive into the old generation), nor in a
 * property defined on an effect (`Object.defineProperty` on a fresh object is slow).
 */
export const lazyModelName = (modelInfo: Effect.Effect<{ readonly name: string }>): Effect.Effect<string> =>
  new LazyModelName(modelInfo)

class LazyModelName extends Effectable.Class<string> {
  name: string | undefined
  constructor(readonly modelInfo: Effect.Effect<{ readonly name: string }>) {
    super()
    // an engine's `Effect.succeed(info)` is its own value: read at once, nothing to run
    this.name = Exit.isExit(modelInfo) && Exit.isSuccess(modelInfo) ? (modelInfo.value as { readonly name: string }).name : undefined
  }
  commit(): Effect.Effect<string> {
    const name = this.name
    return name !== undefined ? Effect.succeed(name) : Effect.map(this.modelInfo, (info) => (this.name = info.name))
  }
}

/** The model's name when `model` is a `lazyModelName` that has read it already: no step to run for it. */
export const modelNameNow = (model: Effect.Effect<string>): string | undefined =>
  model instanceof LazyModelName ? model.name : undefined

export interface InferenceSpanOptions {
  readonly inferenceId?: string | undefined
}

/** The name of an inference span: `chat {model}`. */
export const inferenceSpanName = (model: string): string => `chat ${model}`

/**
 * Runs one engine call in a `chat {model}` span with the gen_ai attributes, records
 * its usage with the CostTracker when one is present, and returns the result with
 * the span, so tool spans can link to it.
 */
export const inference = <E, R>(
  model: Effect.Effect<string>,
  request: InferenceRequest,
  call: Effect.Effect<InferenceResult, E, R>,
  options: InferenceSpanOptions = {}
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.Span>], E, R> =>
  Effect.flatMap(model, (name) =>
    inferenceInSpan(name, request, call, options).pipe(Tracing.withSpan(inferenceSpanName(name), clientSpan))
  )

/**
 * The body of `inference`, for a caller that opens the `chat {model}` span itself
 * (to record events inside it): annotates the current span, runs the call,
 * records the usage, and returns the result with the current span.
 */
export const inferenceInSpan = <E, R>(
  name: string,
  request: InferenceRequest,
  call: Effect.Effect<InferenceResult, E, R>,
  options: InferenceSpanOptions = {}
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.Span>], E, R> =>
  Effect.gen(() => inferenceInSpanSteps(name, request, call, options))

/** The steps of `inferenceInSpan`, one generator function for every call (a generator function made per call costs V8 new maps). */
function* inferenceInSpanSteps<E, R>(name: string, request: InferenceRequest, call: Effect.Effect<InferenceResult, E, R>, options: InferenceSpanOptions) {
  const [span, annotated] = yield* spanAndExporting
  if (annotated) yield* annotateWith((current) => putRequest(current, name, request, options.inferenceId))
  const result = yield* call
  if (annotated) yield* annotateWith((current) => putResponse(current, name, result), false)
  const cost = yield* Effect.serviceOption(CostTracker)
  if (Option.isSome(cost)) yield* cost.value.recordUsage(name, result.usage)
  return [result, span] as const
}

/** `put` on the current span (with the correlation ids first, unless `correlated` is false), if attributes put there go anywhere. */
const annotateWith = (put: (span: Tracer.Span) => void, correlated = true): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const span = currentSpanOf(fiber)
    if (annotatable(span)) {
      if (correlated) putCorrelation(span, fiber.getFiberRef(currentCorrelation))
      put(span)
    }
    return Effect.void
  })

/** What an inference span says of its request. */
const putRequest = (span: Tracer.Span, name: string, request: InferenceRequest, inferenceId: string | undefined): void => {
  span.attribute(GenAi.operationName, "chat")
  span.attribute(GenAi.requestModel, name)
  if (request.temperature !== undefined) span.attribute(GenAi.requestTemperature, request.temperature)
  if (request.maxTokens !== undefined) span.attribute(GenAi.requestMaxTokens, request.maxTokens)
  if (request.topP !== undefined) span.attribute(GenAi.requestTopP, request.topP)
  if (request.seed !== undefined) span.attribute(GenAi.requestSeed, request.seed)
  if (inferenceId !== undefined) span.attribute(Pagantic.inferenceId, inferenceId)
  span.attribute("pagantic.request.message_count", request.messages.length)
  span.attribute("pagantic.request.tool_count", request.tools.length)
  span.attribute("pagantic.request.schema", request.schema !== undefined)
  span.attribute("pagantic.request.grammar", request.grammar !== undefined)
}

/** What an inference span says of its result. */
const putResponse = (span: Tracer.Span, name: string, result: InferenceResult): void => {
  span.attribute(GenAi.responseModel, name)
  span.attribute(GenAi.responseFinishReasons, [result.finishReason])
  span.attribute(GenAi.usageInputTokens, result.usage.promptTokens)
  span.attribute(GenAi.usageOutputTokens, result.usage.outputTokens)
  if (result.toolCalls.length > 0) span.attribute(Pagantic.toolCallIds, result.toolCalls.map((c) => c.id))
}

/**
 * `inference` for a caller in a step of `fiber` (`withFiberRuntime`) that knows
 * the model's name, the tracer exporting and no CostTracker in the context: the
 * `chat {model}` span opened with its request's attributes, and its result's put
 * on it in the step that ends it (`Tracing.spanIn`), no step of its own between.
 */
export const inferenceIn = <E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  name: string,
  request: InferenceRequest,
  call: Effect.Effect<InferenceResult, E, R>,
  options: InferenceSpanOptions = {}
): Effect.Effect<readonly [InferenceResult, Option.Option<Tracer.Span>], E, R> =>
  Tracing.spanIn(fiber, inferenceSpanName(name), clientSpan, call, new InferenceSpan(fiber, name, request, options.inferenceId))

/** What `inferenceIn` puts on its span as it opens and as it ends, and what it returns. */
class InferenceSpan implements Tracing.SpanExtras<InferenceResult, readonly [InferenceResult, Option.Option<Tracer.Span>]> {
  constructor(
    readonly fiber: Fiber.RuntimeFiber<unknown, unknown>,
    readonly name: string,
    readonly request: InferenceRequest,
    readonly inferenceId: string | undefined
  ) {}

  onOpen(span: Tracer.Span): void {
    if (annotatable(span)) {
      putCorrelation(span, this.fiber.getFiberRef(currentCorrelation))
      putRequest(span, this.name, this.request, this.inferenceId)
    }
  }

  onSuccess(result: InferenceResult, span: Tracer.Span): readonly [InferenceResult, Option.Option<Tracer.Span>] {
    if (annotatable(span)) putResponse(span, this.name, result)
    return [result, Option.some(span)]
  }
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/**
 * Runs one tool execution in an `execute_tool {name}` span, linked to the
 * inference span that asked for the call.
 */
export const tool =
  (call: ToolCall, requestedBy: Option.Option<Tracer.AnySpan>, attempt: number, inferenceId?: string | undefined) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withFiberRuntime((fiber) => toolIn(fiber, call, requestedBy, attempt, inferenceId, self))

/**
 * `tool` for a caller in a step of `fiber` (`withFiberRuntime`); with
 * `correlation`, the fiber's correlation ids are those for the execution (set
 * in the step that opens the span, set back in the one that ends it, as
 * `withCorrelation` around the span would), and the span's.
 */
export const toolIn = <A, E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  call: ToolCall,
  requestedBy: Option.Option<Tracer.AnySpan>,
  attempt: number,
  inferenceId: string | undefined,
  self: Effect.Effect<A, E, R>,
  correlation?: CorrelationContext
): Effect.Effect<A, E, R> =>
  Tracing.spanIn(fiber, `execute_tool ${call.name}`, {
    links: Option.isSome(requestedBy) ? linkTo(requestedBy.value, call.id) : noLinks
  }, self, new ToolSpan(fiber, call, attempt, inferenceId, correlation)) as Effect.Effect<A, E, R>

const noLinks: ReadonlyArray<Tracer.SpanLink> = Object.freeze([])

/** A tool span's link to the inference span that asked for the call. */
const linkTo = (span: Tracer.AnySpan, callId: string): ReadonlyArray<Tracer.SpanLink> => [
  { _tag: "SpanLink", span, attributes: { [GenAi.toolCallId]: callId } }
]

/** What `toolIn` puts on its span as it opens, and the correlation it sets. */
class ToolSpan implements Tracing.SpanExtras<unknown, unknown> {
  readonly local: Tracing.LocalValue | undefined
  constructor(
    readonly fiber: Fiber.RuntimeFiber<unknown, unknown>,
    readonly call: ToolCall,
    readonly attempt: number,
    readonly inferenceId: string | undefined,
    readonly correlation: CorrelationContext | undefined
  ) {
    this.local = correlation === undefined ? undefined : Tracing.local(currentCorrelation, correlation)
  }

  onOpen(span: Tracer.Span): void {
    const { call, fiber } = this
    if (Tracing.exports(fiber.currentTracer) && annotatable(span)) {
      // the correlation ids the execution runs under
      putCorrelation(span, this.correlation ?? fiber.getFiberRef(currentCorrelation))
      span.attribute(GenAi.operationName, "execute_tool")
      span.attribute(GenAi.toolName, call.name)
      span.attribute(GenAi.toolCallId, call.id)
      span.attribute(GenAi.toolType, "function")
      span.attribute(Pagantic.toolCallId, call.id)
      span.attribute(Pagantic.attempt, this.attempt)
      if (this.inferenceId !== undefined) span.attribute(Pagantic.inferenceId, this.inferenceId)
    }
  }
}
