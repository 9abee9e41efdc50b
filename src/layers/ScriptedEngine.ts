/**
 * A scripted Engine for users' own tests: it answers with canned results in order,
 * records every request it was sent, and can fail or take time. Delays run on the
 * Clock, so `TestClock.adjust` drives them and a test of concurrency or timeouts
 * never sleeps for real.
 *
 * It honours the sampling controls a test can see the effect of: a reply is cut
 * before the first `stop` text it holds (finish reason "stop"), and a request for
 * `logprobs` gets the step's own, or else one certain entry (log-probability 0)
 * per word it streams, with up to `topLogprobs` alternatives (the word itself).
 *
 *   const engine = ScriptedEngine.layer([
 *     ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "2+2" } }]),
 *     ScriptedEngine.reply("The answer is 4."),
 *   ])
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import { InferenceFailure } from "../domain/Failure.js"
import { ToolCall } from "../domain/Message.js"
import { ModelInfo } from "../domain/ModelInfo.js"
import type { Logprobs } from "../domain/Sampling.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { FinishReason, InferenceRequest, Service as EngineService } from "../services/Engine.js"
import { Engine, InferenceResult, type PartSource, streamFrom, StreamPart } from "../services/Engine.js"

/** One scripted answer. */
export type Step =
  | {
      readonly _tag: "Reply"
      readonly content: string
      readonly toolCalls: ReadonlyArray<ToolCall>
      readonly finishReason: FinishReason
      readonly usage: TokenUsage.TokenUsage
      readonly delay: Duration.Duration
      readonly chunkDelay: Duration.Duration
      readonly logprobs?: Logprobs | undefined
    }
  | { readonly _tag: "Fail"; readonly failure: InferenceFailure; readonly delay: Duration.Duration }
  | {
      readonly _tag: "Respond"
      readonly respond: (request: InferenceRequest) => Effect.Effect<InferenceResult, InferenceFailure>
    }

export interface StepOptions {
  /** Simulated time the answer takes, on the Clock. */
  readonly delay?: Duration.DurationInput
  readonly usage?: Partial<TokenUsage.TokenUsage>
  readonly finishReason?: FinishReason
  /** When streamed, the time before each text delta (a word), on the Clock. */
  readonly chunkDelay?: Duration.DurationInput
  /** The log-probabilities to return when a request asks for them (default: each word certain). */
  readonly logprobs?: Logprobs | undefined
}

const usageOf = (content: string, usage?: Partial<TokenUsage.TokenUsage>) =>
  TokenUsage.make({
    promptTokens: usage?.promptTokens ?? 10,
    outputTokens: usage?.outputTokens ?? Math.max(1, content.split(/\s+/).filter(Boolean).length),
    contextWindow: usage?.contextWindow ?? 4096,
    ...(usage?.tokensPerSecond === undefined ? {} : { tokensPerSecond: usage.tokensPerSecond })
  })

/** A text answer. */
export const reply = (content: string, options: StepOptions = {}): Step => ({
  _tag: "Reply",
  content,
  toolCalls: [],
  finishReason: options.finishReason ?? "stop",
  usage: usageOf(content, options.usage),
  delay: Duration.decode(options.delay ?? 0),
  chunkDelay: Duration.decode(options.chunkDelay ?? 0),
  logprobs: options.logprobs
})

/** An answer that calls tools. Ids default to `call_<n>` in order of the whole script. */
export const toolCalls = (
  calls: ReadonlyArray<{ readonly name: string; readonly arguments: Record<string, unknown>; readonly id?: string }>,
  options: StepOptions & { readonly content?: string } = {}
): Step => ({
  _tag: "Reply",
  content: options.content ?? "",
  toolCalls: calls.map(
    (c, i) => new ToolCall({ id: c.id ?? `pending_${i}`, name: c.name, arguments: c.arguments })
  ),
  finishReason: options.finishReason ?? "tool_calls",
  usage: usageOf(options.content ?? "", options.usage),
  delay: Duration.decode(options.delay ?? 0),
  chunkDelay: Duration.decode(options.chunkDelay ?? 0),
  logprobs: options.logprobs
})

/** The words a reply streams, one text delta each. */
const wordsOf = (content: string): ReadonlyArray<string> => content.match(/\S+\s*|\s+/g) ?? []

/** `content` cut before the first of `stop` it holds, if any. */
const cutAtStop = (content: string, stop: ReadonlyArray<string> | undefined): string | undefined => {
  const at = (stop ?? []).map((text) => content.indexOf(text)).filter((i) => i >= 0)
  return at.length === 0 ? undefined : content.slice(0, Math.min(...at))
}

/** A scripted reply as the request's sampling controls shape it. */
const shaped = (
  request: InferenceRequest,
  step: Extract<Step, { readonly _tag: "Reply" }>,
  toolCalls: ReadonlyArray<ToolCall>
): InferenceResult => {
  const cut = cutAtStop(step.content, request.stop)
  const content = cut ?? step.content
  const logprobs = request.logprobs !== true
    ? undefined
    : step.logprobs ?? wordsOf(content).map((token) => ({
      token,
      logprob: 0,
      topLogprobs: (request.topLogprobs ?? 0) > 0 ? [{ token, logprob: 0 }] : []
    }))
  return new InferenceResult({
    content,
    toolCalls,
    usage: step.usage,
    finishReason: cut === undefined || toolCalls.length > 0 ? step.finishReason : "stop",
    ...(logprobs === undefined ? {} : { logprobs })
  })
}

/** An answer that fails. */
export const fail = (failure: InferenceFailure, options: { readonly delay?: Duration.DurationInput } = {}): Step => ({
  _tag: "Fail",
  failure,
  delay: Duration.decode(options.delay ?? 0)
})

/** An answer computed from the request. */
export const respond = (
  f: (request: InferenceRequest) => Effect.Effect<InferenceResult, InferenceFailure>
): Step => ({ _tag: "Respond", respond: f })

export interface Options {
  /** When the script runs out: fail with INFERENCE_ENGINE_ERROR (default) or repeat the last step. */
  readonly whenExhausted?: "fail" | "repeat-last"
  readonly modelName?: string
  readonly contextWindow?: number
}

/** The control side of a scripted engine: what it was sent. */
export interface Control {
  /** Every request, in the order the engine received them. */
  readonly requests: Effect.Effect<ReadonlyArray<InferenceRequest>>
  /** How many scripted steps are left. */
  readonly remaining: Effect.Effect<number>
}

export class ScriptedEngineControl extends Context.Tag("pagantic/ScriptedEngineControl")<
  ScriptedEngineControl,
  Control
>() {}

/** Builds the engine and its control. */
export const make = (
  script: ReadonlyArray<Step>,
  options: Options = {}
): Effect.Effect<{ readonly engine: EngineService; readonly control: Control }> =>
  Effect.gen(function* () {
    // appended in place (a synchronous step, atomic between fibers); reads copy
    const requests: Array<InferenceRequest> = []
    const cursor = yield* Ref.make(0)
    const callCounter = yield* Ref.make(0)
    const info = new ModelInfo({
      name: options.modelName ?? "scripted",
      contextWindow: options.contextWindow ?? 4096,
      supportsGrammar: false,
      supportsTools: true
    })

    const next = Ref.modify(cursor, (i): readonly [Step | undefined, number] => {
      if (i < script.length) return [script[i], i + 1]
      if (options.whenExhausted === "repeat-last" && script.length > 0) return [script[script.length - 1], i]
      return [undefined, i]
    })

    const withIds = (calls: ReadonlyArray<ToolCall>) =>
      Effect.forEach(calls, (c) =>
        c.id.startsWith("pending_")
          ? Effect.map(Ref.updateAndGet(callCounter, (n) => n + 1), (n) => new ToolCall({ ...c, id: `call_${n}` }))
          : Effect.succeed(c)
      )

    const answer = (
      request: InferenceRequest
    ): Effect.Effect<{ readonly result: InferenceResult; readonly chunkDelay: Duration.Duration }, InferenceFailure> =>
      Effect.gen(function* () {
        yield* Effect.sync(() => requests.push(request))
        const step = yield* next
        if (step === undefined) {
          return yield* InferenceFailure.engineError("ScriptedEngine: the script is exhausted", {
            requests: requests.length
          })
        }
        switch (step._tag) {
          case "Reply": {
            if (Duration.toMillis(step.delay) > 0) yield* Effect.sleep(step.delay)
            const result = shaped(request, step, yield* withIds(step.toolCalls))
            return { result, chunkDelay: step.chunkDelay }
          }
          case "Fail": {
            if (Duration.toMillis(step.delay) > 0) yield* Effect.sleep(step.delay)
            return yield* step.failure
          }
          case "Respond":
            return { result: yield* step.respond(request), chunkDelay: Duration.zero }
        }
      })

    const infer = (request: InferenceRequest): Effect.Effect<InferenceResult, InferenceFailure> =>
      Effect.map(answer(request), ({ result }) => result)

    /** A reply's words as text deltas (each after `chunkDelay`), then its tool calls and its finish. */
    const source = (request: InferenceRequest): PartSource => (emit) =>
      Effect.flatMap(answer(request), ({ chunkDelay, result }) =>
        Effect.zipRight(
          Effect.forEach(
            wordsOf(result.content),
            (word) =>
              Duration.toMillis(chunkDelay) > 0
                ? Effect.zipRight(Effect.sleep(chunkDelay), emit(StreamPart.textDelta(word)))
                : emit(StreamPart.textDelta(word)),
            { discard: true }
          ),
          Effect.forEach([...result.toolCalls.map(StreamPart.toolCall), StreamPart.finish(result)], emit, { discard: true })
        ))

    const engine: EngineService = {
      infer,
      stream: (request) => streamFrom(source(request)),
      modelInfo: Effect.succeed(info)
    }
    const control: Control = {
      requests: Effect.sync(() => requests.slice()),
      remaining: Effect.map(Ref.get(cursor), (i) => Math.max(0, script.length - i))
    }
    return { engine, control }
  })

/** A layer providing the scripted Engine and its control. */
export const layer = (
  script: ReadonlyArray<Step>,
  options: Options = {}
): Layer.Layer<Engine | ScriptedEngineControl> =>
  Layer.effectContext(
    Effect.map(make(script, options), ({ control, engine }) =>
      Context.make(Engine, engine).pipe(Context.add(ScriptedEngineControl, control))
    )
  )

/** The requests the scripted engine in the context has received. */
export const requests: Effect.Effect<ReadonlyArray<InferenceRequest>, never, ScriptedEngineControl> =
  Effect.flatMap(ScriptedEngineControl, (c) => c.requests)
