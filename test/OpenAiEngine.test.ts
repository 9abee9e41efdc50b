/**
 * OpenAiEngine against a real HTTP server on loopback (test/support/loopback.ts):
 * each test scripts the server's answers and asserts on what the engine sent and
 * on the typed result or failure. Real time throughout (`it.scopedLive`): the
 * deadlines and Retry-After waits are measured, kept to a few hundred ms except
 * the one test that checks a 1 s Retry-After.
 */
import { FetchHttpClient } from "@effect/platform"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpClient from "@effect/platform/HttpClient"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Chunk from "effect/Chunk"
import * as ConfigProvider from "effect/ConfigProvider"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Http from "../src/adapters/Http.js"
import * as Wire from "../src/layers/openai/Wire.js"
import * as Live from "../src/adapters/Live.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as OpenAiEngine from "../src/layers/OpenAiEngine.js"
import type { Service, StreamPart } from "../src/services/Engine.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import * as Loopback from "./support/loopback.js"

const KEY = "sk-test-0123456789abcdef"

const engineAt = (
  url: string,
  options: Partial<OpenAiEngine.Options> = {},
  http: Layer.Layer<HttpClient.HttpClient> = NodeHttpClient.layerUndici
): Effect.Effect<Service, never, Scope.Scope> =>
  // the HTTP client lives as long as the test's scope, not just while the engine is built
  Effect.flatMap(Layer.build(http), (context) =>
    OpenAiEngine.make({
      baseUrl: url,
      model: "test-model",
      timeout: "3 seconds",
      retry: { times: 2, base: "10 millis" },
      ...options
    }).pipe(Effect.provide(context)))

const ask = (text: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({ messages: [Message.user(text)], ...fields })

const completion = (message: Record<string, unknown>, finish = "stop", usage = { prompt_tokens: 12, completion_tokens: 5 }) => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "test-model",
  choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish }],
  usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens }
})

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta, finish_reason: finish }]
})

const collect = (stream: Stream.Stream<StreamPart, InferenceFailure>) =>
  Effect.map(Stream.runCollect(stream), Chunk.toReadonlyArray)

/** Runs a stream and returns the parts emitted before it failed, and the failure. */
const collectUntilFailure = (stream: Stream.Stream<StreamPart, InferenceFailure>) =>
  Effect.gen(function*() {
    const parts: Array<StreamPart> = []
    const exit = yield* Effect.exit(Stream.runForEach(stream, (part) => Effect.sync(() => parts.push(part))))
    if (Exit.isSuccess(exit)) return yield* Effect.dieMessage("the stream was expected to fail")
    const failure = Cause.failureOption(exit.cause)
    if (failure._tag === "None") return yield* Effect.dieMessage(`not a typed failure: ${Cause.pretty(exit.cause)}`)
    return { parts, failure: failure.value }
  })

const noKeyIn = (failure: InferenceFailure) => {
  expect(JSON.stringify(failure)).not.toContain(KEY)
  expect(Cause.pretty(Cause.fail(failure))).not.toContain(KEY)
}

describe("OpenAiEngine", () => {
  // -------------------------------------------------------------------------
  // Requests and replies
  // -------------------------------------------------------------------------

  it.scopedLive("a completion: messages, tools and sampling are sent; content, usage and finish reason come back", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 200, completion({ content: "Paris." })))
      const engine = yield* engineAt(server.url)
      const call = new Message.ToolCall({ id: "call_7", name: "lookup", arguments: { city: "Paris" } })
      const result = yield* engine.infer(new InferenceRequest({
        messages: [
          Message.system("be brief"),
          Message.user("capital of France?"),
          Message.assistant("", [call]),
          Message.toolResult(new Message.ToolResult({ callId: "call_7", name: "lookup", content: "Paris", isError: false })),
          Message.assistant("noted")
        ],
        tools: [
          new Message.ToolDefinition({
            name: "lookup",
            description: "looks a city up",
            parameters: JsonSchema.object({ city: JsonSchema.string() })
          })
        ],
        maxTokens: 64,
        temperature: 0.2,
        topP: 0.9,
        seed: 7,
        options: { repeat_penalty: 1.1 }
      }))

      expect(result.content).toBe("Paris.")
      expect(result.toolCalls).toEqual([])
      expect(result.finishReason).toBe("stop")
      expect(result.usage.promptTokens).toBe(12)
      expect(result.usage.outputTokens).toBe(5)
      expect(result.usage.contextTokens).toBe(17)
      expect(result.usage.tokensPerSecond).toBeGreaterThan(0)

      const [sent] = server.requests
      expect(sent.method).toBe("POST")
      expect(sent.url).toBe("/v1/chat/completions")
      expect(sent.headers.authorization).toBeUndefined()
      expect(sent.headers["content-type"]).toContain("application/json")
      expect(sent.json).toEqual({
        model: "test-model",
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: "capital of France?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "call_7", type: "function", function: { name: "lookup", arguments: "{\"city\":\"Paris\"}" } }]
          },
          { role: "tool", tool_call_id: "call_7", content: "Paris" },
          { role: "assistant", content: "noted" }
        ],
        tools: [{
          type: "function",
          function: {
            name: "lookup",
            description: "looks a city up",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
          }
        }],
        max_tokens: 64,
        temperature: 0.2,
        top_p: 0.9,
        seed: 7,
        repeat_penalty: 1.1,
        stream: false
      })
    }))

  it.scopedLive("a tool call: JSON-string arguments are parsed, the finish reason is tool_calls", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.json(res, 200, completion({
          content: null,
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "calc", arguments: "{\"expression\":\"2+2\"}" } },
            { id: "call_b", type: "function", function: { name: "now", arguments: "" } }
          ]
        }, "tool_calls"))
      )
      const engine = yield* engineAt(server.url)
      const result = yield* engine.infer(ask("2+2?"))
      expect(result.content).toBe("")
      expect(result.finishReason).toBe("tool_calls")
      expect(result.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }))).toEqual([
        { id: "call_a", name: "calc", arguments: { expression: "2+2" } },
        { id: "call_b", name: "now", arguments: {} }
      ])
    }))

  it.scopedLive("tool-call arguments that are not a JSON object are a typed malformed response, not a defect", () =>
    Effect.gen(function*() {
      const bodies = [
        completion({ tool_calls: [{ id: "c", type: "function", function: { name: "calc", arguments: "[1,2]" } }] }, "tool_calls"),
        completion({ tool_calls: [{ id: "c", type: "function", function: { name: "calc", arguments: "{\"a\":" } }] }, "tool_calls")
      ]
      const server = yield* Loopback.make((_, res, n) => Loopback.json(res, 200, bodies[n - 1]))
      const engine = yield* engineAt(server.url)
      for (const expected of ["not a JSON object", "not valid JSON"]) {
        const failure = yield* Effect.flip(engine.infer(ask("x")))
        expect(failure._tag).toBe("InferenceFailure")
        expect(failure.code).toBe("INFERENCE_MALFORMED_RESPONSE")
        expect(failure.message).toContain(expected)
        expect(failure.details.status).toBe(200)
        expect(failure.details.tool).toBe("calc")
      }
      expect(server.requests).toHaveLength(2)
    }))

  it.scopedLive("a json_schema request: response_format and the bearer key are sent; a grammar replaces the schema", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 200, completion({ content: "{\"n\":1}" })))
      const engine = yield* engineAt(`${server.url}/v1/`, { apiKey: Redacted.make(KEY) })
      const schema = JsonSchema.object({ n: JsonSchema.integer() })
      const result = yield* engine.infer(ask("a number", { schema }))
      expect(result.content).toBe("{\"n\":1}")
      yield* engine.infer(ask("a number", { schema, grammar: "root ::= \"1\"" }))

      const [withSchema, withGrammar] = server.requests
      expect(withSchema.url).toBe("/v1/chat/completions")
      expect(withSchema.headers.authorization).toBe(`Bearer ${KEY}`)
      expect(withSchema.json).toMatchObject({
        model: "test-model",
        response_format: {
          type: "json_schema",
          json_schema: { name: "response", strict: true, schema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } }
        }
      })
      expect(withSchema.json).not.toHaveProperty("grammar")
      expect(withGrammar.json).toMatchObject({ grammar: "root ::= \"1\"" })
      expect(withGrammar.json).not.toHaveProperty("response_format")
    }))

  it.scopedLive("works over the fetch HttpClient too", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 200, completion({ content: "ok" })))
      const engine = yield* engineAt(server.url, { apiKey: Redacted.make(KEY) }, FetchHttpClient.layer)
      expect((yield* engine.infer(ask("hi"))).content).toBe("ok")
      expect(server.requests[0].headers.authorization).toBe(`Bearer ${KEY}`)
    }))

  // -------------------------------------------------------------------------
  // Streaming
  // -------------------------------------------------------------------------

  it.scopedLive("streaming: text deltas concatenate, tool-call deltas assemble by index, Finish carries usage", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.sse(res, [
          chunk({ role: "assistant", content: "" }),
          chunk({ content: "Let me " }),
          chunk({ content: "check." }),
          chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "calc", arguments: "" } }] }),
          chunk({ tool_calls: [{ index: 1, id: "call_2", type: "function", function: { name: "weather", arguments: "{\"ci" } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: "{\"expression\":" } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: "\"6*7\"}" } }] }),
          chunk({ tool_calls: [{ index: 1, function: { arguments: "ty\":\"Oslo\"}" } }] }),
          chunk({}, "tool_calls"),
          { id: "chatcmpl-1", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 30, completion_tokens: 18 } }
        ])
      )
      const engine = yield* engineAt(server.url)
      const parts = yield* collect(engine.stream(ask("6*7 and the weather")))

      const text = parts.flatMap((p) => (p._tag === "TextDelta" ? [p.text] : []))
      expect(text).toEqual(["Let me ", "check."])
      const calls = parts.flatMap((p) => (p._tag === "ToolCallPart" ? [p.toolCall] : []))
      expect(calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }))).toEqual([
        { id: "call_1", name: "calc", arguments: { expression: "6*7" } },
        { id: "call_2", name: "weather", arguments: { city: "Oslo" } }
      ])
      const last = parts[parts.length - 1]
      expect(last._tag).toBe("Finish")
      expect(parts.filter((p) => p._tag === "Finish")).toHaveLength(1)
      if (last._tag !== "Finish") return
      expect(last.result.content).toBe("Let me check.")
      expect(last.result.toolCalls).toHaveLength(2)
      expect(last.result.finishReason).toBe("tool_calls")
      expect(last.result.usage.promptTokens).toBe(30)
      expect(last.result.usage.outputTokens).toBe(18)

      expect(server.requests[0].json).toMatchObject({ stream: true, stream_options: { include_usage: true } })
    }))

  it.scopedLive("a connection cut in the middle of a stream is a typed failure after the deltas already sent", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => {
        Loopback.sse(res, [chunk({ content: "Once upon" }), chunk({ content: " a time" })], { done: false, end: false })
        setTimeout(() => res.socket?.destroy(), 50)
      })
      const engine = yield* engineAt(server.url)
      const { failure, parts } = yield* collectUntilFailure(engine.stream(ask("a story")))
      expect(parts).toEqual([
        { _tag: "TextDelta", text: "Once upon" },
        { _tag: "TextDelta", text: " a time" }
      ])
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(true)
      expect(failure.details.status).toBe(200)
      expect(failure.details.reason).toBe("stream_cut")
      expect(server.requests).toHaveLength(1)
    }))

  it.scopedLive("a stream that ends cleanly but early (no [DONE], no finish_reason) fails typed", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.sse(res, [chunk({ content: "Once" })], { done: false }))
      const engine = yield* engineAt(server.url)
      const { failure, parts } = yield* collectUntilFailure(engine.stream(ask("a story")))
      expect(parts).toEqual([{ _tag: "TextDelta", text: "Once" }])
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.details.reason).toBe("stream_cut")
      expect(failure.details.status).toBe(200)
    }))

  it.scopedLive("an error event inside the stream and a garbage event are typed failures", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res, n) =>
        n === 1
          ? Loopback.sse(res, [{ error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error" } }])
          : Loopback.sse(res, [chunk({ content: "a" }), "<html>oops</html>"])
      )
      const engine = yield* engineAt(server.url)
      const first = yield* collectUntilFailure(engine.stream(ask("x")))
      expect(first.failure.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
      expect(first.failure.details.status).toBe(200)
      const second = yield* collectUntilFailure(engine.stream(ask("x")))
      expect(second.parts).toEqual([{ _tag: "TextDelta", text: "a" }])
      expect(second.failure.code).toBe("INFERENCE_MALFORMED_RESPONSE")
      expect(second.failure.details.body).toContain("<html>")
    }))

  it.scopedLive("a server that ignores stream: true (a JSON completion) still streams; an HTML page is malformed", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res, n) =>
        n === 1
          ? Loopback.json(res, 200, completion({ content: "whole" }))
          : Loopback.text(res, 200, "<html><body>502 Bad Gateway</body></html>", { "content-type": "text/html" })
      )
      const engine = yield* engineAt(server.url)
      const parts = yield* collect(engine.stream(ask("x")))
      expect(parts.map((p) => p._tag)).toEqual(["TextDelta", "Finish"])
      expect(parts[0]).toEqual({ _tag: "TextDelta", text: "whole" })
      const { failure } = yield* collectUntilFailure(engine.stream(ask("x")))
      expect(failure.code).toBe("INFERENCE_MALFORMED_RESPONSE")
      expect(failure.details.status).toBe(200)
      expect(failure.details.body).toContain("502 Bad Gateway")
    }))

  it.scopedLive("a stream is retried before it starts: 503 then a stream", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res, n) =>
        n === 1 ? Loopback.text(res, 503, "loading model") : Loopback.sse(res, [chunk({ content: "hi" }, "stop")])
      )
      const engine = yield* engineAt(server.url)
      const parts = yield* collect(engine.stream(ask("x")))
      expect(parts.map((p) => p._tag)).toEqual(["TextDelta", "Finish"])
      expect(server.requests).toHaveLength(2)
    }))

  // -------------------------------------------------------------------------
  // Retries
  // -------------------------------------------------------------------------

  it.scopedLive("429 with Retry-After: 1 then success: two attempts, the second at least 1 s later", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res, n) =>
        n === 1
          ? Loopback.json(res, 429, { error: { message: "slow down" } }, { "retry-after": "1" })
          : Loopback.json(res, 200, completion({ content: "done" }))
      )
      // a 10 ms backoff: only the header can make the engine wait a second
      const engine = yield* engineAt(server.url, { retry: { times: 2, base: "10 millis" } })
      const result = yield* engine.infer(ask("x"))
      expect(result.content).toBe("done")
      expect(server.requests).toHaveLength(2)
      const gap = server.requests[1].at - server.requests[0].at
      expect(gap).toBeGreaterThanOrEqual(1000)
      expect(gap).toBeLessThan(3000)
    }))

  it.scopedLive("a Retry-After beyond maxRetryAfter is not waited for: the retryable failure comes back at once", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.json(res, 429, { error: { message: "quota" } }, { "retry-after": "3600" })
      )
      const engine = yield* engineAt(server.url, { retry: { times: 2, base: "10 millis", maxRetryAfter: "5 seconds" } })
      const failure = yield* Effect.flip(engine.infer(ask("x")))
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(true)
      expect(failure.details.status).toBe(429)
      expect(failure.details.retryAfterMillis).toBe(3_600_000)
      expect(failure.details.attempts).toBe(1)
      expect(server.requests).toHaveLength(1)
    }))

  it.scopedLive("500 three times: a retryable engine error after the policy's two retries", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 500, { error: { message: "CUDA out of memory" } }))
      const engine = yield* engineAt(server.url, { retry: { times: 2, base: "10 millis" } })
      const failure = yield* Effect.flip(engine.infer(ask("x")))
      expect(failure._tag).toBe("InferenceFailure")
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(true)
      expect(failure.details.status).toBe(500)
      expect(failure.details.body).toContain("CUDA out of memory")
      expect(failure.details.attempts).toBe(3)
      expect(server.requests).toHaveLength(3)
    }))

  it.scopedLive("4xx are never retried: 400, 400 over the context, 401 (key never echoed), 404", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((req, res) => {
        const scenario = (req.json as { messages: Array<{ content: string }> }).messages[0].content
        switch (scenario) {
          case "bad":
            return Loopback.json(res, 400, { error: { message: "'temperature' must be a number" } })
          case "long":
            return Loopback.json(res, 400, {
              error: { message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens" }
            })
          case "auth":
            // a hostile server echoing the credentials it got
            return Loopback.json(res, 401, { error: { message: `invalid key ${req.headers.authorization}` } })
          default:
            return Loopback.json(res, 404, { error: { message: "model 'test-model' not found" } })
        }
      })
      const engine = yield* engineAt(server.url, { apiKey: Redacted.make(KEY), retry: { times: 3, base: "10 millis" } })

      const bad = yield* Effect.flip(engine.infer(ask("bad")))
      expect([bad.code, bad.retryable, bad.details.status, bad.details.attempts]).toEqual(["INFERENCE_ENGINE_ERROR", false, 400, 1])
      expect(bad.details.body).toContain("temperature")

      const long = yield* Effect.flip(engine.infer(ask("long")))
      expect([long.code, long.retryable, long.details.status]).toEqual(["INFERENCE_CONTEXT_EXCEEDED", false, 400])

      const auth = yield* Effect.flip(engine.infer(ask("auth")))
      expect([auth.code, auth.retryable, auth.details.status]).toEqual(["INFERENCE_MODEL_UNAVAILABLE", false, 401])
      expect(auth.details.body).toContain("<redacted>")
      noKeyIn(auth)

      const missing = yield* Effect.flip(engine.infer(ask("missing")))
      expect([missing.code, missing.retryable, missing.details.status]).toEqual(["INFERENCE_MODEL_UNAVAILABLE", false, 404])

      expect(server.requests).toHaveLength(4)
    }))

  // -------------------------------------------------------------------------
  // Bodies that are not completions, and no server at all
  // -------------------------------------------------------------------------

  it.scopedLive("a truncated JSON body and an HTML page are malformed responses, with status and excerpt", () =>
    Effect.gen(function*() {
      const full = JSON.stringify(completion({ content: "a long answer" }))
      const server = yield* Loopback.make((_, res, n) =>
        n === 1
          ? Loopback.text(res, 200, full.slice(0, 40), { "content-type": "application/json" })
          : Loopback.text(res, 200, "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>", { "content-type": "text/html" })
      )
      const engine = yield* engineAt(server.url)
      const truncated = yield* Effect.flip(engine.infer(ask("x")))
      expect(truncated.code).toBe("INFERENCE_MALFORMED_RESPONSE")
      expect(truncated.details.status).toBe(200)
      expect(truncated.details.body).toBe(full.slice(0, 40))
      const html = yield* Effect.flip(engine.infer(ask("x")))
      expect(html.code).toBe("INFERENCE_MALFORMED_RESPONSE")
      expect(html.details.body).toContain("Welcome to nginx!")
      expect(server.requests).toHaveLength(2)
    }))

  it.scopedLive("connection refused: a retryable engine error after the retries", () =>
    Effect.gen(function*() {
      const port = yield* Loopback.closedPort
      const engine = yield* engineAt(`http://127.0.0.1:${port}`, { apiKey: Redacted.make(KEY) })
      const failure = yield* Effect.flip(engine.infer(ask("x")))
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(true)
      expect(failure.details.reason).toBe("connection")
      expect(failure.details.attempts).toBe(3)
      expect(String(failure.details.error)).toContain("ECONNREFUSED")
      noKeyIn(failure)
      const streamed = yield* collectUntilFailure(engine.stream(ask("x")))
      expect(streamed.parts).toEqual([])
      expect(streamed.failure.details.reason).toBe("connection")
    }))

  it.scopedLive("a server that never answers: a timeout failure, promptly, not retried", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make(() => {
        // never answers
      })
      const engine = yield* engineAt(server.url, { timeout: "300 millis" })
      const started = Date.now()
      const failure = yield* Effect.flip(engine.infer(ask("x")))
      const elapsed = Date.now() - started
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(false)
      expect(failure.details.reason).toBe("timeout")
      expect(failure.details.timeoutMillis).toBe(300)
      expect(elapsed).toBeGreaterThanOrEqual(290)
      expect(elapsed).toBeLessThan(2500)
      expect(server.requests).toHaveLength(1)
    }))

  it.scopedLive("a stream that goes silent fails with a timeout after the idle deadline", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.sse(res, [chunk({ content: "thinking" })], { done: false, end: false })
      )
      const engine = yield* engineAt(server.url, { timeout: "300 millis" })
      const { failure, parts } = yield* collectUntilFailure(engine.stream(ask("x")))
      expect(parts).toEqual([{ _tag: "TextDelta", text: "thinking" }])
      expect(failure.details.reason).toBe("timeout")
    }))

  // -------------------------------------------------------------------------
  // Model info and configuration
  // -------------------------------------------------------------------------

  it.scopedLive("modelInfo: the configured window, or /v1/models asked once", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((req, res) =>
        req.url === "/v1/models"
          ? Loopback.json(res, 200, { object: "list", data: [{ id: "test-model", object: "model", max_model_len: 8192 }] })
          : Loopback.json(res, 200, completion({ content: "ok" }))
      )
      const configured = yield* engineAt(server.url, { contextWindow: 2048 })
      expect(yield* configured.modelInfo).toMatchObject({ name: "test-model", contextWindow: 2048, supportsTools: true })
      expect(server.requests).toHaveLength(0)

      const discovered = yield* engineAt(server.url)
      expect((yield* discovered.modelInfo).contextWindow).toBe(8192)
      expect((yield* discovered.modelInfo).contextWindow).toBe(8192)
      expect(server.requests.filter((r) => r.url === "/v1/models")).toHaveLength(1)
      expect((yield* discovered.infer(ask("x"))).usage.contextWindow).toBe(8192)
    }))

  it.scopedLive("layerConfig reads PAGANTIC_OPENAI_* (the key redacted)", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 200, completion({ content: "configured" })))
      const provider = ConfigProvider.fromMap(new Map([
        ["PAGANTIC_OPENAI_BASE_URL", server.url],
        ["PAGANTIC_OPENAI_API_KEY", KEY],
        ["PAGANTIC_OPENAI_MODEL", "env-model"],
        ["PAGANTIC_OPENAI_CONTEXT_WINDOW", "4096"]
      ]))
      const options = yield* Effect.withConfigProvider(OpenAiEngine.config(), provider)
      expect(String(options.apiKey)).not.toContain(KEY)
      const result = yield* Effect.gen(function*() {
        const engine = yield* Engine
        const info = yield* engine.modelInfo
        expect(info.name).toBe("env-model")
        expect(info.contextWindow).toBe(4096)
        return yield* engine.infer(ask("x"))
      }).pipe(
        Effect.provide(OpenAiEngine.layerConfig()),
        Effect.provide(NodeHttpClient.layerUndici),
        Effect.withConfigProvider(provider)
      )
      expect(result.content).toBe("configured")
      expect(server.requests[0].headers.authorization).toBe(`Bearer ${KEY}`)
      expect(server.requests[0].json).toMatchObject({ model: "env-model" })
    }))

  it.effect("retryPolicy on the TestClock: jittered exponential backoff, Retry-After replaces it, non-transient stops", () =>
    Effect.gen(function*() {
      let attempts = 0
      const failing = (failure: InferenceFailure) =>
        Effect.suspend(() => {
          attempts++
          return Effect.fail(failure)
        })
      const step = (duration: Duration.DurationInput) => Effect.zipRight(TestClock.adjust(duration), Effect.yieldNow())

      // 1 s, 2 s, 4 s, each jittered by at most 20 %
      const backoff = yield* Effect.fork(
        Effect.retry(failing(InferenceFailure.engineError("HTTP 503", { status: 503, transient: true })), OpenAiEngine.retryPolicy({ times: 3, base: "1 second" }))
      )
      yield* Effect.yieldNow()
      expect(attempts).toBe(1)
      yield* step("790 millis")
      expect(attempts).toBe(1)
      yield* step("420 millis")
      expect(attempts).toBe(2)
      yield* step("2400 millis")
      expect(attempts).toBe(3)
      yield* step("4800 millis")
      expect(attempts).toBe(4)
      const exhausted = yield* Effect.flip(Fiber.join(backoff))
      expect(exhausted.details.status).toBe(503)

      attempts = 0
      const throttled = yield* Effect.fork(
        Effect.retry(
          failing(InferenceFailure.engineError("HTTP 429", { status: 429, transient: true, retryAfterMillis: 5000 })),
          OpenAiEngine.retryPolicy({ times: 1, base: "10 millis" })
        )
      )
      yield* step("4990 millis")
      expect(attempts).toBe(1)
      yield* step("10 millis")
      expect(attempts).toBe(2)
      yield* Effect.flip(Fiber.join(throttled))

      attempts = 0
      const rejected = new InferenceFailure({ code: "INFERENCE_ENGINE_ERROR", retryable: false, message: "HTTP 400", details: { status: 400 } })
      yield* Effect.flip(Effect.retry(failing(rejected), OpenAiEngine.retryPolicy({ times: 3 })))
      expect(attempts).toBe(1)
    }))

  it.scopedLive("interrupting a call or leaving a stream early closes the connection", () =>
    Effect.gen(function*() {
      const closed: Array<number> = []
      const server = yield* Loopback.make((_, res, n) => {
        res.on("close", () => closed.push(n))
        // request 1 never answers; request 2 streams forever
        if (n === 2) {
          Loopback.sse(res, [chunk({ content: "tick" })], { done: false, end: false })
          const timer = setInterval(() => res.write(`data: ${JSON.stringify(chunk({ content: "tick" }))}\n\n`), 20)
          res.on("close", () => clearInterval(timer))
        }
      })
      const until = (condition: () => boolean) =>
        Effect.repeat(Effect.sleep("10 millis"), { until: condition }).pipe(Effect.timeout("2 seconds"), Effect.orDie)
      const engine = yield* engineAt(server.url)

      const call = yield* Effect.fork(engine.infer(ask("x")))
      yield* until(() => server.requests.length === 1)
      yield* Fiber.interrupt(call)
      yield* until(() => closed.includes(1))

      const parts = yield* collect(Stream.take(engine.stream(ask("y")), 3))
      expect(parts).toEqual([
        { _tag: "TextDelta", text: "tick" },
        { _tag: "TextDelta", text: "tick" },
        { _tag: "TextDelta", text: "tick" }
      ])
      yield* until(() => closed.includes(2))
      expect(closed).toEqual([1, 2])
    }))

  it("Retry-After as seconds, as an HTTP date, and retry-after-ms", () => {
    const now = Date.parse("2026-01-01T00:00:00Z")
    expect(OpenAiEngine.retryAfterMillis({ "retry-after": "2" }, now)).toBe(2000)
    expect(OpenAiEngine.retryAfterMillis({ "retry-after": "0" }, now)).toBe(0)
    expect(OpenAiEngine.retryAfterMillis({ "retry-after": "Thu, 01 Jan 2026 00:00:05 GMT" }, now)).toBe(5000)
    expect(OpenAiEngine.retryAfterMillis({ "retry-after": "Wed, 31 Dec 2025 23:59:00 GMT" }, now)).toBe(0)
    expect(OpenAiEngine.retryAfterMillis({ "retry-after-ms": "250", "retry-after": "1" }, now)).toBe(250)
    expect(OpenAiEngine.retryAfterMillis({ "retry-after": "soon" }, now)).toBeUndefined()
    expect(OpenAiEngine.retryAfterMillis({}, now)).toBeUndefined()
    expect(OpenAiEngine.apiUrl("http://h:8080")).toBe("http://h:8080/v1")
    expect(OpenAiEngine.apiUrl("https://api.example.com/v1/")).toBe("https://api.example.com/v1")
  })
})

// ---------------------------------------------------------------------------
// End to end: the project's own HTTP adapter on loopback, the bundled model behind it
// ---------------------------------------------------------------------------

describe("OpenAiEngine end to end: adapters/Http on LlamaEngine (bundled model)", () => {
  it.live(
    "infer, stream, a json_schema request and a rejected request, through the project's server",
    () =>
      Effect.scoped(
        Effect.gen(function*() {
          const context = yield* Layer.build(
            Http.layer({ port: 0 }).pipe(
              Layer.provideMerge(Live.layer({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }))
            )
          )
          const address = Context.get(context, HttpServer.HttpServer).address
          if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
          const engine = yield* engineAt(`http://127.0.0.1:${address.port}`, {
            model: "pagantic-tiny",
            timeout: "20 seconds",
            retry: { times: 0 }
          })

          const result = yield* engine.infer(ask("Hello", { maxTokens: 8, temperature: 0 }))
          expect(typeof result.content).toBe("string")
          expect(result.toolCalls).toEqual([])
          expect(["stop", "length"]).toContain(result.finishReason)
          expect(result.usage.outputTokens).toBeGreaterThan(0)
          expect(result.usage.outputTokens).toBeLessThanOrEqual(8)
          expect(result.usage.promptTokens).toBeGreaterThan(0)
          expect(result.usage.tokensPerSecond).toBeGreaterThan(0)

          const parts = yield* collect(engine.stream(ask("Hello", { maxTokens: 8, temperature: 0 })))
          const last = parts[parts.length - 1]
          if (last._tag !== "Finish") return yield* Effect.dieMessage("the stream did not end with Finish")
          const deltas = parts.flatMap((p) => (p._tag === "TextDelta" ? [p.text] : []))
          expect(deltas.length).toBeGreaterThan(1)
          expect(deltas.join("")).toBe(last.result.content)
          expect(last.result.usage.outputTokens).toBeGreaterThan(0)
          expect(last.result.usage.outputTokens).toBeLessThanOrEqual(8)

          const structured = yield* engine.infer(ask("I loved it. Sentiment?", {
            schema: JsonSchema.object({ label: JsonSchema.enumOf(["positive", "negative"]) }),
            maxTokens: 32,
            temperature: 0
          }))
          const parsed = JSON.parse(structured.content) as { label: string }
          expect(["positive", "negative"]).toContain(parsed.label)

          // a field the server refuses (token biases) is a 400 the engine reports as not retryable
          const rejected = yield* Effect.flip(engine.infer(ask("Hello", { options: { logit_bias: { "1": 5 } } })))
          expect([rejected.code, rejected.retryable, rejected.details.status]).toEqual(["INFERENCE_ENGINE_ERROR", false, 400])
          expect(rejected.details.body).toContain("logit_bias")
        })
      ).pipe(Effect.timeout("40 seconds"), Effect.orDie),
    45_000
  )
})

describe("OpenAiEngine usage", () => {
  it("a server's cached prompt tokens are counted apart: promptTokens is what it evaluated", () => {
    const measured = { contextWindow: 4096, elapsedMillis: 100 }
    const usage = Wire.usageOf({ prompt_tokens: 40, prompt_tokens_details: { cached_tokens: 32 }, completion_tokens: 5 }, measured)
    expect([usage.promptTokens, usage.cachedPromptTokens, usage.contextTokens]).toEqual([8, 32, 45])
    // a server that reports more cached than prompt tokens is capped; none reported, none counted
    const capped = Wire.usageOf({ prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 99 }, completion_tokens: 1 }, measured)
    expect([capped.promptTokens, capped.cachedPromptTokens]).toEqual([0, 10])
    expect(Wire.usageOf({ prompt_tokens: 10, completion_tokens: 1 }, measured).cachedPromptTokens).toBeUndefined()
  })
})
