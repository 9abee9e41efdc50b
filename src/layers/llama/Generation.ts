/**
 * One generation of the llama.cpp engine: a request is turned into a chat
 * history, a grammar or functions, a tokenized prompt that must fit the context,
 * and generation options (`plan`); then it runs on a borrowed sequence (`generate`).
 *
 * The sampling controls map onto node-llama-cpp's: `stop` texts are custom stop
 * triggers (the text before one is the answer, the trigger is left out), the
 * presence and frequency penalties are its repeat penalty's (over the last 64
 * tokens of the answer), and `seed` seeds the sampler. Log-probabilities are
 * measured after the generation, on the same sequence (./Logprobs.ts).
 *
 * Functions and grammars exclude each other in llama.cpp chat: with tools, the
 * call syntax wins. Interruption aborts the generation and waits for llama.cpp to
 * stop before the sequence goes back to the pool, so no two generations ever
 * share a sequence.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Mailbox from "effect/Mailbox"
import * as Random from "effect/Random"
import type {
  ChatHistoryItem,
  ChatModelFunctions,
  LlamaChatResponse,
  LlamaChatResponseFunctionCallParamsChunk,
  LLamaChatGenerateResponseOptions,
  LlamaGrammar,
  Token
} from "node-llama-cpp"
import { InferenceFailure } from "../../domain/Failure.js"
import { InferenceResult } from "../../services/Engine.js"
import type { InferenceRequest } from "../../services/Engine.js"
import { toChatFunctions, toChatHistory } from "./ChatHistory.js"
import type * as Grammars from "./Grammars.js"
import * as Logprobs from "./Logprobs.js"
import { heldPrefix } from "./PromptSharing.js"
import type { Resources, Worker } from "./Resources.js"
import * as Response from "./Response.js"

/** A request ready to generate: its history, prompt and options, checked against the context. */
export interface Plan {
  readonly history: Array<ChatHistoryItem>
  readonly prompt: ReadonlyArray<Token>
  readonly options: LLamaChatGenerateResponseOptions<ChatModelFunctions>
  /** The last parameters chunk of each function call, to tell a call cut off by maxTokens. */
  readonly partialCalls: Map<number, LlamaChatResponseFunctionCallParamsChunk>
  /** The answer's tokens as they are released (collected only when the request asks for logprobs). */
  readonly content: Array<Token>
  /** Whether it samples (temperature above 0) under a grammar or the function-call syntax. */
  readonly constrained: boolean
}

/** Sampling options the request passes in `options` that node-llama-cpp understands. */
const extraSampling = (options: InferenceRequest["options"]) => {
  const topK = options?.["topK"]
  const minP = options?.["minP"]
  return { ...(typeof topK === "number" ? { topK } : {}), ...(typeof minP === "number" ? { minP } : {}) }
}

/**
 * A request's seed as llama.cpp's sampler seed: an unsigned 32-bit value other
 * than 0xFFFFFFFF, which llama.cpp reads as "draw a random seed". Any integer
 * (negative ones too, as clients send -1) maps to one reproducible seed.
 */
export const samplerSeed = (seed: number): number => {
  const range = 2 ** 32 - 1
  return ((seed % range) + range) % range
}

/** The request's presence and frequency penalties as node-llama-cpp's repeat penalty, when it sets one. */
const repeatPenalty = (request: InferenceRequest) =>
  request.presencePenalty === undefined && request.frequencyPenalty === undefined
    ? {}
    : {
      repeatPenalty: {
        ...(request.presencePenalty === undefined ? {} : { presencePenalty: request.presencePenalty }),
        ...(request.frequencyPenalty === undefined ? {} : { frequencyPenalty: request.frequencyPenalty })
      }
    }

/**
 * Prepares a request, or answers it at once: a request for no tokens gets an
 * empty result ("length") without touching a sequence.
 *
 * A chain of steps, not a generator: a request with no grammar and no sampling
 * seed to draw is planned in one step (a short answer's few milliseconds of
 * decoding pay for every step around them, issue 13).
 */
export const plan = (
  resources: Resources,
  grammars: Grammars.Grammars,
  request: InferenceRequest
): Effect.Effect<Plan | InferenceResult, InferenceFailure> =>
  Effect.suspend(() => {
    const converted = toChatHistory(request.messages)
    if ("_tag" in converted) return Effect.fail(Response.orphanToolResult(converted))
    const history = converted.history
    const functions = request.tools.length > 0 ? toChatFunctions(request.tools) : undefined
    const withGrammar = (grammar: LlamaGrammar | undefined) =>
      // each call that samples draws its own seed (see `planned`)
      request.seed === undefined && (request.temperature ?? 0) > 0
        ? Effect.flatMap(
          Random.nextIntBetween(0, 2 ** 31 - 1),
          (seed) => planned(resources, request, history, functions, grammar, seed)
        )
        : planned(resources, request, history, functions, grammar, undefined)
    if (functions !== undefined) return withGrammar(undefined)
    if (request.grammar !== undefined) {
      return Effect.flatMap(Effect.mapError(grammars.gbnf(request.grammar), Response.grammarRejected), withGrammar)
    }
    if (request.schema !== undefined) {
      return Effect.flatMap(Effect.mapError(grammars.schema(request.schema), Response.grammarRejected), withGrammar)
    }
    return withGrammar(undefined)
  })

/** The plan of a request whose history, functions, grammar and drawn seed (when it samples without one) are known. */
const planned = (
  resources: Resources,
  request: InferenceRequest,
  history: Array<ChatHistoryItem>,
  functions: ChatModelFunctions | undefined,
  grammar: LlamaGrammar | undefined,
  drawnSeed: number | undefined
): Effect.Effect<Plan | InferenceResult, InferenceFailure> => {
  const { chatWrapper, contextWindow, tokenizer } = resources
  let prompt: ReadonlyArray<Token>
  try {
    prompt = chatWrapper.generateContextState({
      chatHistory: history,
      ...(functions === undefined ? {} : { availableFunctions: functions })
    }).contextText.tokenize(tokenizer)
  } catch (cause) {
    return Effect.fail(InferenceFailure.engineError(`cannot render the prompt: ${Response.errorMessage(cause)}`, {}, cause))
  }
  const promptTokens = prompt.length
  const room = contextWindow - promptTokens - 1
  if (room < 1) {
    return Effect.fail(InferenceFailure.contextExceeded(
      `the prompt has ${promptTokens} tokens; the context window holds ${contextWindow}`,
      { promptTokens, contextWindow }
    ))
  }
  const maxTokens = Math.min(request.maxTokens ?? room, room)
  if (maxTokens === 0) return Effect.succeed(Response.empty(contextWindow, request.logprobs === true))

  const partialCalls = new Map<number, LlamaChatResponseFunctionCallParamsChunk>()
  const content: Array<Token> = []
  const options: LLamaChatGenerateResponseOptions<ChatModelFunctions> = {
    maxTokens,
    contextShift: Response.contextShift,
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    ...(request.topP === undefined ? {} : { topP: request.topP }),
    // node-llama-cpp's default seed is the current second: replicas sampled in the
    // same second would all draw the same tokens. Each call that samples draws its
    // own seed; greedy decoding (temperature 0, the default) has no use for one.
    ...(request.seed !== undefined
      ? { seed: samplerSeed(request.seed) }
      : drawnSeed !== undefined
      ? { seed: drawnSeed }
      : {}),
    ...extraSampling(request.options),
    ...repeatPenalty(request),
    ...(request.stop === undefined ? {} : { customStopTriggers: [...request.stop] }),
    ...(request.logprobs === true ? { onToken: (tokens: Array<Token>) => content.push(...tokens) } : {}),
    ...(functions !== undefined
      ? { functions, onFunctionCallParamsChunk: (chunk) => partialCalls.set(chunk.callIndex, chunk) }
      : grammar !== undefined
      ? { grammar }
      : {})
  }
  const constrained = (request.temperature ?? 0) > 0 && (functions !== undefined || grammar !== undefined)
  return Effect.succeed({ history, prompt, options, partialCalls, content, constrained } satisfies Plan)
}

/** Text as it is decoded, handed on in the generation's own fiber. */
export type OnText<E> = (text: string) => Effect.Effect<void, E>

/** node-llama-cpp's generation started on `worker`, the sequence marked busy until it settles. */
const start = (
  resources: Resources,
  worker: Worker,
  planned: Plan,
  onTextChunk: ((text: string) => void) | undefined
) => {
  const { chat, sequence } = worker
  // Greedy, or free: the grammar-first path would draw the very same tokens, at a cost per token.
  worker.sampling.constrained = planned.constrained
  const controller = new AbortController()
  resources.generating.add(sequence)
  const done = chat.generateResponse(planned.history, {
    ...planned.options,
    ...(onTextChunk === undefined ? {} : { onTextChunk }),
    signal: controller.signal
  })
  void done.finally(() => resources.generating.delete(sequence)).catch(() => undefined)
  // stopping aborts the generation and waits for llama.cpp to let go of the sequence
  const stop = Effect.promise(() => {
    controller.abort()
    return done.then(() => undefined, () => undefined)
  })
  return { done, stop }
}

/** A generation's failure in pagantic's terms. */
const failureOf = (resources: Resources, planned: Plan) => (error: unknown): InferenceFailure =>
  Response.fromGenerationError(error, { promptTokens: planned.prompt.length, contextWindow: resources.contextWindow })

/** Runs node-llama-cpp's generation on `worker`; interruption aborts it and waits for it to stop. */
const generateResponse = (
  resources: Resources,
  worker: Worker,
  planned: Plan
): Effect.Effect<LlamaChatResponse<ChatModelFunctions>, InferenceFailure> =>
  Effect.async<LlamaChatResponse<ChatModelFunctions>, InferenceFailure>((resume) => {
    const { done, stop } = start(resources, worker, planned, undefined)
    const failure = failureOf(resources, planned)
    done.then((response) => resume(Effect.succeed(response)), (error) => resume(Effect.fail(failure(error))))
    return stop
  })

/**
 * The generation with its text handed to `onText` as it is decoded: the chunks
 * llama.cpp's callbacks leave in a mailbox are taken in this fiber between
 * tokens, so no second fiber runs beside it. A failing `onText` or an
 * interruption stops the generation.
 */
const streamResponse = <E>(
  resources: Resources,
  worker: Worker,
  planned: Plan,
  onText: OnText<E>
): Effect.Effect<LlamaChatResponse<ChatModelFunctions>, InferenceFailure | E> =>
  Effect.acquireUseRelease(
    Effect.map(Mailbox.make<string>(), (texts) => {
      const started = start(resources, worker, planned, (text) => {
        if (text !== "") texts.unsafeOffer(text)
      })
      void started.done.finally(() => texts.unsafeDone(Exit.void)).catch(() => undefined)
      return { texts, ...started }
    }),
    ({ done, texts }) =>
      Effect.gen(function*() {
        for (;;) {
          const [chunks, ended] = yield* texts.takeAll
          for (const text of chunks) yield* onText(text)
          if (ended) return yield* Effect.tryPromise({ try: () => done, catch: failureOf(resources, planned) })
        }
      }),
    ({ stop }, exit) => (Exit.isSuccess(exit) ? Effect.void : stop)
  )

/** The answer's log-probabilities, the sequence marked busy meanwhile (no donor while it is written). */
const measuring = (resources: Resources, sequence: Worker["sequence"], measure: Logprobs.Measure) =>
  Effect.acquireUseRelease(
    Effect.sync(() => resources.generating.add(sequence)),
    () => Logprobs.measure(resources.model, sequence, measure),
    () => Effect.sync(() => resources.generating.delete(sequence))
  ).pipe(Effect.withSpan("LlamaEngine.logprobs", { attributes: { "pagantic.tokens": measure.content.length } }))

/**
 * Generates a planned request on a sequence borrowed from the pool (its session's, else the best prefix).
 * A chain of steps, the clock read in the steps around the generation (see `plan`).
 */
export const generate = <E = never>(
  resources: Resources,
  request: InferenceRequest,
  planned: Plan,
  nextCallId: Effect.Effect<string>,
  onText?: OnText<E>
): Effect.Effect<InferenceResult, InferenceFailure | E> => {
  const affinity = (worker: Worker) => heldPrefix(worker.sequence, planned.prompt)
  return resources.pool.withSlot(request.sessionKey, affinity, (slot) =>
    Effect.withFiberRuntime((fiber) => {
      const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
      const { sequence } = slot.value
      const before = sequence.tokenMeter.getState()
      const start = clock.unsafeCurrentTimeNanos()
      return Effect.flatMap(resources.sharing.prepare(sequence, planned.prompt), (shared) => {
        const response = onText === undefined
          ? generateResponse(resources, slot.value, planned)
          : streamResponse(resources, slot.value, planned, onText)
        const generated = Effect.flatMap(response, (response) => {
          const elapsedNanos = clock.unsafeCurrentTimeNanos() - start
          const used = sequence.tokenMeter.diff(before)
          const usage = Response.usageOf(used, sequence, resources.contextWindow, elapsedNanos, planned.prompt.length)
          return Effect.flatMap(Response.toolCallsOf(response, request, planned.partialCalls, nextCallId), (toolCalls) => {
            const result = Response.resultOf(response, toolCalls, usage)
            if (request.logprobs !== true) return Effect.succeed(result)
            return Effect.map(
              measuring(resources, sequence, { prompt: planned.prompt, content: planned.content, top: request.topLogprobs ?? 0 }),
              (logprobs) => new InferenceResult({ ...result, logprobs }, true)
            )
          })
        })
        return shared._tag === "Copied"
          ? Effect.zipRight(Effect.annotateCurrentSpan("pagantic.prompt.copied_tokens", shared.tokens), generated)
          : generated
      })
    }))
}

/** Plans and generates one request; `onText`, when given, receives the text as it is decoded. */
export const run = <E = never>(
  resources: Resources,
  grammars: Grammars.Grammars,
  nextCallId: Effect.Effect<string>,
  request: InferenceRequest,
  onText?: OnText<E>
): Effect.Effect<InferenceResult, InferenceFailure | E> =>
  Effect.flatMap(
    plan(resources, grammars, request),
    (planned) =>
      planned instanceof InferenceResult ? Effect.succeed(planned) : generate(resources, request, planned, nextCallId, onText)
  )
