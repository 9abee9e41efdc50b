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
 *
 * `sampleMany` draws N samples of one request as a prefix tree: the prompt and
 * every token the samples agree on are decoded once, and a sample forks onto a
 * sequence of its own (by KV copy) only where it draws a different token. Both
 * paths sample from the same distribution: the grammar applied before the
 * sampler chain (the exact constrained distribution), then top-k, top-p, min-p
 * and temperature (see llama/Resources and llama/TreeSampler).
 *
 * The parts live in llama/: Resources (loading), Generation (one request on a
 * sequence), SampleMany and TreeSampler (many samples of one request), Response
 * (node-llama-cpp's answers and errors in pagantic's terms).
 */
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { ChatWrapper } from "node-llama-cpp"
import type { InferenceFailure } from "../domain/Failure.js"
import * as Tracing from "../services/internal/Tracing.js"
import * as Engine from "../services/Engine.js"
import { StreamPart } from "../services/Engine.js"
import type { InferenceRequest, InferenceResult, Service } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import * as Generation from "./llama/Generation.js"
import * as Grammars from "./llama/Grammars.js"
import { BUNDLED_MODEL_FILE } from "./llama/PaganticChatWrapper.js"
import * as PromptSharing from "./llama/PromptSharing.js"
import * as Resources from "./llama/Resources.js"
import * as SampleMany from "./llama/SampleMany.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** How to load the model and size the context. Every field has a default that is fast on 2 CPU cores. */
export interface Options {
  /** Path of a GGUF file; defaults to the bundled model. */
  readonly modelPath?: string | undefined
  /** CPU threads for evaluation (default 1: more threads than cores is many times slower). */
  readonly threads?: number | undefined
  /** Tokens per sequence (default: the model's training context, at most 4096). */
  readonly contextSize?: number | undefined
  /** Offload to a GPU when one is available (default false). */
  readonly gpu?: boolean | undefined
  /** Tokens evaluated per batch (default: node-llama-cpp's choice). */
  readonly batchSize?: number | undefined
  /** Parallel sequences of the context: how many inferences decode at once (default 6). */
  readonly sequences?: number | undefined
  /** How many sessions may keep a sequence between turns (default: sequences - 1). */
  readonly pinnedSessions?: number | undefined
  /** The chat wrapper; default: the bundled model's, else the one matching the model's template. */
  readonly chatWrapper?: ChatWrapper | undefined
  /**
   * Prompt sharing: a request copies the longest prefix of its prompt that another
   * sequence holds (or is evaluating) instead of evaluating it again, when that
   * saves at least this many tokens (default 32; 0 turns sharing off).
   */
  readonly shareMinTokens?: number | undefined
  /** Compiled grammars kept for reuse, least recently used out first (default 64). */
  readonly grammarCacheSize?: number | undefined
  /**
   * How a grammar shapes sampling: "exact" (default) applies it before the
   * sampler chain, as `sampleMany` does; "lazy" is node-llama-cpp's shortcut
   * (sample, re-sample constrained only when refused), kept for measurements.
   */
  readonly grammarSampling?: Resources.GrammarSampling | undefined
  /**
   * The uniform random stream `sampleMany` gives each sample, from its seed
   * (default: a 32-bit generator seeded `seed + i`). For tests of the sampler's
   * distribution, which inject a biased stream to show they can fail.
   */
  readonly sampleRandom?: ((seed: number) => () => number) | undefined
}

export const DEFAULT_SEQUENCES = 6
export const DEFAULT_MAX_CONTEXT_SIZE = Resources.DEFAULT_MAX_CONTEXT_SIZE

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

/** What to load: the options with the defaults that need no model applied. */
const settingsOf = (options: Options): Resources.Settings => ({
  modelPath: path.resolve(options.modelPath ?? bundledModelPath()),
  threads: Math.max(1, options.threads ?? 1),
  sequences: Math.max(1, options.sequences ?? DEFAULT_SEQUENCES),
  gpu: options.gpu === true,
  contextSize: options.contextSize,
  batchSize: options.batchSize,
  chatWrapper: options.chatWrapper,
  pinnedSessions: options.pinnedSessions,
  shareMinTokens: options.shareMinTokens,
  grammarSampling: options.grammarSampling,
  sampleRandom: options.sampleRandom
})

// ---------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------

/** Tool call ids from the context's IdGenerator (random UUIDs unless a test provides another). */
const callIds = Effect.map(IdGenerator, (generator) => generator.next("call"))

/**
 * One generation as a source of parts: text deltas as they are decoded, then the
 * tool calls and the finish. Run directly by the loops (`Engine.runParts`), as a
 * Stream by every other consumer.
 */
const partsOf = (run: <E>(onText: Generation.OnText<E>) => Effect.Effect<InferenceResult, InferenceFailure | E>) =>
  Engine.streamFrom((emit) =>
    run((text) => emit(StreamPart.textDelta(text))).pipe(
      Effect.flatMap((result) =>
        Effect.zipRight(
          Effect.forEach(result.toolCalls, (call) => emit(StreamPart.toolCall(call)), { discard: true }),
          emit(StreamPart.finish(result))
        )
      ),
      Tracing.exportedSpan("LlamaEngine.stream")
    )
  )

/**
 * Loads the model and builds the engine. The model, context and binding live as
 * long as the surrounding scope. Fails with INFERENCE_MODEL_UNAVAILABLE when the
 * model file is missing or unreadable.
 */
export const make = Effect.fn("LlamaEngine.make")(function*(options: Options = {}) {
  const resources = yield* Resources.acquire(settingsOf(options))
  const nextCallId = yield* callIds
  // Grammars and schemas of requests: checked, then compiled once per text (a small LRU cache).
  const grammars = Grammars.make(resources.llama, { capacity: options.grammarCacheSize })
  const run = <E = never>(request: InferenceRequest, onText?: Generation.OnText<E>) =>
    Generation.run(resources, grammars, nextCallId, request, onText)

  // A span only when it goes somewhere: Effect.fn's span and stack capture cost ~0.1 ms a call.
  const infer = (request: InferenceRequest) => Tracing.exportedSpan("LlamaEngine.infer")(run(request))
  const stream = (request: InferenceRequest) => partsOf((onText) => run(request, onText))
  const plain: Service = { infer, stream, modelInfo: Effect.succeed(resources.modelInfo) }
  const sampleMany = (request: InferenceRequest, n: number) => SampleMany.sampleMany(resources, grammars, plain, request, n)

  return Engine.Engine.of({ ...plain, sampleMany }) satisfies Service
})

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/** The engine as a scoped layer: the model loads when the layer is built and is disposed with it. */
export const layer = (options: Options = {}): Layer.Layer<Engine.Engine, InferenceFailure> =>
  Layer.scoped(Engine.Engine, make(options))

/** The options read from configuration (environment variables by default). */
export const config: Config.Config<Options> = Config.all({
  modelPath: Config.option(Config.string("PAGANTIC_MODEL_PATH")),
  threads: Config.integer("PAGANTIC_THREADS").pipe(
    Config.validate({ message: "PAGANTIC_THREADS must be at least 1", validation: (threads) => threads >= 1 }),
    Config.withDefault(1)
  ),
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

/** `base` with the fields that `overrides` sets (an undefined field keeps the base's value). */
const overridden = (base: Options, overrides: Options): Options => {
  const merged: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(overrides)) {
    if (value !== undefined) merged[key] = value
  }
  return merged as Options
}

/**
 * The engine configured from `PAGANTIC_MODEL_PATH`, `PAGANTIC_THREADS` (at least 1),
 * `PAGANTIC_CONTEXT_SIZE`, `PAGANTIC_GPU`, `PAGANTIC_BATCH_SIZE`,
 * `PAGANTIC_SEQUENCES` and `PAGANTIC_SHARE_MIN_TOKENS`; `overrides` (e.g. a CLI `--model` flag) win over them.
 */
export const layerConfig = (
  overrides: Options = {}
): Layer.Layer<Engine.Engine, InferenceFailure | ConfigError.ConfigError> =>
  Layer.scoped(
    Engine.Engine,
    Effect.flatMap(config, (fromConfig) => make(overridden(fromConfig, overrides)))
  )
