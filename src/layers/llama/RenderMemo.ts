/**
 * The prompt rendered and tokenized once per generation.
 *
 * Before a generation the engine renders the request's chat history with the
 * chat wrapper and tokenizes it (to check that it fits, to choose and prepare a
 * sequence); then LlamaChat renders the very same history with the same wrapper
 * and tokenizes it again, with the model's own tokenizer, before it evaluates
 * anything. On a short answer those two passes were a tenth of the engine's own
 * work around node-llama-cpp (issue 13).
 *
 * `memoized(wrapper)` is the wrapper (an object whose prototype is the wrapper:
 * every method and setting inherited from it; the renders made by the wrapper
 * itself) whose `generateContextState` answers a render it made recently from
 * memory: the same history items (the same objects, with the same text and the
 * same response parts, so an item changed in place is rendered again), the same
 * functions and the same `documentFunctionParams`. The rendered text remembers
 * its tokens for the model it was tokenized for, whichever of the model's
 * tokenizers (the engine's memoized one, ./Tokens.ts, or the model's own) asks.
 * Rendering and tokenizing are pure functions of those inputs, so a render from
 * memory is the render the wrapper would make; only the time differs.
 */
import type {
  ChatHistoryItem,
  ChatWrapper,
  ChatWrapperGenerateContextStateOptions,
  ChatWrapperGeneratedContextState,
  LlamaText,
  Token,
  Tokenizer
} from "node-llama-cpp"
import * as Tokens from "./Tokens.js"

/** How many recent renders are kept, by default: more than the requests that render between a plan and its generation. */
export const DEFAULT_CAPACITY = 16

/** What an item of the history was when it was rendered: the item, and the parts that could change in place. */
interface ItemSnapshot {
  readonly item: ChatHistoryItem
  readonly text: unknown
  readonly response: ReadonlyArray<unknown> | undefined
  readonly parts: ReadonlyArray<unknown> | undefined
}

interface Entry {
  readonly items: ReadonlyArray<ItemSnapshot>
  readonly functions: ChatWrapperGenerateContextStateOptions["availableFunctions"]
  readonly documentFunctionParams: ChatWrapperGenerateContextStateOptions["documentFunctionParams"]
  readonly state: ChatWrapperGeneratedContextState
}

const snapshot = (item: ChatHistoryItem): ItemSnapshot =>
  item.type === "model"
    ? { item, text: undefined, response: item.response, parts: item.response.slice() }
    : { item, text: item.text, response: undefined, parts: undefined }

const unchanged = (seen: ItemSnapshot, item: ChatHistoryItem | undefined): boolean => {
  if (seen.item !== item) return false
  if (item.type !== "model") return seen.text === item.text
  const parts = seen.parts!
  if (seen.response !== item.response || parts.length !== item.response.length) return false
  for (let i = 0; i < parts.length; i++) if (parts[i] !== item.response[i]) return false
  return true
}

const matches = (entry: Entry, options: ChatWrapperGenerateContextStateOptions): boolean => {
  const history = options.chatHistory
  if (entry.items.length !== history.length) return false
  if (entry.functions !== options.availableFunctions || entry.documentFunctionParams !== options.documentFunctionParams) {
    return false
  }
  for (let i = 0; i < history.length; i++) if (!unchanged(entry.items[i]!, history[i])) return false
  return true
}

/**
 * `text`, tokenizing once per model tokenizer and options: later calls get a copy
 * of the tokens (a caller may change the array it gets).
 */
const rememberingTokens = (text: LlamaText): LlamaText => {
  const tokenize = text.tokenize
  let remembered: { readonly model: Tokenizer; readonly options: unknown; readonly tokens: ReadonlyArray<Token> } | undefined
  Object.defineProperty(text, "tokenize", {
    configurable: true,
    writable: true,
    value: (tokenizer: Tokenizer, options?: "trimLeadingSpace") => {
      const model = Tokens.underlying(tokenizer)
      if (remembered !== undefined && remembered.model === model && remembered.options === options) {
        return remembered.tokens.slice()
      }
      const tokens: Array<Token> = tokenize.call(text, tokenizer, options)
      remembered = { model, options, tokens: tokens.slice() }
      return tokens
    }
  })
  return text
}

/** `wrapper`, its recent renders answered from memory (see the module's comment); at most `capacity` kept. */
export const memoized = <W extends ChatWrapper>(wrapper: W, options: { readonly capacity?: number } = {}): W => {
  const capacity = Math.max(1, options.capacity ?? DEFAULT_CAPACITY)
  // most recent last
  const recent: Array<Entry> = []
  const derived = Object.create(wrapper) as W
  const render = wrapper.generateContextState
  Object.defineProperty(derived, "generateContextState", {
    configurable: true,
    writable: true,
    value: (renderOptions: ChatWrapperGenerateContextStateOptions): ChatWrapperGeneratedContextState => {
      for (let i = recent.length - 1; i >= 0; i--) {
        const entry = recent[i]!
        if (matches(entry, renderOptions)) return entry.state
      }
      // rendered by the wrapper itself: whatever it keeps while rendering stays its own
      const rendered = render.call(wrapper, renderOptions)
      const state = { ...rendered, contextText: rememberingTokens(rendered.contextText) }
      recent.push({
        items: renderOptions.chatHistory.map(snapshot),
        functions: renderOptions.availableFunctions,
        documentFunctionParams: renderOptions.documentFunctionParams,
        state
      })
      if (recent.length > capacity) recent.shift()
      return state
    }
  })
  return derived
}
