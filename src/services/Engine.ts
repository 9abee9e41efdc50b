/**
 * Layer 1: inference.
 *
 * The Engine is the one abstraction between pagantic and any model runtime
 * (llama.cpp in process, an OpenAI-compatible server, a scripted fake in tests).
 * Everything above it speaks Messages, ToolDefinitions and JSON schemas, never a
 * vendor type. An engine that can constrain decoding by a schema or a GBNF grammar
 * does so; one that cannot ignores them and the constraint layer checks afterwards.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Mailbox from "effect/Mailbox"
import { identity } from "effect/Function"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { InferenceFailure } from "../domain/Failure.js"
import { JsonSchema } from "../domain/JsonSchema.js"
import { Message, ToolCall, ToolDefinition } from "../domain/Message.js"
import type { ModelInfo } from "../domain/ModelInfo.js"
import { Logprobs, Penalty, StopTexts, TopLogprobs } from "../domain/Sampling.js"
import { TokenUsage } from "../domain/TokenUsage.js"

/** What one inference call asks of the engine. */
export class InferenceRequest extends Schema.Class<InferenceRequest>("InferenceRequest")({
  messages: Schema.Array(Message),
  tools: Schema.optionalWith(Schema.Array(ToolDefinition), { default: () => [] }),
  /** JSON schema the output must follow; engines that can, constrain decoding by it. */
  schema: Schema.optional(JsonSchema),
  /** GBNF grammar for decoder-level constraint; takes precedence over `schema` for decoding. */
  grammar: Schema.optional(Schema.String),
  maxTokens: Schema.optional(Schema.NonNegativeInt),
  /**
   * Not negative and finite. Clients of the HTTP API are held to ExecutionHints'
   * 0 to 2 wherever they send one (hints, plan steps); in code, higher is allowed.
   */
  temperature: Schema.optional(Schema.NonNegative.pipe(Schema.finite())),
  /** 0 to 1, as ExecutionHints. */
  topP: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  /** The same request with the same seed samples the same tokens (on the same engine and model). */
  seed: Schema.optional(Schema.Int),
  /**
   * 1 to 4 non-empty texts: generation ends before the first one produced, which
   * is not part of the content; the finish reason is then "stop".
   */
  stop: Schema.optional(StopTexts),
  /** -2 to 2: lowers (positive) or raises (negative) every token already produced, once. */
  presencePenalty: Schema.optional(Penalty),
  /** -2 to 2: lowers (positive) or raises (negative) a token by how often it was produced. */
  frequencyPenalty: Schema.optional(Penalty),
  /** Return the log-probability of each generated content token (`InferenceResult.logprobs`). */
  logprobs: Schema.optional(Schema.Boolean),
  /** 0 to 20: with `logprobs` (alone it asks for nothing), how many most likely alternatives to report per token. */
  topLogprobs: Schema.optional(TopLogprobs),
  /**
   * A stable key for a conversation (e.g. the session id). Engines that keep
   * evaluated state (llama.cpp) use it to reuse the evaluated prefix across turns.
   */
  sessionKey: Schema.optional(Schema.String),
  /** Vendor-specific pass-through. */
  options: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
}) {}

/** Why generation ended. */
export const FinishReason = Schema.Literal("stop", "tool_calls", "length", "aborted")
export type FinishReason = typeof FinishReason.Type

/** What one inference call returned. */
export class InferenceResult extends Schema.Class<InferenceResult>("InferenceResult")({
  content: Schema.String,
  toolCalls: Schema.Array(ToolCall),
  usage: TokenUsage,
  finishReason: FinishReason,
  /**
   * When the request asked for `logprobs`: one entry per generated content token,
   * in order (the tokens spell the content). Absent when not asked, and when a
   * remote server asked for them sent none.
   */
  logprobs: Schema.optional(Logprobs)
}) {}

/**
 * A piece of a streamed inference. The stream ends with exactly one `Finish`;
 * log-probabilities, when asked for, come on its result.
 */
export type StreamPart =
  | { readonly _tag: "TextDelta"; readonly text: string }
  | { readonly _tag: "ToolCallPart"; readonly toolCall: ToolCall }
  | { readonly _tag: "Finish"; readonly result: InferenceResult }

export const StreamPart = {
  textDelta: (text: string): StreamPart => ({ _tag: "TextDelta", text }),
  toolCall: (toolCall: ToolCall): StreamPart => ({ _tag: "ToolCallPart", toolCall }),
  finish: (result: InferenceResult): StreamPart => ({ _tag: "Finish", result })
}

// ---------------------------------------------------------------------------
// Parts by callback
// ---------------------------------------------------------------------------

/**
 * One inference's parts handed to `emit` one by one, in stream order (text
 * deltas and tool calls, then `Finish`), each emit awaited before the next part:
 * what a stream of parts is, without Effect's Stream machinery (a channel per
 * combinator, about 600 Effect operations per inference on Effect 3). The loops
 * run an engine's stream this way when it has a source (`runParts`).
 */
export type PartSource = <E>(
  emit: (part: StreamPart) => Effect.Effect<void, E>
) => Effect.Effect<void, InferenceFailure | E>

const partSource: unique symbol = Symbol.for("pagantic/Engine/partSource")

const sourceOf = (stream: Stream.Stream<StreamPart, InferenceFailure>): PartSource | undefined =>
  (stream as { readonly [partSource]?: PartSource })[partSource]

/**
 * `stream` with a source giving the very same parts: `runParts` runs the
 * source, every other consumer the stream. Combinators of Stream drop the source
 * (a tapped or mapped stream is a new stream), so a source is never run in place
 * of a stream it does not describe; `tapParts` and `unwrapParts` keep it.
 */
export const withSource = (
  stream: Stream.Stream<StreamPart, InferenceFailure>,
  source: PartSource
): Stream.Stream<StreamPart, InferenceFailure> => Object.assign(stream, { [partSource]: source })

/**
 * A stream of parts from its source: run by `runParts` directly, and as a Stream
 * by a fiber of the consumer's scope offering the parts to a mailbox, the stream
 * taking what has come in at each pull. An engine whose parts are at hand (a
 * scripted or remote one) or come from callbacks (llama.cpp's) builds its
 * `stream` this way, so that the loops run it without Stream machinery.
 */
export const streamFrom = (source: PartSource): Stream.Stream<StreamPart, InferenceFailure> =>
  withSource(
    // built when consumed as a Stream: the loops run the source, and most streams never get here
    Stream.suspend(() => Stream.unwrapScoped(Effect.gen(function*() {
      const parts = yield* Mailbox.make<StreamPart, InferenceFailure>()
      yield* source((part) => parts.offer(part)).pipe(Mailbox.into(parts), Effect.forkScoped)
      return Mailbox.toStream(parts)
    }))),
    source
  )

/** Runs `f` on each part of `stream` in order: its source when it has one, else `Stream.runForEach`. */
export const runParts = <E>(
  stream: Stream.Stream<StreamPart, InferenceFailure>,
  f: (part: StreamPart) => Effect.Effect<void, E>
): Effect.Effect<void, InferenceFailure | E> => {
  const source = sourceOf(stream)
  return source === undefined ? Stream.runForEach(stream, f) : source(f)
}

/**
 * `Stream.tap` for a stream of parts, keeping its source. `f` may return
 * `undefined` for a part it has nothing to do with: the part goes on in the
 * same step.
 */
export const tapParts = (
  stream: Stream.Stream<StreamPart, InferenceFailure>,
  f: (part: StreamPart) => Effect.Effect<void> | undefined
): Stream.Stream<StreamPart, InferenceFailure> =>
  withSource(
    Stream.suspend(() => Stream.tap(stream, (part) => f(part) ?? Effect.void)),
    (emit) =>
      runParts(stream, (part) => {
        const tapped = f(part)
        return tapped === undefined ? emit(part) : Effect.zipRight(tapped, emit(part))
      })
  )

/** `Stream.unwrap` for a stream of parts: a source runs the stream the effect makes by its own source. */
export const unwrapParts = (
  make: Effect.Effect<Stream.Stream<StreamPart, InferenceFailure>, InferenceFailure>
): Stream.Stream<StreamPart, InferenceFailure> =>
  withSource(Stream.suspend(() => Stream.unwrap(make)), (emit) => Effect.flatMap(make, (stream) => runParts(stream, emit)))

export interface Service {
  /** Runs one inference to completion. Interruption stops generation and frees its resources. */
  readonly infer: (request: InferenceRequest) => Effect.Effect<InferenceResult, InferenceFailure>
  /** Runs one inference, emitting text deltas and tool calls as they come, then `Finish`. */
  readonly stream: (request: InferenceRequest) => Stream.Stream<StreamPart, InferenceFailure>
  /** The model behind the engine. */
  readonly modelInfo: Effect.Effect<ModelInfo>
  /**
   * Optional: `n` independent samples of one request, each distributed exactly as
   * one `infer` of it, sample `i` seeded `seed + i` when the request has a seed.
   * An engine that can share work between the samples (decode their common
   * prefix once) provides it; callers use the module's `sampleMany`, which falls
   * back to `n` concurrent `infer` calls, so every engine has the same contract.
   * One outcome per sample, in order; the effect fails only when no sample can run.
   */
  readonly sampleMany?: SampleMany | undefined
}

/** N samples of one request: one outcome per sample, in sample order. */
export type SampleMany = (
  request: InferenceRequest,
  n: number
) => Effect.Effect<ReadonlyArray<Either.Either<InferenceResult, InferenceFailure>>, InferenceFailure>

/** The inference engine. */
export class Engine extends Context.Tag("pagantic/Engine")<Engine, Service>() {}

/** `request` as sample `index` of many: its seed moved by the index (no seed stays no seed). */
export const sampleRequest = (request: InferenceRequest, index: number): InferenceRequest =>
  request.seed === undefined || index === 0
    ? request
    : new InferenceRequest({ ...request, seed: request.seed + index }, true)

/** `n` concurrent `infer` calls, sample `i` seeded `seed + i`: what `sampleMany` is for any engine. */
export const independentSamples = (engine: Service, request: InferenceRequest, n: number) =>
  Effect.forEach(
    Array.from({ length: Math.max(0, Math.floor(n)) }, (_, i) => i),
    (i) => Effect.either(engine.infer(sampleRequest(request, i))),
    { concurrency: "unbounded" }
  )

/**
 * `n` independent samples of `request` on `engine`: its own `sampleMany` when it
 * has one, else `n` concurrent `infer` calls with seeds `seed + i`.
 */
export const sampleMany = (
  engine: Service,
  request: InferenceRequest,
  n: number
): Effect.Effect<ReadonlyArray<Either.Either<InferenceResult, InferenceFailure>>, InferenceFailure> =>
  engine.sampleMany !== undefined ? engine.sampleMany(request, n) : independentSamples(engine, request, n)

// ---------------------------------------------------------------------------
// The request in progress
// ---------------------------------------------------------------------------

/**
 * What the request in progress does to an engine: the facade sets it for the
 * length of one request, so that the request's hints reach, and its spending
 * counts, every inference the request causes, also those of services that hold
 * an engine of their own (a model reranker, a judged validator, a model planner,
 * a query's responders). Outside a request it leaves an engine as it is.
 */
export const currentRequest: FiberRef.FiberRef<(engine: Service) => Service> = FiberRef.unsafeMake<
  (engine: Service) => Service
>(identity)

const followsRequest: unique symbol = Symbol.for("pagantic/Engine/followsRequest")

/**
 * `engine`, each of its calls made the way the request in progress makes them
 * (see `currentRequest`). Services that keep an engine for later calls keep it
 * so. Idempotent: an engine that already follows the request is returned as is,
 * so no call is seen twice.
 */
export const inRequest = (engine: Service): Service => {
  if (followsRequest in engine) return engine
  /** The engine as the request in progress makes its calls (its wrapper read from the calling fiber). */
  const current = (fiber: Fiber.RuntimeFiber<unknown, unknown>) => fiber.getFiberRef(currentRequest)(engine)
  const following: Service & { readonly [followsRequest]: true } = {
    [followsRequest]: true,
    // the request's wrapper read and applied in one step
    infer: (request) => Effect.withFiberRuntime((fiber) => current(fiber).infer(request)),
    // as `unwrapParts` of the same, its source reading the request's wrapper in the step that runs the parts
    stream: (request) =>
      withSource(
        // built only when consumed as a Stream (the loops run the source)
        Stream.suspend(() =>
          Stream.unwrap(Effect.withFiberRuntime<Stream.Stream<StreamPart, InferenceFailure>>((fiber) =>
            Effect.succeed(current(fiber).stream(request))
          ))
        ),
        (emit) => Effect.withFiberRuntime((fiber) => runParts(current(fiber).stream(request), emit))
      ),
    modelInfo: engine.modelInfo,
    ...(engine.sampleMany === undefined ? {} : {
      sampleMany: (request: InferenceRequest, n: number) =>
        Effect.withFiberRuntime((fiber) => sampleMany(current(fiber), request, n))
    })
  }
  return following
}
