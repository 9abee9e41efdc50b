/**
 * The engine's render memory (layers/llama/RenderMemo.ts): a render asked again
 * with the same history items, functions and options comes from memory, the
 * same render the wrapper would make; an item changed in place, other
 * functions or other options are rendered again; the memory is bounded; the
 * rendered text tokenizes once per model tokenizer, and every caller gets an
 * array of its own. The engine's use of it, on the real model, is in
 * test/LlamaEngine.test.ts ("a prompt is rendered once per generation").
 */
import { describe, expect, it } from "@effect/vitest"
import { LlamaText } from "node-llama-cpp"
import type { ChatHistoryItem, ChatModelFunctions, ChatWrapperGenerateContextStateOptions, Token, Tokenizer } from "node-llama-cpp"
import { BUNDLED_CALCULATOR_TOOL, PaganticChatWrapper } from "../src/layers/llama/PaganticChatWrapper.js"
import * as RenderMemo from "../src/layers/llama/RenderMemo.js"
import * as Tokens from "../src/layers/llama/Tokens.js"

class CountingWrapper extends PaganticChatWrapper {
  rendered = 0
  override generateContextState(options: ChatWrapperGenerateContextStateOptions) {
    this.rendered++
    return super.generateContextState(options)
  }
}

/** A tokenizer of character codes that counts its calls (special-token text as one token per run). */
const fakeTokenizer = () => {
  const counter = { calls: 0 }
  const tokenize = (text: string, special?: boolean | "builtin") => {
    counter.calls++
    if (special === "builtin") return [1 as Token]
    return special === true && text !== "" ? [1000 + text.length as Token] : [...text].map((c) => c.charCodeAt(0) as Token)
  }
  const tokenizer = Object.assign(tokenize, {
    detokenize: (tokens: ReadonlyArray<Token>) => String.fromCharCode(...tokens),
    isSpecialToken: () => false,
    isEogToken: () => false
  }) as unknown as Tokenizer
  return { tokenizer, counter }
}

const functions: ChatModelFunctions = {
  calculator: { description: BUNDLED_CALCULATOR_TOOL.description, params: BUNDLED_CALCULATOR_TOOL.parameters }
}

const history = (user: string): Array<ChatHistoryItem> => [
  { type: "system", text: LlamaText("You are a helpful assistant.").toJSON() },
  { type: "user", text: user },
  { type: "model", response: [] }
]

describe("RenderMemo", () => {
  it("answers the same render again from memory, equal to the wrapper's own", () => {
    const wrapper = new CountingWrapper()
    const memo = RenderMemo.memoized(wrapper)
    const items = history("What is 2 plus 2?")
    const first = memo.generateContextState({ chatHistory: items })
    // LlamaChat passes a copy of the history array: the same items
    const second = memo.generateContextState({ chatHistory: items.slice() })
    expect(wrapper.rendered).toBe(1)
    expect(second).toBe(first)
    expect(first.contextText.toJSON()).toEqual(new PaganticChatWrapper().generateContextState({ chatHistory: items }).contextText.toJSON())
    // the memo is the wrapper for everything else
    expect(memo.wrapperName).toBe(wrapper.wrapperName)
    expect(memo.settings).toBe(wrapper.settings)
    expect(memo instanceof PaganticChatWrapper).toBe(true)
  })

  it("renders again what differs: other items, an item changed in place, other functions or options", () => {
    const wrapper = new CountingWrapper()
    const memo = RenderMemo.memoized(wrapper)
    const items = history("What is 12 plus 7?")
    const render = (options: ChatWrapperGenerateContextStateOptions) => memo.generateContextState(options).contextText.toString()
    const plain = (options: ChatWrapperGenerateContextStateOptions) =>
      new PaganticChatWrapper().generateContextState(options).contextText.toString()

    render({ chatHistory: items })
    expect(wrapper.rendered).toBe(1)
    // equal content, other objects: rendered again (items are compared by identity)
    render({ chatHistory: history("What is 12 plus 7?") })
    expect(wrapper.rendered).toBe(2)

    // the open model turn gets a part in place: rendered again, with it
    const model = items[2] as { type: "model"; response: Array<unknown> }
    model.response.push("The answer is")
    expect(render({ chatHistory: items })).toBe(plain({ chatHistory: items }))
    expect(render({ chatHistory: items })).toContain("The answer is")
    expect(wrapper.rendered).toBe(3)
    // a part replaced in place
    model.response[0] = "It is"
    expect(render({ chatHistory: items })).toContain("It is")
    expect(wrapper.rendered).toBe(4)
    // a user item's text changed in place
    const user = items[1] as { type: "user"; text: string }
    user.text = "What is 1 plus 1?"
    expect(render({ chatHistory: items })).toContain("What is 1 plus 1?")
    expect(wrapper.rendered).toBe(5)

    // functions and documentFunctionParams are part of what is rendered
    expect(render({ chatHistory: items, availableFunctions: functions })).toBe(plain({ chatHistory: items, availableFunctions: functions }))
    expect(wrapper.rendered).toBe(6)
    render({ chatHistory: items, availableFunctions: functions, documentFunctionParams: true })
    expect(wrapper.rendered).toBe(7)
    render({ chatHistory: items, availableFunctions: functions })
    expect(wrapper.rendered).toBe(7)
    // a longer history with the same first items is another render
    render({ chatHistory: [...items, { type: "user", text: "And 3 plus 3?" }] })
    expect(wrapper.rendered).toBe(8)
  })

  it("is bounded: past its capacity the stalest render is made again", () => {
    const wrapper = new CountingWrapper()
    const memo = RenderMemo.memoized(wrapper, { capacity: 2 })
    const [a, b, c] = [history("a"), history("b"), history("c")]
    memo.generateContextState({ chatHistory: a })
    memo.generateContextState({ chatHistory: b })
    memo.generateContextState({ chatHistory: b })
    memo.generateContextState({ chatHistory: a })
    expect(wrapper.rendered).toBe(2)
    memo.generateContextState({ chatHistory: c })
    memo.generateContextState({ chatHistory: a })
    expect(wrapper.rendered).toBe(4)
  })

  it("tokenizes the rendered text once per model, for the memoized tokenizer and the model's own alike", () => {
    const memo = RenderMemo.memoized(new PaganticChatWrapper())
    const { counter, tokenizer } = fakeTokenizer()
    const { contextText } = memo.generateContextState({ chatHistory: history("Name a colour.") })
    const expected = LlamaText(contextText.values).tokenize(tokenizer)
    const before = counter.calls
    const engines = contextText.tokenize(Tokens.memoized(tokenizer))
    const llamaChats = contextText.tokenize(tokenizer)
    expect(engines).toEqual(expected)
    expect(llamaChats).toEqual(expected)
    const afterFirst = counter.calls
    expect(afterFirst).toBeGreaterThan(before)
    // LlamaChat's tokenize came from memory, and a caller that changes its array changes nobody else's
    llamaChats.push(7 as Token)
    expect(contextText.tokenize(tokenizer)).toEqual(expected)
    expect(counter.calls).toBe(afterFirst)
    // another model's tokenizer, or other options, tokenize again
    const other = fakeTokenizer()
    expect(contextText.tokenize(other.tokenizer)).toEqual(expected)
    expect(other.counter.calls).toBeGreaterThan(0)
    contextText.tokenize(tokenizer, "trimLeadingSpace")
    expect(counter.calls).toBeGreaterThan(afterFirst)
  })

  it("Tokens.underlying finds the model's tokenizer behind a memoized one", () => {
    const { tokenizer } = fakeTokenizer()
    expect(Tokens.underlying(tokenizer)).toBe(tokenizer)
    expect(Tokens.underlying(Tokens.memoized(tokenizer))).toBe(tokenizer)
    expect(Tokens.underlying(Tokens.memoized(Tokens.memoized(tokenizer)))).toBe(tokenizer)
  })
})
