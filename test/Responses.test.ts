/**
 * `POST /v1/responses` (OpenAI's Responses API) on a real `pagantic serve` over the
 * bundled model, driven by the official `openai` SDK's `responses.create` (plain,
 * streamed, json_schema output, a client tool round trip through function_call and
 * function_call_output items) and refusals naming the Responses field. The route
 * shares the checks and the run of chat completions, so a wrong field is the same
 * 400 with the Responses name. (@effect/ai-openai's OpenAiLanguageModel speaks this
 * route: test/ClientEffectAi.test.ts.)
 */
import { expect, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import OpenAI from "openai"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { BUNDLED_CALCULATOR_TOOL, BUNDLED_MODEL_NAME } from "../src/layers/llama/PaganticChatWrapper.js"
import { serve } from "./support/server.js"

class Client extends Context.Tag("test/Responses/Client")<Client, { readonly openai: OpenAI; readonly url: string }>() {}

const ClientLive = Layer.scoped(
  Client,
  Effect.map(serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }), ({ url }) => ({
    url,
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30_000 })
  }))
)

const call = <A>(f: (openai: OpenAI) => Promise<A>) => Effect.flatMap(Client, ({ openai }) => Effect.promise(() => f(openai)))
const refused = <A>(f: (openai: OpenAI) => Promise<A>) =>
  Effect.flatMap(Client, ({ openai }) => Effect.flip(Effect.tryPromise({ try: () => f(openai), catch: (e) => e })))

const model = BUNDLED_MODEL_NAME
const calculator = {
  type: "function" as const,
  name: BUNDLED_CALCULATOR_TOOL.name,
  description: BUNDLED_CALCULATOR_TOOL.description,
  parameters: { ...BUNDLED_CALCULATOR_TOOL.parameters },
  strict: false
}

layer(ClientLive, { excludeTestServices: true, timeout: "90 seconds" })("/v1/responses with the openai SDK", (it) => {
  it.effect("a plain response: one message item, output_text, usage, status completed", () =>
    Effect.gen(function* () {
      const response = yield* call((openai) =>
        openai.responses.create({ model, input: "Hello!", temperature: 0, max_output_tokens: 24 }))
      expect(response.object).toBe("response")
      expect(response.status).toBe("completed")
      expect(response.model).toBe(model)
      expect(response.output).toHaveLength(1)
      expect(response.output[0]!.type).toBe("message")
      expect(response.output_text.trim().length).toBeGreaterThan(0)
      expect(response.usage!.output_tokens).toBeGreaterThan(0)
      expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + response.usage!.output_tokens)
    }), 60_000)

  it.effect("streamed: created, in_progress, text deltas that spell the answer, completed with the same text", () =>
    Effect.gen(function* () {
      const plain = yield* call((openai) =>
        openai.responses.create({ model, input: "Hello!", temperature: 0, max_output_tokens: 24 }))
      const events = yield* call(async (openai) => {
        const stream = await openai.responses.create({ model, input: "Hello!", temperature: 0, max_output_tokens: 24, stream: true })
        const seen: Array<{ type: string; delta?: string; sequence_number: number; response?: { output_text?: string } }> = []
        for await (const event of stream) seen.push(event as never)
        return seen
      })
      const types = events.map((e) => e.type)
      expect(types.slice(0, 2)).toEqual(["response.created", "response.in_progress"])
      expect(types.at(-1)).toBe("response.completed")
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
      const text = events.flatMap((e) => e.type === "response.output_text.delta" ? [e.delta ?? ""] : []).join("")
      expect(text).toBe(plain.output_text)
      expect(events.at(-1)!.response!.output_text).toBe(plain.output_text)
    }), 60_000)

  it.effect("json_schema output: the text decodes into the schema", () =>
    Effect.gen(function* () {
      const response = yield* call((openai) =>
        openai.responses.create({
          model,
          instructions: "Classify the sentiment of the review.",
          input: "Not bad at all.",
          temperature: 0,
          max_output_tokens: 24,
          text: {
            format: {
              type: "json_schema",
              name: "sentiment",
              schema: {
                type: "object",
                properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
                required: ["sentiment"],
                additionalProperties: false
              }
            }
          }
        }))
      const value = JSON.parse(response.output_text) as { sentiment: string }
      expect(["positive", "negative", "neutral"]).toContain(value.sentiment)
    }), 60_000)

  it.effect("a client tool: a function_call item comes back, the client runs it and sends function_call_output, the model answers", () =>
    Effect.gen(function* () {
      const first = yield* call((openai) =>
        openai.responses.create({ model, input: "What is 12 plus 7?", tools: [calculator], temperature: 0, max_output_tokens: 48 }))
      const fc = first.output.find((item) => item.type === "function_call")
      expect(fc).toBeDefined()
      if (fc?.type !== "function_call") return
      expect(fc.name).toBe("calculator")
      expect(JSON.parse(fc.arguments)).toEqual({ expression: "12 + 7" })
      const second = yield* call((openai) =>
        openai.responses.create({
          model,
          tools: [calculator],
          temperature: 0,
          max_output_tokens: 48,
          input: [
            { role: "user", content: "What is 12 plus 7?" },
            { type: "function_call", call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
            { type: "function_call_output", call_id: fc.call_id, output: "19" }
          ]
        }))
      expect(second.output.some((item) => item.type === "function_call")).toBe(false)
      expect(second.output_text).toContain("19")
    }), 60_000)

  it.effect("refusals name the Responses field: stored state, built-in tools, an out-of-range max_output_tokens", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ input: "Hi", previous_response_id: "resp_1" }, "previous_response_id"],
        [{ input: "Hi", tools: [{ type: "web_search" }] }, "tools[0].type"],
        [{ input: "Hi", max_output_tokens: -1 }, "max_output_tokens"],
        [{ input: [{ role: "wizard", content: "Hi" }] }, "input[0].role"],
        [{ input: "Hi", text: { format: { type: "xml" } } }, "text.format.type"]
      ]
      for (const [body, param] of cases) {
        const error = yield* refused((openai) => openai.responses.create({ model, ...body } as never))
        expect(error, param).toBeInstanceOf(OpenAI.BadRequestError)
        const bad = error as InstanceType<typeof OpenAI.BadRequestError>
        expect(bad.param, JSON.stringify(body)).toBe(param)
        expect(bad.code).toBe("CONFIG_INVALID_REQUEST")
      }
    }), 60_000)
})
