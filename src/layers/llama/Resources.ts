/**
 * What the llama.cpp engine holds while its scope is open: the binding, one
 * model, one context with several sequences, a chat per sequence, the pool that
 * lends them and the prompt sharing between them.
 *
 * Loading is checked before any native code runs: the file must be readable and
 * its GGUF structure sound (llama.cpp logs its way through a broken file,
 * node-llama-cpp trusts its lengths). Each native resource is released with the
 * scope, in reverse order. Every failure is INFERENCE_MODEL_UNAVAILABLE.
 *
 * Grammar sampling: LlamaChat's sequences sample through `evaluate`, where
 * llama.cpp (as node-llama-cpp calls it) draws a token without the grammar and
 * only when the grammar refuses it draws again with the grammar applied: a
 * shortcut whose distribution is not the constrained one (a token the grammar
 * allows is favoured by its unconstrained mass). With `grammarSampling: "exact"`
 * (the default) every sequence's `evaluate` asks for the selected token's
 * confidence, which makes node-llama-cpp apply the grammar before the sampler
 * chain: the exact constrained distribution, the one TreeSampler draws from.
 * Only a generation that samples under a grammar needs it: greedy decoding, or
 * sampling with no grammar, draws the same tokens either way, so those take
 * node-llama-cpp's own path and skip the per-token confidence (each generation
 * says which through its worker's `sampling`).
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as path from "node:path"
import { getLlama, LlamaChat, LlamaLogLevel, resolveChatWrapper } from "node-llama-cpp"
import type { ChatWrapper, Llama, LlamaContext, LlamaContextSequence, LlamaModel, Tokenizer } from "node-llama-cpp"
import { InferenceFailure } from "../../domain/Failure.js"
import { ModelInfo } from "../../domain/ModelInfo.js"
import * as Gguf from "./Gguf.js"
import { BUNDLED_MODEL_NAME, PaganticChatWrapper } from "./PaganticChatWrapper.js"
import * as PromptSharing from "./PromptSharing.js"
import * as SequencePool from "./SequencePool.js"
import * as RenderMemo from "./RenderMemo.js"
import * as Tokens from "./Tokens.js"
import { errorMessage } from "./Response.js"

/** Tokens per sequence when none is asked for: the model's training context, at most this. */
export const DEFAULT_MAX_CONTEXT_SIZE = 4096

/** What to load, with the engine's defaults already applied where they need no model. */
export interface Settings {
  readonly modelPath: string
  readonly threads: number
  readonly sequences: number
  readonly gpu: boolean
  readonly contextSize?: number | undefined
  readonly batchSize?: number | undefined
  readonly chatWrapper?: ChatWrapper | undefined
  readonly pinnedSessions?: number | undefined
  readonly shareMinTokens?: number | undefined
  /** How a grammar shapes sampling (default "exact"; "lazy" is node-llama-cpp's sample-then-check shortcut). */
  readonly grammarSampling?: GrammarSampling | undefined
  /** The uniform stream of each sample of `sampleMany`, from its seed (default: TreeSampler's). */
  readonly sampleRandom?: ((seed: number) => () => number) | undefined
}

/** "exact": the grammar before the sampler chain; "lazy": sample, and re-sample constrained only when refused. */
export type GrammarSampling = "exact" | "lazy"

/** One sequence of the context with the chat that generates on it. */
export interface Worker {
  readonly sequence: LlamaContextSequence
  readonly chat: LlamaChat
  /** Whether the generation now running samples under a grammar (set by it): the exact path, with "exact". */
  readonly sampling: { constrained: boolean }
}

/** The loaded engine's parts. */
export interface Resources {
  readonly llama: Llama
  readonly model: LlamaModel
  /** The model's tokenizer, the runs of text it tokenized recently answered from memory (./Tokens.ts). */
  readonly tokenizer: Tokenizer
  readonly chatWrapper: ChatWrapper
  readonly modelInfo: ModelInfo
  /** Tokens per sequence, as llama.cpp sized the context. */
  readonly contextWindow: number
  readonly pool: SequencePool.SequencePool<Worker>
  readonly sharing: PromptSharing.PromptSharing
  /** Sequences inside a generation: no prompt donors until it ends. */
  readonly generating: Set<LlamaContextSequence>
  /** Held while a caller takes several sequences at once (so two such callers never deadlock). */
  readonly manySequences: Effect.Semaphore
  readonly sequences: number
  readonly sampleRandom: ((seed: number) => () => number) | undefined
}

const unavailable = (message: string, details: Record<string, unknown>) => (cause: unknown) =>
  InferenceFailure.modelUnavailable(`${message}: ${errorMessage(cause)}`, details, cause)

/** Checks the model file: readable, and a GGUF whose structure llama.cpp can trust. */
export const checkModelFile = (modelPath: string): Effect.Effect<void, InferenceFailure> =>
  Effect.tryPromise({
    try: () => fs.promises.access(modelPath, fs.constants.R_OK),
    catch: (cause) =>
      InferenceFailure.modelUnavailable(`model file not found or not readable: ${modelPath}`, { modelPath }, cause)
  }).pipe(Effect.zipRight(Gguf.validate(modelPath)), Effect.asVoid)

/** Loads the llama.cpp binding, released with the scope. */
export const loadBinding = (settings: Settings): Effect.Effect<Llama, InferenceFailure, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () =>
        getLlama({
          gpu: settings.gpu ? "auto" : false,
          build: "never",
          maxThreads: settings.threads,
          logLevel: LlamaLogLevel.error,
          progressLogs: false
        }),
      catch: unavailable("cannot load llama.cpp", { modelPath: settings.modelPath })
    }),
    (llama) => Effect.promise(() => llama.dispose())
  )

/** Loads the model, released with the scope. */
export const loadModel = (
  llama: Llama,
  settings: Settings
): Effect.Effect<LlamaModel, InferenceFailure, Scope.Scope> => {
  const { modelPath } = settings
  return Effect.acquireRelease(
    Effect.tryPromise({
      try: () => llama.loadModel({ modelPath, ...(settings.gpu ? {} : { gpuLayers: 0 }) }),
      catch: unavailable(`cannot load model ${modelPath}`, { modelPath })
    }),
    (model) => Effect.promise(() => model.dispose())
  )
}

/** Creates the context with one sequence per worker, released with the scope. */
export const createContext = (
  model: LlamaModel,
  settings: Settings
): Effect.Effect<LlamaContext, InferenceFailure, Scope.Scope> => {
  const { modelPath, sequences, threads } = settings
  const contextSize = settings.contextSize ?? Math.min(model.trainContextSize, DEFAULT_MAX_CONTEXT_SIZE)
  return Effect.acquireRelease(
    Effect.tryPromise({
      try: () =>
        model.createContext({
          sequences,
          contextSize,
          threads,
          ...(settings.batchSize === undefined ? {} : { batchSize: settings.batchSize })
        }),
      catch: unavailable(`cannot create a context of ${sequences} x ${contextSize} tokens`, {
        modelPath,
        contextSize,
        sequences
      })
    }),
    (context) => Effect.promise(() => context.dispose())
  )
}

/** The model's name: its GGUF metadata, else the file name. */
export const modelNameOf = (model: LlamaModel, modelPath: string): string =>
  model.fileInfo.metadata?.general?.name ?? path.basename(modelPath, ".gguf")

/** The chat wrapper asked for; else the bundled model's, else the one matching the model's template. */
export const chatWrapperOf = (model: LlamaModel, modelName: string, chatWrapper: ChatWrapper | undefined): ChatWrapper =>
  chatWrapper ?? (modelName === BUNDLED_MODEL_NAME ? new PaganticChatWrapper() : resolveChatWrapper(model))

/**
 * `sequence` with its `evaluate` (what LlamaChat samples through) asking for each
 * token's confidence while `exact()` holds: node-llama-cpp then applies the
 * grammar before the sampler chain instead of sampling first and checking after.
 * Otherwise its own `evaluate`. Tokens are as before.
 */
export const sampleGrammarFirst = (
  sequence: LlamaContextSequence,
  exact: () => boolean = () => true
): LlamaContextSequence => {
  const plain = sequence.evaluate.bind(sequence)
  const grammarFirst: LlamaContextSequence["evaluate"] = async function*(tokens, options) {
    const iterator = sequence.evaluateWithMetadata(tokens, { confidence: true }, options)
    let input: Parameters<typeof iterator.next>[0] = undefined
    try {
      while (true) {
        const { done, value } = await iterator.next(input)
        if (done === true) return
        input = yield value.token
      }
    } finally {
      await iterator.return()
    }
  }
  const evaluate: LlamaContextSequence["evaluate"] = (tokens, options) =>
    exact() ? grammarFirst(tokens, options) : plain(tokens, options)
  Object.defineProperty(sequence, "evaluate", { value: evaluate, configurable: true, writable: true })
  return sequence
}

/** Every sequence of the context with its chat. */
export const workersOf = (
  context: LlamaContext,
  sequences: number,
  chatWrapper: ChatWrapper,
  grammarSampling: GrammarSampling = "exact"
): Array<Worker> => {
  const workers: Array<Worker> = []
  for (let i = 0; i < sequences; i++) {
    const sampling = { constrained: true }
    const sequence = grammarSampling === "exact"
      ? sampleGrammarFirst(context.getSequence(), () => sampling.constrained)
      : context.getSequence()
    workers.push({ sequence, chat: new LlamaChat({ contextSequence: sequence, chatWrapper }), sampling })
  }
  return workers
}

/** Loads everything the engine holds; the native parts live as long as the surrounding scope. */
export const acquire = Effect.fnUntraced(function*(settings: Settings) {
  yield* checkModelFile(settings.modelPath)
  const llama = yield* loadBinding(settings)
  const model = yield* loadModel(llama, settings)
  const context = yield* createContext(model, settings)

  const modelName = modelNameOf(model, settings.modelPath)
  // LlamaChat renders each prompt the engine has just rendered: from memory (./RenderMemo.ts)
  const chatWrapper = RenderMemo.memoized(chatWrapperOf(model, modelName, settings.chatWrapper), {
    capacity: Math.max(RenderMemo.DEFAULT_CAPACITY, 2 * settings.sequences)
  })
  const workers = workersOf(context, settings.sequences, chatWrapper, settings.grammarSampling)
  const pool = yield* SequencePool.make(workers, {
    maxPinnedSessions: Math.max(0, settings.pinnedSessions ?? settings.sequences - 1)
  })
  const generating = new Set<LlamaContextSequence>()
  const sharing = PromptSharing.make(workers.map((worker) => worker.sequence), {
    minTokens: Math.max(0, settings.shareMinTokens ?? PromptSharing.DEFAULT_MIN_TOKENS),
    isGenerating: (sequence) => generating.has(sequence)
  })

  const contextWindow = context.contextSize
  const modelInfo = new ModelInfo({ name: modelName, contextWindow, supportsGrammar: true, supportsTools: true })
  const manySequences = yield* Effect.makeSemaphore(1)
  const resources: Resources = {
    llama,
    model,
    tokenizer: Tokens.memoized(model.tokenizer),
    chatWrapper,
    modelInfo,
    contextWindow,
    pool,
    sharing,
    generating,
    manySequences,
    sequences: settings.sequences,
    sampleRandom: settings.sampleRandom
  }
  return resources
})
