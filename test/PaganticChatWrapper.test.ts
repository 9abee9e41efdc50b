import { describe, expect, it } from "@effect/vitest"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaChat, LlamaText } from "node-llama-cpp"
import type { ChatHistoryItem, ChatModelFunctions } from "node-llama-cpp"
import {
  BUNDLED_CALCULATOR_TOOL,
  BUNDLED_MODEL_NAME,
  describeSchema,
  isBundledModelName,
  PaganticChatWrapper,
  renderToolResult
} from "../src/layers/llama/PaganticChatWrapper.js"

const modelPath = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "models", "pagantic-tiny.gguf")

const functions: ChatModelFunctions = {
  calculator: { description: BUNDLED_CALCULATOR_TOOL.description, params: BUNDLED_CALCULATOR_TOOL.parameters }
}
const system = (text: string): ChatHistoryItem => ({ type: "system", text: LlamaText(text).toJSON() })

describe("PaganticChatWrapper", () => {
  const wrapper = new PaganticChatWrapper()

  it("renders a sentiment prompt compactly, ending with an open assistant turn", () => {
    const { contextText, stopGenerationTriggers } = wrapper.generateContextState({
      chatHistory: [
        system("Classify the sentiment of the review."),
        { type: "user", text: "Not bad at all." },
        { type: "model", response: [] }
      ]
    })
    expect(contextText.toJSON()).toEqual([
      { type: "specialToken", value: "BOS" },
      { type: "specialTokensText", value: "<|system|>" },
      "Classify the sentiment of the review.",
      { type: "specialTokensText", value: "<|user|>" },
      "Not bad at all.",
      { type: "specialTokensText", value: "<|assistant|>" }
    ])
    expect(stopGenerationTriggers.map((t) => t.toString())).toContain("<|end|>")
  })

  it("renders tools, a function call with its result, and earlier turns", () => {
    const { contextText } = wrapper.generateContextState({
      availableFunctions: functions,
      chatHistory: [
        { type: "user", text: "Hi" },
        { type: "model", response: ["Hello! How can I help you today?"] },
        { type: "user", text: "What is 12 plus 7?" },
        {
          type: "model",
          response: [
            { type: "functionCall", name: "calculator", params: { expression: "12 + 7" }, result: "19" },
            "The answer is 19."
          ]
        }
      ]
    })
    expect(contextText.toString()).toBe(
      "BOS<|system|>Tools:\ncalculator: Evaluate an arithmetic expression. {\"expression\": string}" +
        "<|user|>Hi<|assistant|>Hello! How can I help you today?<|end|>" +
        "<|user|>What is 12 plus 7?<|assistant|><tool_call>calculator\n{\"expression\": \"12 + 7\"}</tool_call>" +
        "<tool_result>19</tool_result>The answer is 19."
    )
  })

  it("merges the tools into the user's system prompt", () => {
    const { contextText } = wrapper.generateContextState({
      availableFunctions: functions,
      chatHistory: [system("You are a helpful assistant."), { type: "user", text: "Hi" }]
    })
    expect(contextText.toString()).toBe(
      "BOS<|system|>You are a helpful assistant.\nTools:\ncalculator: Evaluate an arithmetic expression. " +
        "{\"expression\": string}<|user|>Hi<|assistant|>"
    )
  })

  it("renders calls and results the way LlamaChat generates them", () => {
    expect(wrapper.generateFunctionCall("calculator", { expression: "2 * 3" }).toString()).toBe(
      "<tool_call>calculator\n{\"expression\": \"2 * 3\"}</tool_call>"
    )
    expect(wrapper.generateFunctionCallResult("calculator", {}, 6).toString()).toBe("<tool_result>6</tool_result>")
    expect(renderToolResult("6")).toBe("6")
    expect(renderToolResult({ a: 1 })).toBe("{\"a\": 1}")
    expect(renderToolResult(undefined)).toBe("void")
  })

  it("describes parameter schemas in one line", () => {
    expect(describeSchema(BUNDLED_CALCULATOR_TOOL.parameters)).toBe("{\"expression\": string}")
    expect(
      describeSchema({
        type: "object",
        properties: { city: { type: "string" }, unit: { enum: ["c", "f"] }, days: { type: "array", items: { type: "integer" } } },
        required: ["city"]
      })
    ).toBe("{\"city\": string, \"unit\"?: \"c\"|\"f\", \"days\"?: number[]}")
    expect(describeSchema(undefined)).toBe("any")
  })

  it("recognises the bundled model by name", () => {
    expect(isBundledModelName(BUNDLED_MODEL_NAME)).toBe(true)
    expect(isBundledModelName("llama")).toBe(false)
    expect(isBundledModelName(undefined)).toBe(false)
  })

  it("lets LlamaChat parse a calculator call from the bundled model, then answer with the result", async () => {
    const llama = await getLlama({ gpu: false, build: "never", maxThreads: 1 })
    const model = await llama.loadModel({ modelPath })
    const context = await model.createContext({ contextSize: 512, threads: 1 })
    try {
      const chat = new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: wrapper })
      const history: Array<ChatHistoryItem> = [
        { type: "user", text: "What is 12 plus 7?" },
        { type: "model", response: [] }
      ]
      const first = await chat.generateResponse(history, { functions, maxTokens: 48, temperature: 0 })
      expect(first.metadata.stopReason).toBe("functionCalls")
      const call = first.functionCalls?.[0]
      expect(call?.functionName).toBe("calculator")
      expect((call?.params as unknown as { expression: string }).expression.replace(/\s/g, "")).toBe("12+7")
      expect(LlamaText.fromJSON(call!.raw).toString()).toBe("<tool_call>calculator\n{\"expression\": \"12 + 7\"}</tool_call>")

      const next = first.lastEvaluation.cleanHistory.slice()
      next[next.length - 1] = {
        type: "model",
        response: [
          { type: "functionCall", name: "calculator", params: call!.params, result: "19", rawCall: call!.raw }
        ]
      }
      const second = await chat.generateResponse(next, { functions, maxTokens: 24, temperature: 0 })
      expect(second.functionCalls ?? []).toHaveLength(0)
      expect(second.response).toContain("19")
    } finally {
      await context.dispose()
      await model.dispose()
    }
  })
})
