/**
 * The Effect AI bridge, both ways (`pagantic/effect-ai`).
 *
 * - `EffectAi.engine`: pagantic's AgentLoop, Structured.run and RedundantLoop on an
 *   `@effect/ai` LanguageModel, here `@effect/ai-openai`'s OpenAiLanguageModel
 *   pointed at a loopback fake of OpenAI's Responses API (tool calls, JSON output,
 *   streaming; 429, 500 and 401 mapped to the taxonomy).
 * - `EffectAi.languageModel`: Effect AI's own generateText, generateObject and
 *   streamText on pagantic's Engine: a ScriptedEngine for the mapping (what the
 *   engine is asked, what the program gets back) and the real llama.cpp engine on
 *   the bundled model.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import * as OpenAiClient from "@effect/ai-openai/OpenAiClient"
import * as OpenAiLanguageModel from "@effect/ai-openai/OpenAiLanguageModel"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { describe, expect, it, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { EffectAi } from "../src/effectAi.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as Calculator from "../src/layers/tools/Calculator.js"
import * as InProcessToolRegistry from "../src/layers/InProcessToolRegistry.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as Structured from "../src/programs/Structured.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import * as Fake from "./support/responses-fake.js"

/** pagantic's Engine on @effect/ai-openai on the fake, with the provider's model settings. */
const providerEngine = (script: ReadonlyArray<Fake.Answer>, options: EffectAi.EngineOptions = {}) =>
  Layer.unwrapScoped(
    Effect.map(Fake.make(script), (fake) =>
      EffectAi.engine({ name: "fake-model", contextWindow: 8192, ...options }).pipe(
        Layer.provide(OpenAiLanguageModel.layer({ model: "fake-model" })),
        Layer.provide(OpenAiClient.layer({ apiUrl: `${fake.url}/v1`, apiKey: Redacted.make("sk-test") })),
        Layer.provide(FetchHttpClient.layer),
        Layer.merge(Layer.succeed(FakeRequests, fake))
      ))
  )

class FakeRequests extends Effect.Tag("test/FakeRequests")<FakeRequests, { readonly requests: ReadonlyArray<{ readonly json: unknown }> }>() {}

const bodies = Effect.map(FakeRequests, (fake) => fake.requests.map((r) => r.json as Record<string, any>))

const requestOf = (text: string, settings: { readonly temperature?: number; readonly maxTokens?: number } = {}) =>
  new InferenceRequest({ messages: [Message.user(text)], ...settings })

const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })

describe("EffectAi.engine: pagantic's loops on @effect/ai-openai", () => {
  it.live("AgentLoop runs a tool call the provider asked for and answers with the provider's text", () =>
    Effect.gen(function*() {
      const agent = yield* AgentLoop.make({ maxToolIterations: 4 })
      const turn = yield* agent.chat("What is 2 plus 3?")
      expect(turn.content).toBe("The answer is 5.")
      expect(turn.toolCalls.map((call) => [call.name, call.arguments, call.result])).toEqual([
        ["calculator", { expression: "2 + 3" }, "5"]
      ])
      const [first, second] = yield* bodies
      // The tool went out with its own JSON schema; the second request carries the call and its result.
      const offered = first.tools.find((tool: any) => tool.name === "calculator")
      expect(offered.parameters.properties.expression.type).toBe("string")
      expect(offered.parameters.required).toEqual(["expression"])
      expect(offered.description).toBe(Calculator.calculator.description)
      const input = second.input as Array<any>
      expect(input.find((item) => item.type === "function_call")).toMatchObject({ name: "calculator", call_id: "call_1_0" })
      expect(input.find((item) => item.type === "function_call_output")).toMatchObject({ call_id: "call_1_0" })
      expect(JSON.parse(input.find((item) => item.type === "function_call_output").output)).toBe("5")
    }).pipe(
      Effect.provide(Layer.mergeAll(
        providerEngine([
          Fake.calls({ name: "calculator", arguments: JSON.stringify({ expression: "2 + 3" }) }),
          Fake.text("The answer is 5.")
        ]),
        InProcessToolRegistry.layer([Calculator.calculator])
      )),
      Effect.timeout("20 seconds")
    ))

  it.live("Structured.run sends the schema as the provider's JSON output format and decodes the reply", () =>
    Effect.gen(function*() {
      const result = yield* Structured.run([Message.user("Great soup!")], { schema: Sentiment })
      expect(result.value).toEqual({ sentiment: "positive" })
      const [body] = yield* bodies
      expect(body.text.format.type).toBe("json_schema")
      expect(body.text.format.schema.properties.sentiment.enum).toEqual(["positive", "negative", "neutral"])
    }).pipe(
      Effect.provide(Layer.mergeAll(providerEngine([Fake.text("{\"sentiment\":\"positive\"}")]), JsonConstraint.layer)),
      Effect.timeout("20 seconds")
    ))

  it.live("RedundantLoop votes over three provider replies", () =>
    Effect.gen(function*() {
      const result = yield* RedundantLoop.run("Great soup, rude waiter.", { schema: Sentiment, n: 3, concurrency: 1 })
      expect(result.value).toEqual({ sentiment: "negative" })
      expect(result.confidence).toBeCloseTo(2 / 3)
      expect((yield* bodies).length).toBe(3)
    }).pipe(
      Effect.provide(Layer.mergeAll(
        providerEngine([
          Fake.text("{\"sentiment\":\"negative\"}"),
          Fake.text("{\"sentiment\":\"positive\"}"),
          Fake.text("{\"sentiment\":\"negative\"}")
        ]),
        JsonConstraint.layer
      )),
      Effect.timeout("20 seconds")
    ))

  it.live("a streamed inference yields the provider's text deltas, then its tool calls and usage", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const parts = Chunk.toReadonlyArray(
        yield* Stream.runCollect(engine.stream(requestOf("Hi")))
      )
      const deltas = parts.flatMap((part) => part._tag === "TextDelta" ? [part.text] : [])
      expect(deltas.join("")).toBe("Hello there friend")
      expect(deltas.length).toBeGreaterThan(1)
      const finish = parts[parts.length - 1]
      expect(finish?._tag).toBe("Finish")
      if (finish?._tag === "Finish") {
        expect(finish.result.content).toBe("Hello there friend")
        expect(finish.result.usage.promptTokens).toBe(11)
        expect(finish.result.usage.outputTokens).toBe(7)
      }
      const [body] = yield* bodies
      expect(body.stream).toBe(true)
    }).pipe(Effect.provide(providerEngine([Fake.text("Hello there friend")])), Effect.timeout("20 seconds")))

  const failureOf = (answer: Fake.Answer) =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const exit = yield* Effect.exit(engine.infer(requestOf("Hi")))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isSuccess(exit)) return undefined as never
      const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
      expect(failure).toBeInstanceOf(InferenceFailure)
      return failure as InferenceFailure
    }).pipe(Effect.provide(providerEngine([answer])), Effect.timeout("20 seconds"))

  it.live("429 and 500 are a retryable INFERENCE_ENGINE_ERROR with the status; 401 is INFERENCE_MODEL_UNAVAILABLE", () =>
    Effect.gen(function*() {
      const limited = yield* failureOf(Fake.error(429, JSON.stringify({ error: { message: "slow down" } })))
      expect([limited.code, limited.retryable, limited.details.status]).toEqual(["INFERENCE_ENGINE_ERROR", true, 429])
      const broken = yield* failureOf(Fake.error(500, JSON.stringify({ error: { message: "boom" } })))
      expect([broken.code, broken.retryable, broken.details.status]).toEqual(["INFERENCE_ENGINE_ERROR", true, 500])
      const denied = yield* failureOf(Fake.error(401, JSON.stringify({ error: { message: "bad key" } })))
      expect([denied.code, denied.retryable]).toEqual(["INFERENCE_MODEL_UNAVAILABLE", false])
      const tooLong = yield* failureOf(Fake.error(400, JSON.stringify({ error: { message: "maximum context length exceeded" } })))
      expect([tooLong.code, tooLong.retryable]).toEqual(["INFERENCE_CONTEXT_EXCEEDED", false])
      // The API key never reaches a failure.
      expect(JSON.stringify([limited.details, broken.details, denied.details])).not.toContain("sk-test")
    }))

  it.live("a retryable 500 is retried by the loop, which then answers", () =>
    Effect.gen(function*() {
      const agent = yield* AgentLoop.make({ maxToolIterations: 2 })
      const turn = yield* agent.chat("Hi")
      expect(turn.content).toBe("Hello!")
      expect((yield* bodies).length).toBe(2)
    }).pipe(
      Effect.provide(Layer.mergeAll(
        providerEngine([Fake.error(500, "{}"), Fake.text("Hello!")]),
        InProcessToolRegistry.layer([])
      )),
      Effect.timeout("30 seconds")
    ))

  it.live("`configure` turns the request's sampling settings into the provider's configuration", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      yield* engine.infer(requestOf("Hi", { temperature: 0.25, maxTokens: 33 }))
      const [body] = yield* bodies
      expect([body.temperature, body.max_output_tokens]).toEqual([0.25, 33])
    }).pipe(
      Effect.provide(providerEngine([Fake.text("ok")], {
        configure: (request) =>
          OpenAiLanguageModel.withConfigOverride({
            ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
            ...(request.maxTokens === undefined ? {} : { max_output_tokens: request.maxTokens })
          })
      })),
      Effect.timeout("20 seconds")
    ))
})

// ---------------------------------------------------------------------------
// EffectAi.languageModel
// ---------------------------------------------------------------------------

const Calc = Tool.make("calculator", {
  description: "Evaluate an arithmetic expression",
  parameters: { expression: Schema.String },
  success: Schema.String
})
const CalcKit = Toolkit.make(Calc)
const CalcHandlers = CalcKit.toLayer({ calculator: ({ expression }) => Effect.succeed(expression === "12 + 7" ? "19" : "?") })

const scripted = (steps: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.provideMerge(EffectAi.languageModel, ScriptedEngine.layer(steps))

describe("EffectAi.languageModel: Effect AI programs on pagantic's Engine", () => {
  it.effect("generateText: messages, tools and settings reach the engine; its tool calls are resolved by the toolkit", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateText({
        prompt: [{ role: "system", content: "Be brief." }, { role: "user", content: "What is 12 plus 7?" }],
        toolkit: CalcKit
      }).pipe(EffectAi.withSettings({ temperature: 0.3, maxTokens: 40, seed: 7 }))
      expect(response.toolCalls.map((call) => [call.name, call.params])).toEqual([["calculator", { expression: "12 + 7" }]])
      expect(response.toolResults.map((result) => result.result)).toEqual(["19"])
      expect(response.finishReason).toBe("tool-calls")
      expect(response.usage.inputTokens).toBe(10)
      const [request] = yield* ScriptedEngine.requests
      expect(request?.messages.map((m) => [m.role, m.content])).toEqual([["system", "Be brief."], ["user", "What is 12 plus 7?"]])
      expect(request?.tools.map((t) => [t.name, t.description, (t.parameters as any).properties])).toEqual([
        ["calculator", "Evaluate an arithmetic expression", { expression: { type: "string" } }]
      ])
      expect([request?.temperature, request?.maxTokens, request?.seed]).toEqual([0.3, 40, 7])
    }).pipe(
      Effect.provide(scripted([ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "12 + 7" } }])])),
      Effect.provide(CalcHandlers)
    ))

  it.effect("a conversation with a tool round trip maps to assistant tool calls and tool messages", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateText({
        prompt: [
          { role: "user", content: "What is 12 plus 7?" },
          { role: "assistant", content: [{ type: "tool-call", id: "c1", name: "calculator", params: { expression: "12 + 7" }, providerExecuted: false }] },
          { role: "tool", content: [{ type: "tool-result", id: "c1", name: "calculator", result: "19", isFailure: false, providerExecuted: false }] }
        ],
        toolChoice: "none",
        toolkit: CalcKit
      })
      expect(response.text).toBe("The answer is 19.")
      const [request] = yield* ScriptedEngine.requests
      expect(request?.tools).toEqual([])
      const [, assistant, tool] = request?.messages ?? []
      expect(assistant?._tag === "AssistantMessage" && assistant.toolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([
        ["c1", "calculator", { expression: "12 + 7" }]
      ])
      expect(tool?._tag === "ToolMessage" && [tool.toolCallId, tool.name, tool.content, tool.isError]).toEqual(["c1", "calculator", "19", false])
    }).pipe(Effect.provide(scripted([ScriptedEngine.reply("The answer is 19.")])), Effect.provide(CalcHandlers)))

  it.effect("generateObject sends the schema as the request's JSON schema and decodes the engine's JSON", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateObject({ prompt: "Great soup!", schema: Sentiment })
      expect(response.value).toEqual({ sentiment: "positive" })
      const [request] = yield* ScriptedEngine.requests
      expect((request?.schema as any).properties.sentiment.enum).toEqual(["positive", "negative", "neutral"])
    }).pipe(Effect.provide(scripted([ScriptedEngine.reply("{\"sentiment\": \"positive\"}")]))))

  it.effect("streamText yields text-start, the deltas, text-end and a finish with the engine's usage", () =>
    Effect.gen(function*() {
      const parts = Chunk.toReadonlyArray(yield* Stream.runCollect(LanguageModel.streamText({ prompt: "Hi" })))
      const types = parts.map((part) => part.type)
      expect(types[0]).toBe("response-metadata")
      expect(types[1]).toBe("text-start")
      expect(types.slice(-2)).toEqual(["text-end", "finish"])
      const text = parts.flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join("")
      expect(text).toBe("Hello there friend")
      const finish = parts[parts.length - 1]
      expect(finish?.type === "finish" && [finish.reason, finish.usage.outputTokens]).toEqual(["stop", 3])
    }).pipe(Effect.provide(scripted([ScriptedEngine.reply("Hello there friend")]))))

  it.effect("an engine failure is an AiError whose cause is the InferenceFailure", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(LanguageModel.generateText({ prompt: "Hi" }))
      expect(AiError.isAiError(error)).toBe(true)
      expect(error._tag).toBe("UnknownError")
      expect(error.message).toContain("INFERENCE_CONTEXT_EXCEEDED")
      expect((error as AiError.UnknownError).cause).toBeInstanceOf(InferenceFailure)
    }).pipe(Effect.provide(scripted([ScriptedEngine.fail(InferenceFailure.contextExceeded("too long"))]))))
})

/** The bundled model behind Effect AI's LanguageModel (greedy, short). */
const BundledModel = Layer.provideMerge(EffectAi.languageModel, LlamaEngine.layer({ threads: 1 }))

layer(BundledModel, { timeout: 120_000 })("EffectAi.languageModel on the bundled model", (it) => {
  it.effect("generateText: the model calls the calculator and Effect AI runs the toolkit's handler", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateText({ prompt: "What is 12 plus 7?", toolkit: CalcKit }).pipe(
        EffectAi.withSettings({ temperature: 0, maxTokens: 48 })
      )
      expect(response.toolCalls.map((call) => [call.name, call.params])).toEqual([["calculator", { expression: "12 + 7" }]])
      expect(response.toolResults.map((result) => result.result)).toEqual(["19"])
    }).pipe(Effect.provide(CalcHandlers), Effect.timeout("60 seconds")))

  it.effect("generateObject: the grammar makes the reply decode into the schema", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateObject({
        prompt: [
          { role: "system", content: "Classify the sentiment of the review." },
          { role: "user", content: "Not bad at all." }
        ],
        schema: Sentiment
      }).pipe(EffectAi.withSettings({ temperature: 0, maxTokens: 24 }))
      expect(["positive", "negative", "neutral"]).toContain(response.value.sentiment)
      expect(response.usage.outputTokens).toBeGreaterThan(0)
    }).pipe(Effect.timeout("60 seconds")))

  it.effect("streamText: deltas arrive and add up to the text, and the finish carries usage", () =>
    Effect.gen(function*() {
      const parts = Chunk.toReadonlyArray(
        yield* Stream.runCollect(LanguageModel.streamText({ prompt: "Hello!" }).pipe(
          Stream.provideSomeLayer(Layer.succeed(EffectAi.CurrentSettings, { temperature: 0, maxTokens: 24 }))
        ))
      )
      const text = parts.flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join("")
      expect(text.trim().length).toBeGreaterThan(0)
      const finish = parts[parts.length - 1]
      expect(finish?.type).toBe("finish")
      expect(finish?.type === "finish" && (finish.usage.outputTokens ?? 0) > 0).toBe(true)
    }).pipe(Effect.timeout("60 seconds")))
})
