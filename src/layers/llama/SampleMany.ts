/**
 * `sampleMany` of the llama.cpp engine: N samples of one request drawn as a
 * prefix tree (./TreeSampler.ts) on sequences taken from the pool together.
 *
 * The tree serves plain completions: a request with tools, stop texts,
 * log-probabilities or a session, or more samples than the context has
 * sequences, is drawn as N independent `infer` calls instead (the contract is
 * the same; only the shared decoding is lost). Sample i is seeded `seed + i`
 * when the request has a seed, else from the engine's Random. Each sample's
 * usage is its own: its answer's tokens, and the prompt tokens evaluated for it
 * (the first sample carries the prompt the tree evaluated once; the others copied it).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Random from "effect/Random"
import type { LlamaGrammar, Token } from "node-llama-cpp"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as Engine from "../../services/Engine.js"
import { InferenceResult } from "../../services/Engine.js"
import type { InferenceRequest } from "../../services/Engine.js"
import * as Generation from "./Generation.js"
import type * as Grammars from "./Grammars.js"
import { heldPrefix } from "./PromptSharing.js"
import type { Resources, Worker } from "./Resources.js"
import * as TreeSampler from "./TreeSampler.js"

/** Why a request is drawn by independent calls instead of the tree, if it is. */
export const independentReason = (resources: Resources, request: InferenceRequest, n: number): string | undefined =>
  n < 2
    ? "one sample"
    : n > resources.sequences
    ? "more samples than sequences"
    : request.tools.length > 0
    ? "tools"
    : request.stop !== undefined
    ? "stop texts"
    : request.logprobs === true
    ? "logprobs"
    : request.sessionKey !== undefined
    ? "a session"
    : undefined

/**
 * Runs `use` with `k` sequences of the pool, the first the best holder of
 * `prompt`. One taker of many at a time, so two never wait on each other's
 * sequences; single callers come and go between the takes.
 */
const withSequences = <B, E>(
  resources: Resources,
  k: number,
  prompt: ReadonlyArray<Token>,
  use: (workers: ReadonlyArray<Worker>) => Effect.Effect<B, E>
): Effect.Effect<B, E> =>
  Effect.suspend(() => {
    let released = false
    const releaseOnce = Effect.suspend(() => {
      if (released) return Effect.void
      released = true
      return resources.manySequences.release(1)
    })
    const affinity = (worker: Worker) => heldPrefix(worker.sequence, prompt)
    const take = (held: ReadonlyArray<Worker>): Effect.Effect<B, E> =>
      held.length === k
        ? Effect.zipRight(releaseOnce, use(held))
        : resources.pool.withSlot(undefined, held.length === 0 ? affinity : undefined, (slot) => take([...held, slot.value]))
    return Effect.acquireUseRelease(resources.manySequences.take(1), () => take([]), () => releaseOnce)
  })

/** The tree sampler's grammar, when the planned request has one and this node-llama-cpp can follow it per sample. */
const grammarOf = (resources: Resources, plan: Generation.Plan): LlamaGrammar | undefined | "unsupported" => {
  const grammar = plan.options.grammar
  if (grammar === undefined) return undefined
  return TreeSampler.supportsGrammar(resources.model, grammar) ? grammar : "unsupported"
}

/** A grammar's stop trigger as text (a trigger with tokens in it is left to the end-of-generation token). */
const triggerText = (trigger: LlamaGrammar["stopGenerationTriggers"][number]): ReadonlyArray<string> => {
  if (typeof trigger === "string") return [trigger]
  if (Array.isArray(trigger)) return trigger.every((part) => typeof part === "string") ? [trigger.join("")] : []
  return [String(trigger)]
}

/** N samples of `request`: the tree when it serves the request, else `fallback` (N independent infers). */
export const sampleMany = (
  resources: Resources,
  grammars: Grammars.Grammars,
  engine: Engine.Service,
  request: InferenceRequest,
  n: number
): Effect.Effect<ReadonlyArray<Either.Either<InferenceResult, InferenceFailure>>, InferenceFailure> =>
  Effect.gen(function*() {
    const count = Math.max(0, Math.floor(n))
    if (independentReason(resources, request, count) !== undefined) return yield* Engine.independentSamples(engine, request, count)
    const planned = yield* Generation.plan(resources, grammars, request)
    if (planned instanceof InferenceResult) return Array.from({ length: count }, () => Either.right(planned))
    const grammar = grammarOf(resources, planned)
    if (grammar === "unsupported") return yield* Engine.independentSamples(engine, request, count)
    const seeds = request.seed === undefined
      ? yield* Effect.forEach(Array.from({ length: count }), () => Random.nextIntBetween(0, 2 ** 31 - 1))
      : Array.from({ length: count }, (_, i) => Generation.samplerSeed(request.seed! + i))
    const topK = request.options?.["topK"]
    const minP = request.options?.["minP"]
    const settings: TreeSampler.Settings = {
      prompt: planned.prompt,
      maxTokens: planned.options.maxTokens ?? resources.contextWindow - planned.prompt.length - 1,
      temperature: request.temperature ?? 0,
      topK: typeof topK === "number" ? topK : undefined,
      minP: typeof minP === "number" ? minP : undefined,
      topP: request.topP,
      presencePenalty: request.presencePenalty,
      frequencyPenalty: request.frequencyPenalty,
      grammar,
      stopTexts: grammar === undefined ? [] : grammar.stopGenerationTriggers.flatMap(triggerText),
      seeds,
      random: resources.sampleRandom
    }
    const trim = grammar?.trimWhitespaceSuffix === true
    return yield* withSequences(resources, count, planned.prompt, (workers) =>
      Effect.gen(function*() {
        const sequences = workers.map((worker) => worker.sequence)
        const start = yield* Clock.currentTimeNanos
        yield* resources.sharing.prepare(sequences[0]!, planned.prompt)
        const outcome = yield* Effect.acquireUseRelease(
          Effect.sync(() => sequences.forEach((sequence) => resources.generating.add(sequence))),
          () => TreeSampler.sample(resources.model, sequences, settings),
          () => Effect.sync(() => sequences.forEach((sequence) => resources.generating.delete(sequence)))
        )
        const seconds = Number((yield* Clock.currentTimeNanos) - start) / 1e9
        yield* Effect.annotateCurrentSpan({
          "pagantic.samples": count,
          "pagantic.tree.decoded": outcome.decoded,
          "pagantic.tree.forks": outcome.forks
        })
        return outcome.samples.map((sample, i) => {
          // the first sample counts the prompt's evaluated tokens, every other one holds the whole prompt
          const evaluated = i === 0 ? outcome.promptEvaluated : 0
          const cached = Math.max(0, planned.prompt.length - evaluated)
          return Either.right(
            new InferenceResult({
              content: trim ? sample.text.trimEnd() : sample.text,
              toolCalls: [],
              finishReason: sample.finish,
              usage: new TokenUsage.TokenUsage({
                promptTokens: evaluated,
                ...(cached === 0 ? {} : { cachedPromptTokens: cached }),
                reasoningTokens: 0,
                outputTokens: sample.sampled,
                contextTokens: planned.prompt.length + sample.tokens.length,
                contextWindow: resources.contextWindow,
                tokensPerSecond: seconds > 0 ? sample.sampled / seconds : 0,
                calls: 1
              }, true)
            }, true)
          )
        })
      }))
  }).pipe(Effect.withSpan("LlamaEngine.sampleMany"))
