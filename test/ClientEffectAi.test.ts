/**
 * Effect AI's OpenAI provider (`@effect/ai-openai` on `@effect/ai`, pinned in
 * devDependencies) against a real `pagantic serve` on the bundled model over
 * loopback. `OpenAiLanguageModel` (0.41) speaks OpenAI's Responses API
 * (`POST /v1/responses`): `LanguageModel.generateText` and `streamText` through
 * it, a client tool (a Toolkit whose handler Effect AI runs, a `Chat` carrying
 * the result to the next turn) and a refusal as an AiError. The provider's
 * `OpenAiClient` speaks chat completions directly (its generated
 * `createChatCompletion`, decoded by the provider's own schema, and its SSE
 * `streamRequest`). Every call is bounded by a timeout.
 *
 * The bundled model knows greetings, thanks, sentiment and calculator calls
 * (training/README.md); the prompts stay inside that.
 */
import * as Chat from "@effect/ai/Chat"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import * as OpenAiClient from "@effect/ai-openai/OpenAiClient"
import * as OpenAiLanguageModel from "@effect/ai-openai/OpenAiLanguageModel"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { expect, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { BUNDLED_MODEL_NAME } from "../src/layers/llama/PaganticChatWrapper.js"
import { serve } from "./support/server.js"

/** The provider's client pointed at a pagantic server on the bundled model (one per file). */
const ClientLive = Layer.unwrapScoped(
  Effect.map(serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }), ({ url }) =>
    OpenAiClient.layer({ apiUrl: `${url}/v1`, apiKey: Redacted.make("unused") }))
).pipe(Layer.provide(FetchHttpClient.layer))

/** The bundled model as an Effect AI LanguageModel, greedy and short. */
const model = OpenAiLanguageModel.model(BUNDLED_MODEL_NAME, { temperature: 0, max_output_tokens: 24 })

/** The answer chat completions gives the same prompt (greedy): what the providers must agree with. */
const reference = Effect.gen(function* () {
  const client = yield* OpenAiClient.OpenAiClient
  const completion = yield* client.client.createChatCompletion({
    model: BUNDLED_MODEL_NAME,
    messages: [{ role: "user", content: "Hello!" }],
    temperature: 0,
    max_tokens: 24
  })
  return completion
})

/** The client's calculator, run by Effect AI between turns: two numbers and an operator, as the model writes them. */
const calculate = (expression: string): string => {
  const match = /^\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*$/.exec(expression)
  if (match === null) return `cannot evaluate ${expression}`
  const [a, b] = [Number(match[1]), Number(match[3])]
  return String(match[2] === "+" ? a + b : match[2] === "-" ? a - b : match[2] === "*" ? a * b : a / b)
}

const Calculator = Tool.make("calculator", {
  description: "Evaluate an arithmetic expression",
  parameters: { expression: Schema.String },
  success: Schema.String
})
const CalculatorKit = Toolkit.make(Calculator)
const CalculatorHandlers = CalculatorKit.toLayer({ calculator: ({ expression }) => Effect.succeed(calculate(expression)) })

/** A `chat.completion.chunk`, as much of it as the test reads. */
const Chunk_ = Schema.Struct({
  object: Schema.Literal("chat.completion.chunk"),
  choices: Schema.Array(
    Schema.Struct({
      index: Schema.Number,
      delta: Schema.Struct({ content: Schema.optional(Schema.NullOr(Schema.String)) }),
      finish_reason: Schema.optional(Schema.NullOr(Schema.String))
    })
  ),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({ prompt_tokens: Schema.Number, completion_tokens: Schema.Number })))
})

layer(ClientLive, { excludeTestServices: true, timeout: "60 seconds" })("Effect AI's OpenAI provider against pagantic serve", (it) => {
  it.effect("LanguageModel.generateText through OpenAiLanguageModel: the greeting, finish reason stop, usage", () =>
    Effect.gen(function* () {
      const expected = yield* reference
      const response = yield* LanguageModel.generateText({ prompt: "Hello!" }).pipe(Effect.provide(model))
      expect(response.text).toBe(expected.choices[0]!.message.content)
      expect(response.finishReason).toBe("stop")
      expect(response.usage.inputTokens).toBeGreaterThanOrEqual(0) // the prompt tokens evaluated: 0 when the engine holds the prompt
      expect(response.usage.outputTokens).toBe(expected.usage!.completion_tokens)
    }).pipe(Effect.timeout("30 seconds")), 30_000)

  it.effect("LanguageModel.streamText through OpenAiLanguageModel: text deltas spell the answer, a finish part with usage", () =>
    Effect.gen(function* () {
      const expected = yield* reference
      const parts = Chunk.toReadonlyArray(
        yield* Stream.runCollect(LanguageModel.streamText({ prompt: "Hello!" }).pipe(Stream.provideLayer(model)))
      )
      const deltas = parts.flatMap((part) => (part.type === "text-delta" ? [part.delta] : []))
      expect(deltas.length).toBeGreaterThan(1)
      expect(deltas.join("")).toBe(expected.choices[0]!.message.content)
      const finish = parts.filter((part) => part.type === "finish")
      expect(finish).toHaveLength(1)
      expect(finish[0]).toMatchObject({ reason: "stop", usage: { outputTokens: expected.usage!.completion_tokens } })
    }).pipe(Effect.timeout("30 seconds")), 30_000)

  it.effect("a client tool through OpenAiLanguageModel: Effect AI runs the toolkit's handler, the next turn answers with its result", () =>
    Effect.gen(function* () {
      const chat = yield* Chat.empty
      const first = yield* chat.generateText({ prompt: "What is 12 plus 7?", toolkit: CalculatorKit })
      expect(first.finishReason).toBe("tool-calls")
      expect(first.toolCalls.map((call) => [call.name, call.params])).toEqual([["calculator", { expression: "12 + 7" }]])
      expect(first.toolResults.map((result) => result.result)).toEqual(["19"])

      // the history now ends with the tool's result: the model goes on from it
      const second = yield* chat.generateText({ prompt: [], toolkit: CalculatorKit })
      expect(second.toolCalls).toEqual([])
      expect(second.finishReason).toBe("stop")
      expect(second.text).toContain("19")
    }).pipe(Effect.provide(CalculatorHandlers), Effect.provide(model), Effect.timeout("50 seconds")), 60_000)

  it.effect("a refused request through OpenAiLanguageModel is an AiError: status 400, our code and the parameter in its body", () =>
    Effect.gen(function* () {
      const error = yield* LanguageModel.generateText({ prompt: "Hello!" }).pipe(
        OpenAiLanguageModel.withConfigOverride({ temperature: 5 }),
        Effect.provide(model),
        Effect.flip
      )
      expect(error._tag).toBe("HttpResponseError")
      if (error._tag !== "HttpResponseError") return
      expect(error.response.status).toBe(400)
      expect(JSON.parse(error.body ?? "{}")).toMatchObject({ error: { code: "CONFIG_INVALID_REQUEST", param: "temperature" } })
    }).pipe(Effect.timeout("30 seconds")), 30_000)

  it.effect("OpenAiClient's createChatCompletion: a greeting and a json_schema answer, decoded by the provider's schema", () =>
    Effect.gen(function* () {
      const completion = yield* reference
      expect(completion.model).toBe(BUNDLED_MODEL_NAME)
      expect(completion.choices[0]!.finish_reason).toBe("stop")
      expect(completion.choices[0]!.message.content).toMatch(/^Hello/)
      expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens)

      const client = yield* OpenAiClient.OpenAiClient
      const structured = yield* client.client.createChatCompletion({
        model: BUNDLED_MODEL_NAME,
        messages: [
          { role: "system", content: "Classify the sentiment of the review." },
          { role: "user", content: "The movie was absolutely wonderful." }
        ],
        temperature: 0,
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "sentiment",
            strict: true,
            schema: {
              type: "object",
              properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
              required: ["sentiment"],
              additionalProperties: false
            }
          }
        }
      })
      expect(JSON.parse(structured.choices[0]!.message.content!)).toEqual({ sentiment: "positive" })
    }).pipe(Effect.timeout("30 seconds")), 30_000)

  it.effect("OpenAiClient's createChatCompletion with logprobs: the provider's schema decodes them, one per token", () =>
    Effect.gen(function* () {
      const client = yield* OpenAiClient.OpenAiClient
      const completion = yield* client.client.createChatCompletion({
        model: BUNDLED_MODEL_NAME,
        messages: [{ role: "user", content: "Hello!" }],
        temperature: 0,
        max_tokens: 24,
        logprobs: true,
        top_logprobs: 2
      })
      const [choice] = completion.choices
      const entries = choice!.logprobs?.content ?? []
      expect(entries.map((e) => e.token).join("")).toBe(choice!.message.content)
      expect(entries.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2)).toBe(true)
    }).pipe(Effect.timeout("30 seconds")), 30_000)

  it.effect("OpenAiClient's streamRequest over chat completions: the chunks spell the answer and end with usage", () =>
    Effect.gen(function* () {
      const expected = yield* reference
      const client = yield* OpenAiClient.OpenAiClient
      const chunks = Chunk.toReadonlyArray(
        yield* Stream.runCollect(
          client.streamRequest(
            HttpClientRequest.post("/chat/completions").pipe(
              HttpClientRequest.bodyUnsafeJson({
                model: BUNDLED_MODEL_NAME,
                messages: [{ role: "user", content: "Hello!" }],
                temperature: 0,
                max_tokens: 24,
                stream: true,
                stream_options: { include_usage: true }
              })
            ),
            Chunk_
          )
        )
      )
      const text = chunks.flatMap((c) => c.choices.map((choice) => choice.delta.content ?? "")).join("")
      expect(text).toBe(expected.choices[0]!.message.content)
      // the same prompt again: as many prompt tokens (the engine held them), the same output
      const usage = chunks.flatMap((c) => (c.usage == null ? [] : [c.usage]))
      expect(usage).toHaveLength(1)
      expect(usage[0]!.completion_tokens).toBe(expected.usage!.completion_tokens)
      expect(usage[0]!.prompt_tokens).toBe(expected.usage!.prompt_tokens)
      expect(usage[0]!.prompt_tokens).toBeGreaterThan(0)
    }).pipe(Effect.timeout("30 seconds")), 30_000)
})
