/**
 * Layer 0: sampling controls and token log-probabilities.
 *
 * The controls an OpenAI-style client sends with a completion, with the bounds
 * that API gives them: stop texts (generation ends before the first of them,
 * which is not part of the content), presence and frequency penalties (llama.cpp's
 * repeat penalties), and a request for the log-probability of each generated
 * token with its most likely alternatives. An engine that cannot honour one of
 * them refuses it with a typed failure naming the field; none is dropped silently.
 */
import * as Schema from "effect/Schema"

/** Most stop texts a request may carry. */
export const maxStopTexts = 4

/** Most alternatives per token a request may ask for. */
export const maxTopLogprobs = 20

/** The longest stop text, in characters (each is matched against the text as it is generated). */
export const maxStopTextLength = 1_000

/** 1 to 4 non-empty texts of at most 1,000 characters; generation ends before the first one produced, which is left out of the content. */
export const StopTexts = Schema.Array(Schema.NonEmptyString.pipe(Schema.maxLength(maxStopTextLength))).pipe(
  Schema.minItems(1),
  Schema.maxItems(maxStopTexts)
)

/** A presence or frequency penalty: -2 to 2, positive values discourage repeating tokens already produced. */
export const Penalty = Schema.Number.pipe(Schema.between(-2, 2))

/** How many alternatives to report per generated token: 0 to 20. */
export const TopLogprobs = Schema.Int.pipe(Schema.between(0, maxTopLogprobs))

/** A token and its natural log-probability (finite, at most 0). */
export const TokenAlternative = Schema.Struct({
  token: Schema.String,
  logprob: Schema.Number
}).annotations({ identifier: "TokenAlternative" })
export type TokenAlternative = typeof TokenAlternative.Type

/**
 * One generated token of the content: its text, its log-probability under the
 * model, and the most likely tokens at that position, most likely first.
 */
export const TokenLogprob = Schema.Struct({
  token: Schema.String,
  logprob: Schema.Number,
  topLogprobs: Schema.Array(TokenAlternative)
}).annotations({ identifier: "TokenLogprob" })
export type TokenLogprob = typeof TokenLogprob.Type

/** The log-probabilities of a content, one entry per generated token, in order. */
export const Logprobs = Schema.Array(TokenLogprob)
export type Logprobs = typeof Logprobs.Type
