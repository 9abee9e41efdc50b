/**
 * The Vercel AI SDK (`ai` 6, through `@ai-sdk/openai-compatible`, pinned in
 * devDependencies) against a real `pagantic serve` on the bundled model over
 * loopback: `generateText` with a client tool the SDK runs itself and its
 * multi-step loop (`stopWhen: stepCountIs(n)`), `streamText` with usage and
 * with a client tool (its call streamed as a `tool_calls` delta), and
 * structured output (`generateObject`, and `generateText` with `Output.object`)
 * through json_schema, and a refusal as the SDK's APICallError. The server
 * registers no tools: the calculator is the client's, executed by the SDK
 * between steps.
 *
 * The bundled model knows greetings, thanks, sentiment and calculator calls
 * (training/README.md); the prompts stay inside that.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { expect, layer } from "@effect/vitest"
import { APICallError, generateObject, generateText, Output, stepCountIs, streamText, tool } from "ai"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { z } from "zod"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { BUNDLED_CALCULATOR_TOOL, BUNDLED_MODEL_NAME } from "../src/layers/llama/PaganticChatWrapper.js"
import { serve } from "./support/server.js"

const providerAt = (url: string) =>
  createOpenAICompatible({ name: "pagantic", baseURL: `${url}/v1`, includeUsage: true, supportsStructuredOutputs: true })

class Provider extends Context.Tag("test/ClientVercelAi/Provider")<Provider, ReturnType<typeof providerAt>>() {}

const ProviderLive = Layer.scoped(
  Provider,
  Effect.map(serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }), ({ url }) => providerAt(url))
)

/** A call of the SDK, bounded: it is aborted after 30 s. */
const call = <A>(f: (model: ReturnType<ReturnType<typeof providerAt>["chatModel"]>, signal: AbortSignal) => Promise<A>) =>
  Effect.flatMap(Provider, (provider) =>
    Effect.promise(() => f(provider.chatModel(BUNDLED_MODEL_NAME), AbortSignal.timeout(30_000))))

/** A call of the SDK the test expects to fail: its error. */
const refused = <A>(f: (model: ReturnType<ReturnType<typeof providerAt>["chatModel"]>, signal: AbortSignal) => Promise<A>) =>
  Effect.flatMap(Provider, (provider) =>
    Effect.flip(
      Effect.tryPromise({ try: () => f(provider.chatModel(BUNDLED_MODEL_NAME), AbortSignal.timeout(30_000)), catch: (e) => e })
    ))

/** The calculator the client runs itself: two numbers and an operator, as the model writes them. */
const calculate = (expression: string): string => {
  const match = /^\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*$/.exec(expression)
  if (match === null) return `cannot evaluate ${expression}`
  const [a, b] = [Number(match[1]), Number(match[3])]
  return String(match[2] === "+" ? a + b : match[2] === "-" ? a - b : match[2] === "*" ? a * b : a / b)
}

const Sentiment = z.object({ sentiment: z.enum(["positive", "negative", "neutral"]) })
const classifier = "Classify the sentiment of the review."

layer(ProviderLive, { excludeTestServices: true, timeout: "60 seconds" })("the Vercel AI SDK against pagantic serve", (it) => {
  it.effect("generateText with a client tool: the SDK runs the call the model makes and loops to the answer", () =>
    Effect.gen(function* () {
      const executed: Array<string> = []
      const result = yield* call((model, abortSignal) =>
        generateText({
          model,
          abortSignal,
          maxRetries: 0,
          temperature: 0,
          prompt: "What is 12 plus 7?",
          tools: {
            calculator: tool({
              description: BUNDLED_CALCULATOR_TOOL.description,
              inputSchema: z.object({ expression: z.string() }),
              execute: async ({ expression }) => {
                executed.push(expression)
                return calculate(expression)
              }
            })
          },
          stopWhen: stepCountIs(4)
        })
      )
      expect(executed.map((e) => e.replace(/\s/g, ""))).toEqual(["12+7"])
      expect(result.steps).toHaveLength(2)
      expect(result.steps[0]!.finishReason).toBe("tool-calls")
      expect(result.steps[0]!.toolCalls.map((c) => c.toolName)).toEqual(["calculator"])
      expect(result.steps[0]!.toolResults.map((r) => r.output)).toEqual(["19"])
      expect(result.finishReason).toBe("stop")
      expect(result.text).toContain("19")
      expect(result.totalUsage.totalTokens).toBeGreaterThan(0)
    }), 60_000)

  it.effect("generateText with one step: the tool call is handed to the client, not answered", () =>
    Effect.gen(function* () {
      const result = yield* call((model, abortSignal) =>
        generateText({
          model,
          abortSignal,
          maxRetries: 0,
          temperature: 0,
          prompt: "What is 12 plus 7?",
          // no execute: the application runs the tool itself
          tools: { calculator: tool({ description: BUNDLED_CALCULATOR_TOOL.description, inputSchema: z.object({ expression: z.string() }) }) },
          stopWhen: stepCountIs(1)
        })
      )
      expect(result.finishReason).toBe("tool-calls")
      expect(result.toolCalls).toHaveLength(1)
      expect(result.toolCalls[0]!.toolName).toBe("calculator")
      expect((result.toolCalls[0]!.input as { expression: string }).expression.replace(/\s/g, "")).toBe("12+7")
    }), 30_000)

  it.effect("streamText: the text stream spells the answer, finish reason stop, usage counted", () =>
    Effect.gen(function* () {
      const whole = yield* call((model, abortSignal) =>
        generateText({ model, abortSignal, maxRetries: 0, temperature: 0, maxOutputTokens: 24, prompt: "Hello!" })
      )
      const streamed = yield* call(async (model, abortSignal) => {
        const result = streamText({ model, abortSignal, maxRetries: 0, temperature: 0, maxOutputTokens: 24, prompt: "Hello!" })
        const deltas: Array<string> = []
        for await (const delta of result.textStream) deltas.push(delta)
        return { deltas, text: await result.text, finishReason: await result.finishReason, usage: await result.usage }
      })
      expect(streamed.deltas.length).toBeGreaterThan(1)
      expect(streamed.deltas.join("")).toBe(streamed.text)
      expect(streamed.text).toBe(whole.text)
      expect(streamed.text).toMatch(/^Hello/)
      expect(streamed.finishReason).toBe("stop")
      expect(streamed.usage.outputTokens).toBe(whole.usage.outputTokens)
      expect(streamed.usage.inputTokens).toBeGreaterThanOrEqual(0) // the prompt tokens evaluated: 0 when the engine holds the prompt
    }), 30_000)

  it.effect("streamText with a client tool: the streamed call is run by the SDK and the next step streams the answer", () =>
    Effect.gen(function* () {
      const executed: Array<string> = []
      const streamed = yield* call(async (model, abortSignal) => {
        const result = streamText({
          model,
          abortSignal,
          maxRetries: 0,
          temperature: 0,
          prompt: "What is 12 plus 7?",
          tools: {
            calculator: tool({
              description: BUNDLED_CALCULATOR_TOOL.description,
              inputSchema: z.object({ expression: z.string() }),
              execute: async ({ expression }) => {
                executed.push(expression)
                return calculate(expression)
              }
            })
          },
          stopWhen: stepCountIs(4)
        })
        const deltas: Array<string> = []
        for await (const delta of result.textStream) deltas.push(delta)
        return { deltas, text: await result.text, steps: await result.steps }
      })
      expect(executed.map((e) => e.replace(/\s/g, ""))).toEqual(["12+7"])
      expect(streamed.steps.map((step) => step.finishReason)).toEqual(["tool-calls", "stop"])
      expect(streamed.steps[0]!.toolCalls.map((c) => c.toolName)).toEqual(["calculator"])
      expect(streamed.text).toContain("19")
      expect(streamed.deltas.join("")).toBe(streamed.steps.map((step) => step.text).join(""))
    }), 60_000)

  it.effect("generateObject: a zod schema through json_schema, the sentiment typed", () =>
    Effect.gen(function* () {
      const classify = (prompt: string) =>
        call((model, abortSignal) =>
          generateObject({ model, abortSignal, maxRetries: 0, temperature: 0, schema: Sentiment, system: classifier, prompt })
        )
      expect((yield* classify("The movie was absolutely wonderful.")).object).toEqual({ sentiment: "positive" })
      const negative = yield* classify("The pizza was really awful.")
      expect(negative.object).toEqual({ sentiment: "negative" })
      expect(negative.finishReason).toBe("stop")

      // a shape the model was never trained on comes back in that shape: the schema constrains decoding
      const Verdict = z.object({ verdict: z.enum(["thumbs-up", "thumbs-down"]) })
      const verdict = yield* call((model, abortSignal) =>
        generateObject({ model, abortSignal, maxRetries: 0, temperature: 0, schema: Verdict, system: classifier, prompt: "The movie was absolutely wonderful." })
      )
      expect(["thumbs-up", "thumbs-down"]).toContain(verdict.object.verdict)
    }), 30_000)

  it.effect("generateText with Output.object (ai 6's structured output) gives the same typed answer", () =>
    Effect.gen(function* () {
      const result = yield* call((model, abortSignal) =>
        generateText({
          model,
          abortSignal,
          maxRetries: 0,
          temperature: 0,
          system: classifier,
          prompt: "The pizza was really awful.",
          output: Output.object({ schema: Sentiment })
        })
      )
      expect(result.output).toEqual({ sentiment: "negative" })
    }), 30_000)

  it.effect("a refused request is the SDK's APICallError: status 400, our code and the parameter in its data", () =>
    Effect.gen(function* () {
      const error = yield* refused((model, abortSignal) =>
        generateText({ model, abortSignal, maxRetries: 0, temperature: 5, prompt: "Hello!" })
      )
      expect(APICallError.isInstance(error)).toBe(true)
      const apiError = error as APICallError
      expect(apiError.statusCode).toBe(400)
      expect(apiError.isRetryable).toBe(false)
      expect(apiError.message).toContain("temperature")
      expect(apiError.data).toMatchObject({ error: { code: "CONFIG_INVALID_REQUEST", param: "temperature" } })
    }), 30_000)
})
