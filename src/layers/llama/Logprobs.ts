/**
 * Token log-probabilities of a generated answer on llama.cpp.
 *
 * node-llama-cpp's chat generation samples without reporting probabilities, so
 * they are measured right after it, on the sequence that generated the answer and
 * still holds it: the prompt's last token and the content's tokens are evaluated
 * again in one batch (`controlledEvaluate`), reading at each position the logit of
 * the token that came next, the highest logits, and the total weight of the
 * vocabulary. A log-probability is then `logit - maxLogit - ln(totalWeight)`: the
 * model's own distribution at that position, before temperature, top-p, penalties
 * or a grammar shaped the choice (as llama.cpp's server reports it by default).
 * The sequence ends holding the prompt and the content, as a next turn wants.
 */
import * as Effect from "effect/Effect"
import type { ControlledEvaluateInputItem, ControlledEvaluateIndexOutput, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp"
import { InferenceFailure } from "../../domain/Failure.js"
import type { Logprobs, TokenAlternative } from "../../domain/Sampling.js"
import { commonPrefixLength } from "./PromptSharing.js"
import * as Response from "./Response.js"

/** What to measure: the prompt the answer followed, the answer's tokens, how many alternatives per token. */
export interface Measure {
  readonly prompt: ReadonlyArray<Token>
  readonly content: ReadonlyArray<Token>
  readonly top: number
}

const textOf = (model: LlamaModel, token: Token): string => model.detokenize([token], true)

/** The entry of one content token from the output at the position before it. */
const entryOf = (
  model: LlamaModel,
  token: Token,
  output: ControlledEvaluateIndexOutput | undefined,
  top: number
): Logprobs[number] | undefined => {
  const logits = output?.next.logits
  const weight = output?.next.totalLogitWeight
  const logit = logits?.get(token)
  if (logits === undefined || weight === undefined || logit === undefined || !(weight > 0)) return undefined
  const ranked = [...logits.entries()].sort(([, a], [, b]) => b - a)
  const max = ranked[0]![1]
  const norm = max + Math.log(weight)
  const topLogprobs: Array<TokenAlternative> = ranked.slice(0, top).map(([alternative, value]) => ({
    token: textOf(model, alternative),
    logprob: Math.min(0, value - norm)
  }))
  return { token: textOf(model, token), logprob: Math.min(0, logit - norm), topLogprobs }
}

/**
 * Measures the log-probability of each content token on `sequence`, which must be
 * held by the caller (no generation runs on it meanwhile). Interruption waits for
 * llama.cpp to finish the batch, so the sequence never goes back mid-write.
 */
export const measure = (
  model: LlamaModel,
  sequence: LlamaContextSequence,
  { content, prompt, top }: Measure
): Effect.Effect<Logprobs, InferenceFailure> => {
  if (content.length === 0) return Effect.succeed([])
  const target = [...prompt, ...content]
  // logits are read from the position before each content token: the prompt's last one onwards
  const first = prompt.length - 1
  const evaluate = async () => {
    const from = Math.max(0, Math.min(commonPrefixLength(sequence.contextTokens, target), first))
    await sequence.eraseContextTokenRanges([{ start: from, end: sequence.nextTokenIndex }])
    const input: Array<ControlledEvaluateInputItem> = target.slice(from).map((token, i) => {
      const next = target[from + i + 1]
      return from + i < first || next === undefined
        ? token
        : [token, { generateNext: { logits: { filter: { tokens: [next], includeTop: Math.max(1, top) } }, totalLogitWeight: true } }]
    })
    const outputs = await sequence.controlledEvaluate(input, { contextShift: Response.contextShift })
    return content.map((token, j) => entryOf(model, token, outputs[first + j - from], top))
  }
  return Effect.async<Logprobs, InferenceFailure>((resume) => {
    const done = evaluate()
    done.then(
      (entries) => {
        const missing = entries.findIndex((entry) => entry === undefined)
        resume(
          missing === -1
            ? Effect.succeed(entries as Logprobs)
            : Effect.fail(InferenceFailure.engineError("llama.cpp returned no logits for a generated token", { index: missing }))
        )
      },
      (error) =>
        resume(Effect.fail(Response.fromGenerationError(error, { phase: "logprobs", tokens: target.length })))
    )
    return Effect.promise(() => done.then(() => undefined, () => undefined))
  })
}
