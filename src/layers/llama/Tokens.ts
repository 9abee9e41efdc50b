/**
 * The prompt's tokens, the pieces that repeat tokenized once.
 *
 * Before a generation the engine renders and tokenizes the prompt itself (to
 * check it fits, to choose and prepare a sequence, to count cached tokens), and
 * LlamaChat does it again inside. node-llama-cpp's `LlamaText.tokenize` calls the
 * model's tokenizer once per run of text between special tokens: a template's
 * markers, the system prompt, each message. Most of those runs repeat from one
 * request to the next (the same system prompt and tools; in a session, every
 * earlier message), and a native tokenizer call costs tens of microseconds,
 * which made tokenizing the largest part of the engine's own work on a short
 * answer. `memoized` keeps the tokens of recent runs (bounded: `capacity` runs,
 * none longer than `maxLength` characters); a run not seen before is tokenized
 * as before. Tokenizing is a pure function of the text and the model, so the
 * tokens are the same either way.
 */
import type { Token, Tokenizer } from "node-llama-cpp"
import { Lru } from "./Lru.js"

export const DEFAULT_CAPACITY = 1024
export const DEFAULT_MAX_LENGTH = 4096

const underlyingKey = Symbol.for("pagantic/Tokens/underlying")

/** The model's own tokenizer behind `tokenizer` (itself, unless `memoized` made it): the same tokens either way. */
export const underlying = (tokenizer: Tokenizer): Tokenizer =>
  (tokenizer as unknown as { readonly [underlyingKey]?: Tokenizer })[underlyingKey] ?? tokenizer

/** `tokenizer`, answering the runs it tokenized recently from memory. */
export const memoized = (
  tokenizer: Tokenizer,
  options: { readonly capacity?: number; readonly maxLength?: number } = {}
): Tokenizer => {
  const cache = new Lru<string, ReadonlyArray<Token>>(options.capacity ?? DEFAULT_CAPACITY)
  const maxLength = options.maxLength ?? DEFAULT_MAX_LENGTH
  const call = tokenizer as (text: string, specialTokens?: boolean | "builtin", mode?: "trimLeadingSpace") => Array<Token>
  const tokenize = (text: string, specialTokens?: boolean | "builtin", mode?: "trimLeadingSpace"): Array<Token> => {
    if (text.length > maxLength) return call(text, specialTokens, mode)
    const key = `${specialTokens === true ? "s" : specialTokens === "builtin" ? "b" : "t"}${mode === undefined ? "" : "l"}:${text}`
    const hit = cache.get(key)
    if (hit !== undefined) return hit.slice()
    const tokens = call(text, specialTokens, mode)
    cache.set(key, tokens.slice())
    return tokens
  }
  return Object.assign(tokenize, {
    [underlyingKey]: underlying(tokenizer),
    detokenize: tokenizer.detokenize,
    isSpecialToken: (token: Token) => tokenizer.isSpecialToken(token),
    isEogToken: (token: Token) => tokenizer.isEogToken(token)
  }) as unknown as Tokenizer
}
