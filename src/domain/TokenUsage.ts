/**
 * Layer 0: what an inference cost.
 *
 * Usage is combined across calls (a tool loop, N replicas, a plan): token counts
 * add up, throughput is averaged over the calls (weighted by call count), and the context
 * window is the largest seen.
 */
import * as Schema from "effect/Schema"
import * as Construct from "./Construct.js"

export class TokenUsage extends Schema.Class<TokenUsage>("TokenUsage")({
  /** Prompt tokens the engine evaluated. */
  promptTokens: Schema.NonNegativeInt,
  /**
   * Prompt tokens the engine did not evaluate because it already held them (a
   * sequence's previous prompt, or cells copied from another sequence): not in
   * `promptTokens`. A prompt's length is `promptTokens + cachedPromptTokens`.
   * Absent when none were.
   */
  cachedPromptTokens: Schema.optional(Schema.NonNegativeInt),
  reasoningTokens: Schema.NonNegativeInt,
  outputTokens: Schema.NonNegativeInt,
  contextTokens: Schema.NonNegativeInt,
  contextWindow: Schema.NonNegativeInt,
  tokensPerSecond: Schema.NonNegative,
  /** How many inference calls this usage covers; it weighs the tokens/s average. */
  calls: Schema.NonNegativeInt
}) {
  get totalTokens(): number {
    return this.promptTokens + this.reasoningTokens + this.outputTokens
  }
}

export const empty: TokenUsage = new TokenUsage({
  promptTokens: 0,
  reasoningTokens: 0,
  outputTokens: 0,
  contextTokens: 0,
  contextWindow: 0,
  tokensPerSecond: 0,
  calls: 0
})

/** The usage of a single inference call. */
export const make = (fields: {
  readonly promptTokens?: number
  readonly reasoningTokens?: number
  readonly outputTokens?: number
  readonly contextTokens?: number
  readonly contextWindow?: number
  readonly tokensPerSecond?: number
}): TokenUsage =>
  new TokenUsage({
    promptTokens: fields.promptTokens ?? 0,
    reasoningTokens: fields.reasoningTokens ?? 0,
    outputTokens: fields.outputTokens ?? 0,
    contextTokens: fields.contextTokens ?? 0,
    contextWindow: fields.contextWindow ?? 0,
    tokensPerSecond: fields.tokensPerSecond ?? 0,
    calls: 1
  })

/**
 * Combines two usages: sums the token counts, averages tokens/s over the calls
 * weighted by how many calls each side covers, keeps the largest context window and context size.
 * Associative, with `empty` as identity.
 */
export const combine = (a: TokenUsage, b: TokenUsage): TokenUsage => {
  // the first usage a loop or a request adds to `empty` is that usage (nothing built: every inference starts a sum)
  if (a === empty && b.calls > 0 && b.cachedPromptTokens !== 0) return b
  const calls = a.calls + b.calls
  // sums, maxima and weighted means of valid usages are valid: no re-validation
  const cached = (a.cachedPromptTokens ?? 0) + (b.cachedPromptTokens ?? 0)
  return Construct.unchecked(TokenUsage, {
    promptTokens: a.promptTokens + b.promptTokens,
    ...(cached === 0 ? {} : { cachedPromptTokens: cached }),
    reasoningTokens: a.reasoningTokens + b.reasoningTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    contextTokens: Math.max(a.contextTokens, b.contextTokens),
    contextWindow: Math.max(a.contextWindow, b.contextWindow),
    tokensPerSecond: calls === 0 ? 0 : (a.tokensPerSecond * a.calls + b.tokensPerSecond * b.calls) / calls,
    calls
  })
}

/** Combines any number of usages. */
export const combineAll = (usages: Iterable<TokenUsage>): TokenUsage => {
  let acc = empty
  for (const u of usages) acc = combine(acc, u)
  return acc
}
