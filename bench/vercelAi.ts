/**
 * The AgentLoop turn's work done by the Vercel AI SDK (ai 6): a fresh
 * `generateText` per turn with the `add` tool (a zod schema, checked on each
 * call), looping until the model answers, on a model that answers at once
 * (asks for add(2,3) after the user's message, answers "5" after the tool's
 * result) and keeps nothing.
 */
import type { LanguageModelV3, LanguageModelV3GenerateResult } from "@ai-sdk/provider"
import { generateText, stepCountIs, tool } from "ai"
import * as Effect from "effect/Effect"
import { z } from "zod"

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 2, text: 2, reasoning: undefined }
}

const callReply: LanguageModelV3GenerateResult = {
  content: [{ type: "tool-call", toolCallId: "call_1", toolName: "add", input: '{"a":2,"b":3}' }],
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: []
}

const answer: LanguageModelV3GenerateResult = {
  content: [{ type: "text", text: "5" }],
  finishReason: { unified: "stop", raw: "stop" },
  usage,
  warnings: []
}

const model: LanguageModelV3 = {
  specificationVersion: "v3",
  provider: "instant",
  modelId: "instant",
  supportedUrls: {},
  doGenerate: async (options) => options.prompt.at(-1)?.role === "tool" ? answer : callReply,
  doStream: () => Promise.reject(new Error("not streamed"))
}

const add = tool({
  description: "Adds two numbers",
  inputSchema: z.object({ a: z.number(), b: z.number() }),
  execute: async ({ a, b }) => String(a + b)
})

/** One tool turn through `generateText`. */
export const vercelAiTurn: Effect.Effect<void> = Effect.flatMap(
  Effect.promise(() =>
    generateText({ model, prompt: "What is 2 + 3?", tools: { add }, stopWhen: stepCountIs(20), maxOutputTokens: 2048 })
  ),
  (result) => result.text === "5" ? Effect.void : Effect.dieMessage(`the AI SDK answered ${result.text}`)
)
