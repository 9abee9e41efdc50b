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
import * as Effect from "effect/Effect"
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

/** Puts the correlation ids (and `extra`) on the current span, when the tracer exports spans. */
export const annotate = (extra: Record<string, unknown> = {}): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) =>
    Tracing.exports(fiber.currentTracer)
      ? Tracing.annotate({ ...correlationOf(fiber.getFiberRef(currentCorrelation)), ...extra })
      : Effect.void
  )


/** The span the fiber runs in (`Effect.currentSpan`) and whether the tracer exports, read in one step. */
const spanAndExporting: Effect.Effect<readonly [Option.Option<Tracer.Span>, boolean]> = Effect.withFiberRuntime((fiber) => {
  const span = fiber.currentContext.unsafeMap.get(Tracer.ParentSpan.key) as Tracer.AnySpan | undefined
  return Effect.succeed([span !== undefined && span._tag === "Span" ? Option.some(span) : Option.none(), Tracing.exports(fiber.currentTracer)] as const)
})

// ---------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------

/**
 * The model's name, asked of `modelInfo` the first time it is read and kept
 * (two reads racing before the first answer may both ask; the name is the same).
 */
export const lazyModelName = (modelInfo: Effect.Effect<{ readonly name: string }>): Effect.Effect<string> => {
  let name: string | undefined
  return Effect.suspend(() =>
    name !== undefined ? Effect.succeed(name) : Effect.map(modelInfo, (info) => (name = info.name))
  )
}

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
  Effect.gen(function* () {
    const [span, annotated] = yield* spanAndExporting
    if (annotated) {
      yield* annotate({
        [GenAi.operationName]: "chat",
        [GenAi.requestModel]: name,
        ...(request.temperature === undefined ? {} : { [GenAi.requestTemperature]: request.temperature }),
        ...(request.maxTokens === undefined ? {} : { [GenAi.requestMaxTokens]: request.maxTokens }),
        ...(request.topP === undefined ? {} : { [GenAi.requestTopP]: request.topP }),
        ...(request.seed === undefined ? {} : { [GenAi.requestSeed]: request.seed }),
        ...(options.inferenceId === undefined ? {} : { [Pagantic.inferenceId]: options.inferenceId }),
        "pagantic.request.message_count": request.messages.length,
        "pagantic.request.tool_count": request.tools.length,
        "pagantic.request.schema": request.schema !== undefined,
        "pagantic.request.grammar": request.grammar !== undefined
      })
    }
    const result = yield* call
    if (annotated) {
      yield* Tracing.annotate({
        [GenAi.responseModel]: name,
        [GenAi.responseFinishReasons]: [result.finishReason],
        [GenAi.usageInputTokens]: result.usage.promptTokens,
        [GenAi.usageOutputTokens]: result.usage.outputTokens,
        ...(result.toolCalls.length === 0 ? {} : { [Pagantic.toolCallIds]: result.toolCalls.map((c) => c.id) })
      })
    }
    const cost = yield* Effect.serviceOption(CostTracker)
    if (Option.isSome(cost)) yield* cost.value.recordUsage(name, result.usage)
    return [result, span] as const
  })

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
    Effect.zipRight(
      annotate({
        [GenAi.operationName]: "execute_tool",
        [GenAi.toolName]: call.name,
        [GenAi.toolCallId]: call.id,
        [GenAi.toolType]: "function",
        [Pagantic.toolCallId]: call.id,
        [Pagantic.attempt]: attempt,
        ...(inferenceId === undefined ? {} : { [Pagantic.inferenceId]: inferenceId })
      }),
      self
    ).pipe(
      Tracing.withSpan(`execute_tool ${call.name}`, {
        links: Option.isSome(requestedBy)
          ? [{ _tag: "SpanLink", span: requestedBy.value, attributes: { [GenAi.toolCallId]: call.id } }]
          : []
      })
    )
