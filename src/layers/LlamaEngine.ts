/**
 * The in-process llama.cpp engine (node-llama-cpp).
 *
 * One scoped resource: the llama.cpp binding, one model and one context with
 * several sequences, loaded when the layer is built and disposed when its scope
 * closes. Each inference borrows a sequence, so concurrent calls (RedundantLoop
 * replicas, parallel requests) decode together in shared batches instead of
 * queueing; a call with a `sessionKey` returns to the sequence that already holds
 * its conversation, so a turn evaluates only its new tokens.
 *
 * Decoding is constrained in the engine: a GBNF grammar or a JSON schema becomes a
 * llama.cpp grammar, tool definitions become node-llama-cpp functions without
 * handlers, so the calls the model makes are returned to the caller (the tool loop
 * runs them) instead of being executed here. Every failure is an InferenceFailure.
 */
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as Take from "effect/Take"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaChat, LlamaJsonSchemaValidationError, LlamaLogLevel, resolveChatWrapper } from "node-llama-cpp"
import type {
  ChatHistoryItem,
  ChatModelFunctions,
  ChatWrapper,
  Llama,
  LlamaChatResponse,
  LlamaChatResponseFunctionCallParamsChunk,
  LlamaContext,
  LlamaContextSequence,
  LlamaModel,
  LLamaChatGenerateResponseOptions
} from "node-llama-cpp"
import { InferenceFailure } from "../domain/Failure.js"
import { ToolCall } from "../domain/Message.js"
import { ModelInfo } from "../domain/ModelInfo.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import { Engine, InferenceResult, StreamPart } from "../services/Engine.js"
import type { FinishReason, InferenceRequest, Service } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import { toChatFunctions, toChatHistory } from "./llama/ChatHistory.js"
import * as Gguf from "./llama/Gguf.js"
import * as Grammars from "./llama/Grammars.js"
import { BUNDLED_MODEL_FILE, BUNDLED_MODEL_NAME, PaganticChatWrapper } from "./llama/PaganticChatWrapper.js"
import * as PromptSharing from "./llama/PromptSharing.js"
import * as SequencePool from "./llama/SequencePool.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** How to load the model and size the context. Every field has a default that is fast on 2 CPU cores. */
export interface Options {
  /** Path of a GGUF file; defaults to the bundled model. */
  readonly modelPath?: string
  /** CPU threads for evaluation (default 1: more threads than cores is many times slower). */
  readonly threads?: number
  /** Tokens per sequence (default: the model's training context, at most 4096). */
  readonly contextSize?: number
  /** Offload to a GPU when one is available (default false). */
  readonly gpu?: boolean
  /** Tokens evaluated per batch (default: node-llama-cpp's choice). */
  readonly batchSize?: number
  /** Parallel sequences of the context: how many inferences decode at once (default 6). */
  readonly sequences?: number
  /** How many sessions may keep a sequence between turns (default: sequences - 1). */
  readonly pinnedSessions?: number
  /** The chat wrapper; default: the bundled model's, else the one matching the model's template. */
  readonly chatWrapper?: ChatWrapper
  /**
   * Prompt sharing: a request copies the longest prefix of its prompt that another
   * sequence holds (or is evaluating) instead of evaluating it again, when that
   * saves at least this many tokens (default 32; 0 turns sharing off).
   */
  readonly shareMinTokens?: number
  /** Compiled grammars kept for reuse, least recently used out first (default 64). */
  readonly grammarCacheSize?: number | undefined
}

export const DEFAULT_SEQUENCES = 6
export const DEFAULT_MAX_CONTEXT_SIZE = 4096

/** The package root: the nearest directory above this module with a package.json. */
const packageRoot = (): string => {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (;;) {
    if (fs.existsSync(path.join(dir, "package.json"))) return dir
    const parent = path.dirname(dir)
    if (parent === dir) return process.cwd()
    dir = parent
  }
}

/** The bundled model's path: `models/pagantic-tiny.gguf` under the package root. */
export const bundledModelPath = (): string => path.join(packageRoot(), "models", BUNDLED_MODEL_FILE)

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** Raised by our context-shift strategy: the history no longer fits and we refuse to drop parts of it. */
class ContextOverflow {
  readonly _tag = "ContextOverflow"
}

const fromGenerationError = (error: unknown, details: Record<string, unknown>): InferenceFailure => {
  if (error instanceof ContextOverflow || /context size is too small|not enough tokens/i.test(errorMessage(error))) {
    return InferenceFailure.contextExceeded("the conversation does not fit the context window", details, error)
  }
  if (error instanceof SyntaxError || error instanceof LlamaJsonSchemaValidationError) {
    return InferenceFailure.malformed(`the model produced a malformed function call: ${errorMessage(error)}`, details, error)
  }
  return InferenceFailure.engineError(`llama.cpp generation failed: ${errorMessage(error)}`, details, error)
}

/**
 * A grammar or schema of the request that is refused before or by llama.cpp: the
 * caller's input, not retryable. Its message and details carry the problem and
 * the size, never the text.
 */
const grammarRejected = (rejected: Grammars.Rejected): InferenceFailure =>
  new InferenceFailure({
    code: "INFERENCE_ENGINE_ERROR",
    retryable: false,
    message: `${rejected.source === "gbnf" ? "the GBNF grammar" : "the JSON schema"} cannot be used: ${rejected.problem}`,
    details: {
      kind: "grammar",
      source: rejected.source,
      problem: rejected.problem,
      ...(rejected.bytes === undefined ? {} : { bytes: rejected.bytes })
    },
    cause: rejected.cause
  })

const finishReasonOf = (response: LlamaChatResponse<ChatModelFunctions>): FinishReason => {
  if ((response.functionCalls?.length ?? 0) > 0) return "tool_calls"
  switch (response.metadata.stopReason) {
    case "maxTokens":
      return "length"
    case "abort":
      return "aborted"
    case "functionCalls":
      return "tool_calls"
    default:
      return "stop"
  }
}

const commonPrefixLength = PromptSharing.commonPrefixLength

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

// ---------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------

interface Worker {
  readonly sequence: LlamaContextSequence
  readonly chat: LlamaChat
}

/**
 * Loads the model and builds the engine. The model, context and binding live as
 * long as the surrounding scope. Fails with INFERENCE_MODEL_UNAVAILABLE when the
 * model file is missing or unreadable.
 */
export const make = Effect.fn("LlamaEngine.make")(function*(options: Options = {}) {
  const modelPath = path.resolve(options.modelPath ?? bundledModelPath())
  const threads = Math.max(1, options.threads ?? 1)
  const sequences = Math.max(1, options.sequences ?? DEFAULT_SEQUENCES)

  yield* Effect.tryPromise({
    try: () => fs.promises.access(modelPath, fs.constants.R_OK),
    catch: (cause) =>
      InferenceFailure.modelUnavailable(`model file not found or not readable: ${modelPath}`, { modelPath }, cause)
  })
  // Before any native code: llama.cpp logs its way through a broken file, node-llama-cpp trusts its lengths.
  yield* Gguf.validate(modelPath)

  const llama: Llama = yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: () =>
        getLlama({
          gpu: options.gpu === true ? "auto" : false,
          build: "never",
          maxThreads: threads,
          logLevel: LlamaLogLevel.error,
          progressLogs: false
        }),
      catch: (cause) =>
        InferenceFailure.modelUnavailable(`cannot load llama.cpp: ${errorMessage(cause)}`, { modelPath }, cause)
    }),
    (llama) => Effect.promise(() => llama.dispose())
  )

  const model: LlamaModel = yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: () => llama.loadModel({ modelPath, ...(options.gpu === true ? {} : { gpuLayers: 0 }) }),
      catch: (cause) =>
        InferenceFailure.modelUnavailable(`cannot load model ${modelPath}: ${errorMessage(cause)}`, { modelPath }, cause)
    }),
    (model) => Effect.promise(() => model.dispose())
  )

  const contextSize = options.contextSize ?? Math.min(model.trainContextSize, DEFAULT_MAX_CONTEXT_SIZE)
  const context: LlamaContext = yield* Effect.acquireRelease(
    Effect.tryPromise({
      try: () =>
        model.createContext({
          sequences,
          contextSize,
          threads,
          ...(options.batchSize === undefined ? {} : { batchSize: options.batchSize })
        }),
      catch: (cause) =>
        InferenceFailure.modelUnavailable(
          `cannot create a context of ${sequences} x ${contextSize} tokens: ${errorMessage(cause)}`,
          { modelPath, contextSize, sequences },
          cause
        )
    }),
    (context) => Effect.promise(() => context.dispose())
  )

  const modelName = model.fileInfo.metadata?.general?.name ?? path.basename(modelPath, ".gguf")
  const chatWrapper: ChatWrapper = options.chatWrapper ??
    (modelName === BUNDLED_MODEL_NAME ? new PaganticChatWrapper() : resolveChatWrapper(model))

  // A history that outgrows the context is an error, never silently truncated.
  const contextShift = {
    strategy: (): never => {
      throw new ContextOverflow()
    }
  }
  const workers: Array<Worker> = []
  for (let i = 0; i < sequences; i++) {
    const sequence = context.getSequence()
    workers.push({ sequence, chat: new LlamaChat({ contextSequence: sequence, chatWrapper }) })
  }
  const pool = yield* SequencePool.make(workers, {
    maxPinnedSessions: Math.max(0, options.pinnedSessions ?? sequences - 1)
  })
  // Sequences inside a generation: no prompt donors until it ends.
  const generating = new Set<LlamaContextSequence>()
  const sharing = PromptSharing.make(workers.map((worker) => worker.sequence), {
    minTokens: Math.max(0, options.shareMinTokens ?? PromptSharing.DEFAULT_MIN_TOKENS),
    isGenerating: (sequence) => generating.has(sequence)
  })

  const ids = yield* Effect.serviceOption(IdGenerator)
  const nextCallId: Effect.Effect<string> = Option.match(ids, {
    onNone: () => Effect.sync(() => `call_${globalThis.crypto.randomUUID()}`),
    onSome: (generator) => generator.next("call")
  })

  const contextWindow = context.contextSize
  const modelInfo = new ModelInfo({
    name: modelName,
    contextWindow,
    supportsGrammar: true,
    supportsTools: true
  })

  // Grammars and schemas of requests: checked, then compiled once per text (a small LRU cache).
  const grammars = Grammars.make(llama, { capacity: options.grammarCacheSize })

  // -------------------------------------------------------------------------
  // One generation
  // -------------------------------------------------------------------------

  /** Runs one generation on a borrowed sequence; `onText` receives the text as it is decoded. */
  const run = (
    request: InferenceRequest,
    onText: ((text: string) => void) | undefined
  ): Effect.Effect<InferenceResult, InferenceFailure> =>
    Effect.gen(function*() {
      const converted = toChatHistory(request.messages)
      if ("_tag" in converted) {
        return yield* new InferenceFailure({
          code: "INFERENCE_ENGINE_ERROR",
          retryable: false,
          message: `tool result ${converted.toolCallId} (${converted.name}) answers no tool call of the conversation`,
          details: { toolCallId: converted.toolCallId, name: converted.name }
        })
      }
      const history: Array<ChatHistoryItem> = converted.history
      const functions = request.tools.length > 0 ? toChatFunctions(request.tools) : undefined
      // Functions and grammars exclude each other in llama.cpp chat: with tools, the call syntax wins.
      const grammar = functions !== undefined
        ? undefined
        : request.grammar !== undefined
        ? yield* Effect.mapError(grammars.gbnf(request.grammar), grammarRejected)
        : request.schema !== undefined
        ? yield* Effect.mapError(grammars.schema(request.schema), grammarRejected)
        : undefined

      const prompt = yield* Effect.try({
        try: () =>
          chatWrapper.generateContextState({
            chatHistory: history,
            ...(functions === undefined ? {} : { availableFunctions: functions })
          }).contextText.tokenize(model.tokenizer),
        catch: (cause) => InferenceFailure.engineError(`cannot render the prompt: ${errorMessage(cause)}`, {}, cause)
      })
      const promptTokens = prompt.length
      const room = contextWindow - promptTokens - 1
      if (room < 1) {
        return yield* InferenceFailure.contextExceeded(
          `the prompt has ${promptTokens} tokens; the context window holds ${contextWindow}`,
          { promptTokens, contextWindow }
        )
      }
      const maxTokens = Math.min(request.maxTokens ?? room, room)
      if (maxTokens === 0) {
        // node-llama-cpp reads 0 as "no limit"; here it means: generate nothing.
        return new InferenceResult({
          content: "",
          toolCalls: [],
          finishReason: "length",
          usage: TokenUsage.make({ contextWindow })
        })
      }

      const topK = request.options?.["topK"]
      const minP = request.options?.["minP"]
      // The last parameters chunk of each function call, to tell a call cut off by maxTokens.
      const partialCalls = new Map<number, LlamaChatResponseFunctionCallParamsChunk>()
      const generateOptions: LLamaChatGenerateResponseOptions<ChatModelFunctions> = {
        maxTokens,
        contextShift,
        ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
        ...(request.topP === undefined ? {} : { topP: request.topP }),
        // node-llama-cpp's default seed is the current second: replicas sampled in the
        // same second would all draw the same tokens. Each call draws its own seed.
        seed: request.seed ?? (yield* Random.nextIntBetween(0, 2 ** 31 - 1)),
        ...(typeof topK === "number" ? { topK } : {}),
        ...(typeof minP === "number" ? { minP } : {}),
        ...(onText === undefined ? {} : { onTextChunk: onText }),
        ...(functions !== undefined
          ? { functions, onFunctionCallParamsChunk: (chunk) => partialCalls.set(chunk.callIndex, chunk) }
          : grammar !== undefined
          ? { grammar }
          : {})
      }

      const affinity = (worker: Worker) => commonPrefixLength(worker.sequence.contextTokens, prompt)
      return yield* pool.withSlot(request.sessionKey, affinity, (slot) => Effect.gen(function*() {
        const { chat, sequence } = slot.value
        const before = sequence.tokenMeter.getState()
        const start = yield* Clock.currentTimeNanos
        const shared = yield* sharing.prepare(sequence, prompt)
        if (shared._tag === "Copied") yield* Effect.annotateCurrentSpan("pagantic.prompt.copied_tokens", shared.tokens)

        // Interruption aborts the generation and waits for llama.cpp to stop before
        // the sequence goes back to the pool, so no two generations ever share it.
        const response = yield* Effect.async<LlamaChatResponse<ChatModelFunctions>, InferenceFailure>((resume) => {
          const controller = new AbortController()
          generating.add(sequence)
          const done = chat.generateResponse(history, { ...generateOptions, signal: controller.signal })
          void done.finally(() => generating.delete(sequence)).catch(() => undefined)
          done.then(
            (response) => resume(Effect.succeed(response)),
            (error) => resume(Effect.fail(fromGenerationError(error, { promptTokens, contextWindow })))
          )
          return Effect.promise(() => {
            controller.abort()
            return done.then(() => undefined, () => undefined)
          })
        })

        const elapsedNanos = (yield* Clock.currentTimeNanos) - start
        const used = sequence.tokenMeter.diff(before)
        const calls = response.functionCalls ?? []
        // A tool call cut off by maxTokens is the caller's limit, as with text: the
        // answer is what came before the call, with finish reason "length" (what
        // OpenAI clients expect), not an error to retry. The span records the cut.
        const cut = [...partialCalls.values()].find((chunk) => !chunk.done)
        if (cut !== undefined && calls.length === 0) {
          yield* Effect.annotateCurrentSpan("pagantic.tool_call.cut_off", cut.functionName)
        }
        const toolCalls: Array<ToolCall> = []
        for (const call of calls) {
          const params: unknown = call.params ?? {}
          if (!request.tools.some((tool) => tool.name === call.functionName)) {
            return yield* InferenceFailure.malformed(`the model called an unknown tool: ${call.functionName}`, {
              kind: "unknown_tool",
              functionName: call.functionName
            })
          }
          if (!isRecord(params)) {
            return yield* InferenceFailure.malformed(
              `the model called ${call.functionName} with arguments that are not an object`,
              { kind: "arguments_not_object", functionName: call.functionName, params }
            )
          }
          toolCalls.push(new ToolCall({ id: yield* nextCallId, name: call.functionName, arguments: params }, true))
        }
        const seconds = Number(elapsedNanos) / 1e9
        // Built from values llama.cpp just gave us: skip re-validating them on the hot path.
        return new InferenceResult({
          content: response.response,
          toolCalls,
          finishReason: finishReasonOf(response),
          usage: new TokenUsage.TokenUsage({
            promptTokens: used.usedInputTokens,
            reasoningTokens: 0,
            outputTokens: used.usedOutputTokens,
            contextTokens: sequence.nextTokenIndex,
            contextWindow,
            tokensPerSecond: seconds > 0 ? used.usedOutputTokens / seconds : 0,
            calls: 1
          }, true)
        }, true)
      }))
    })

  const infer = Effect.fn("LlamaEngine.infer")(function*(request: InferenceRequest) {
    return yield* run(request, undefined)
  })

  const stream = (request: InferenceRequest): Stream.Stream<StreamPart, InferenceFailure> =>
    Stream.unwrapScoped(Effect.gen(function*() {
      const queue = yield* Queue.unbounded<Take.Take<StreamPart, InferenceFailure>>()
      const onText = (text: string) => {
        if (text !== "") queue.unsafeOffer(Take.of(StreamPart.textDelta(text)))
      }
      yield* run(request, onText).pipe(
        Effect.withSpan("LlamaEngine.stream"),
        Effect.exit,
        Effect.flatMap((exit) =>
          exit._tag === "Success"
            ? Queue.offerAll(queue, [
              ...exit.value.toolCalls.map((call) => Take.of(StreamPart.toolCall(call))),
              Take.of(StreamPart.finish(exit.value)),
              Take.end
            ])
            : Queue.offer(queue, Take.failCause(exit.cause))
        ),
        Effect.forkScoped
      )
      return Stream.fromQueue(queue).pipe(Stream.flattenTake)
    }))

  return Engine.of({ infer, stream, modelInfo: Effect.succeed(modelInfo) }) satisfies Service
})

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/** The engine as a scoped layer: the model loads when the layer is built and is disposed with it. */
export const layer = (options: Options = {}): Layer.Layer<Engine, InferenceFailure> =>
  Layer.scoped(Engine, make(options))

/** The options read from configuration (environment variables by default). */
export const config: Config.Config<Options> = Config.all({
  modelPath: Config.option(Config.string("PAGANTIC_MODEL_PATH")),
  threads: Config.withDefault(Config.integer("PAGANTIC_THREADS"), 1),
  contextSize: Config.option(Config.integer("PAGANTIC_CONTEXT_SIZE")),
  gpu: Config.withDefault(Config.boolean("PAGANTIC_GPU"), false),
  batchSize: Config.option(Config.integer("PAGANTIC_BATCH_SIZE")),
  sequences: Config.withDefault(Config.integer("PAGANTIC_SEQUENCES"), DEFAULT_SEQUENCES),
  shareMinTokens: Config.withDefault(Config.integer("PAGANTIC_SHARE_MIN_TOKENS"), PromptSharing.DEFAULT_MIN_TOKENS)
}).pipe(
  Config.map(({ batchSize, contextSize, gpu, modelPath, sequences, shareMinTokens, threads }): Options => ({
    threads,
    gpu,
    sequences,
    shareMinTokens,
    ...Option.match(modelPath, { onNone: () => ({}), onSome: (modelPath) => ({ modelPath }) }),
    ...Option.match(contextSize, { onNone: () => ({}), onSome: (contextSize) => ({ contextSize }) }),
    ...Option.match(batchSize, { onNone: () => ({}), onSome: (batchSize) => ({ batchSize }) })
  }))
)

/**
 * The engine configured from `PAGANTIC_MODEL_PATH`, `PAGANTIC_THREADS`,
 * `PAGANTIC_CONTEXT_SIZE`, `PAGANTIC_GPU`, `PAGANTIC_BATCH_SIZE`,
 * `PAGANTIC_SEQUENCES` and `PAGANTIC_SHARE_MIN_TOKENS`; `overrides` (e.g. a CLI `--model` flag) win over them.
 */
export const layerConfig = (
  overrides: Options = {}
): Layer.Layer<Engine, InferenceFailure | ConfigError.ConfigError> =>
  Layer.scoped(
    Engine,
    Effect.flatMap(config, (fromConfig) => make({ ...fromConfig, ...overrides }))
  )
