import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as http from "node:http"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import type { Event } from "../src/domain/Event.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import type { InferenceRequest } from "../src/services/Engine.js"
import { ConversationStore } from "../src/services/ConversationStore.js"
import { EventLog } from "../src/services/EventLog.js"
import { chatRequest, post, send } from "./support/server.js"

// ---------------------------------------------------------------------------
// A real server on 127.0.0.1, port 0, stopped by its scope
// ---------------------------------------------------------------------------

interface Fixture {
  readonly url: string
  readonly port: number
  readonly events: Effect.Effect<ReadonlyArray<Event>>
  readonly requests: Effect.Effect<ReadonlyArray<InferenceRequest>>
  /** The sessions the server's ConversationStore holds. */
  readonly sessions: Effect.Effect<ReadonlyArray<string>>
}

const withServer = <A>(
  script: ReadonlyArray<ScriptedEngine.Step>,
  f: (fixture: Fixture) => Effect.Effect<A>,
  options: Http.Options & { readonly whenExhausted?: "fail" | "repeat-last" } = {}
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { whenExhausted, ...httpOptions } = options
      // one layer value, so Live's engine and the control we read are the same instance
      const engine = ScriptedEngine.layer(script, whenExhausted === undefined ? {} : { whenExhausted })
      const context = yield* Layer.build(
        Http.layer({ port: 0, ...httpOptions }).pipe(
          Layer.provideMerge(Live.layer({ engine })),
          Layer.provideMerge(engine)
        )
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
      expect(address.hostname).toBe("127.0.0.1")
      const log = Context.get(context, EventLog)
      const control = Context.get(context, ScriptedEngine.ScriptedEngineControl)
      return yield* f({
        url: `http://127.0.0.1:${address.port}`,
        port: address.port,
        events: log.events,
        requests: control.requests,
        // Live.layer provides the store at run time but does not list it in its type
        sessions: Context.unsafeGet(context as unknown as Context.Context<ConversationStore>, ConversationStore).sessions
      })
    })
  ).pipe(Effect.timeout("20 seconds"), Effect.orDie)

const transitionsOf = (events: ReadonlyArray<Event>, requestId: string) =>
  events.flatMap((e) =>
    e._tag === "LifecycleTransition" && e.correlation.requestId === requestId ? [e.toState] : []
  )

/** Polls until `check` holds (bounded), for effects of a disconnected client. */
const eventually = (check: Effect.Effect<boolean>, within: Duration.DurationInput = "5 seconds") =>
  Effect.gen(function* () {
    const deadline = Date.now() + Duration.toMillis(Duration.decode(within))
    while (Date.now() < deadline) {
      if (yield* check) return true
      yield* Effect.sleep("25 millis")
    }
    return yield* check
  })

const noStackTrace = (text: string) => {
  expect(text).not.toMatch(/^\s*at\s.*:\d+:\d+\)?\s*$/m)
  expect(text).not.toContain("node_modules")
}

/** Parses an SSE body into its `data:` payloads. */
const sseData = (text: string): ReadonlyArray<string> =>
  text
    .split("\n\n")
    .map((block) => block.trim())
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice("data: ".length))

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

describe("adapters/Http", () => {
  it.live("GET /health answers ok with the engine's model", () =>
    withServer([], ({ url }) =>
      Effect.gen(function* () {
        const res = yield* send(`${url}/health`)
        expect(res.status).toBe(200)
        expect(res.json).toEqual({
          status: "ok",
          model: { name: "scripted", contextWindow: 4096, supportsGrammar: false, supportsTools: true }
        })
        expect((yield* send(`${url}/nowhere`)).status).toBe(404)
      })
    )
  )

  it.live("POST /v1/run answers the SystemResponse; the server ran the tool", () =>
    withServer(
      [ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "6 * 7" } }]), ScriptedEngine.reply("42")],
      ({ requests, sessions, url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/run`, chatRequest("What is 6 times 7?", { requestId: "r-run" }))
          expect(res.status).toBe(200)
          expect(res.json).toMatchObject({
            requestId: "r-run",
            content: "42",
            toolCallsMade: [{ name: "calculator", result: "42", isError: false }],
            stopReason: "finish"
          })
          expect(res.json.sessionId).toEqual(expect.any(String))
          expect(res.json.error).toBeUndefined()
          expect((yield* requests).length).toBe(2)
          // the session stays, so the client can continue it by sessionId
          expect(yield* sessions).toEqual([res.json.sessionId])
        })
    )
  )

  it.live("errors carry their SystemError with a fitting status and no stack trace", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [ScriptedEngine.Step, Record<string, unknown>, number, string]> = [
        [ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model file")), {}, 503, "INFERENCE_MODEL_UNAVAILABLE"],
        [ScriptedEngine.fail(InferenceFailure.contextExceeded("too long")), {}, 422, "INFERENCE_CONTEXT_EXCEEDED"],
        [ScriptedEngine.fail(InferenceFailure.engineError("llama crashed")), {}, 502, "INFERENCE_ENGINE_ERROR"],
        [ScriptedEngine.reply("late", { delay: "5 seconds" }), { hints: { timeout: 100 } }, 504, "CANCELLED_TIMEOUT"],
        [
          ScriptedEngine.respond(() => Effect.die(new Error("boom in the engine"))),
          {},
          500,
          "ORCHESTRATION_DEFECT"
        ]
      ]
      for (const [step, extra, status, code] of cases) {
        yield* withServer(
          [step],
          ({ url }) =>
            Effect.gen(function* () {
              const res = yield* post(`${url}/v1/run`, chatRequest("hi", { requestId: `r-${code}`, ...extra }))
              expect({ code, status: res.status }).toEqual({ code, status })
              expect(res.json).toMatchObject({ requestId: `r-${code}`, error: { code, message: expect.any(String) } })
              noStackTrace(res.text)
            }),
          { whenExhausted: "repeat-last" }
        )
      }
      // a mode without its schema is the client's mistake
      yield* withServer([], ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/run`, { mode: "structured", messages: [{ role: "user", content: "x" }] })
          expect(res.status).toBe(400)
          expect(res.json.error.code).toBe("CONFIG_SCHEMA_REQUIRED")
        })
      )
    })
  )

  it.live("the server's time limit becomes the request's timeout: 504 CANCELLED_TIMEOUT with partial output", () =>
    withServer(
      [ScriptedEngine.reply("one two three four five six", { chunkDelay: "60 millis" })],
      ({ events, url }) =>
        Effect.gen(function* () {
          const started = Date.now()
          const res = yield* post(`${url}/v1/run`, chatRequest("count", { requestId: "r-limit" }))
          expect(Date.now() - started).toBeLessThan(2_000)
          expect(res.status).toBe(504)
          expect(res.json.error.code).toBe("CANCELLED_TIMEOUT")
          expect(res.json.content).toMatch(/^one two/)
          expect(transitionsOf(yield* events, "r-limit").at(-1)).toBe("CANCELLED")
        }),
      { requestTimeout: "200 millis" }
    )
  )

  it.live("bad JSON, wrong types, unknown modes and oversized bodies are 4xx with a clear message", () =>
    withServer(
      [],
      ({ url }) =>
        Effect.gen(function* () {
          const badJson = yield* send(`${url}/v1/run`, { body: "{ not json" })
          expect(badJson.status).toBe(400)
          expect(badJson.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST" })
          expect(badJson.json.error.message).toMatch(/not valid JSON/)

          const empty = yield* send(`${url}/v1/run`, { body: "" })
          expect(empty.status).toBe(400)
          expect(empty.json.error.message).toMatch(/empty/)

          const wrongTypes = yield* post(`${url}/v1/run`, { mode: "chat", messages: "hello" })
          expect(wrongTypes.status).toBe(400)
          expect(wrongTypes.json.error.code).toBe("CONFIG_INVALID_REQUEST")
          expect(wrongTypes.json.error.message).toMatch(/messages/)

          const unknownMode = yield* post(`${url}/v1/run`, chatRequest("hi", { mode: "poetry", requestId: "r-mode" }))
          expect(unknownMode.status).toBe(400)
          expect(unknownMode.json).toMatchObject({ requestId: "r-mode", error: { code: "CONFIG_INVALID_REQUEST" } })
          expect(unknownMode.json.error.message).toMatch(/poetry|mode/)

          const big = "x".repeat(4096)
          const tooLarge = yield* post(`${url}/v1/run`, chatRequest(big))
          expect(tooLarge.status).toBe(413)
          expect(tooLarge.json.error.message).toBe("The request body exceeds the limit of 2048 bytes")

          const chatTooLarge = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: big }] })
          expect(chatTooLarge.status).toBe(413)
          expect(chatTooLarge.json.error).toMatchObject({ type: "invalid_request_error", code: "CONFIG_INVALID_REQUEST" })

          for (const res of [badJson, empty, wrongTypes, unknownMode, tooLarge]) noStackTrace(res.text)
        }),
      { maxBodyBytes: 2048 }
    )
  )

  it.live("a chunked body over the limit is 413 too", () =>
    withServer(
      [],
      ({ port }) =>
        Effect.async<{ status: number; body: string }>((resume) => {
          const req = http.request(
            { host: "127.0.0.1", port, method: "POST", path: "/v1/run", headers: { "content-type": "application/json" } },
            (res) => {
              let body = ""
              res.on("data", (d) => (body += d))
              res.on("end", () => resume(Effect.succeed({ status: res.statusCode ?? 0, body })))
            }
          )
          req.on("error", (e) => resume(Effect.die(e)))
          // no content-length: chunked transfer encoding
          req.write(JSON.stringify(chatRequest("y".repeat(3000))))
          req.end()
        }).pipe(
          Effect.map((res) => {
            expect(res.status).toBe(413)
            expect(JSON.parse(res.body).error.code).toBe("CONFIG_INVALID_REQUEST")
          })
        ),
      { maxBodyBytes: 2048 }
    )
  )

  it.live("traceparent becomes the request's trace id in the events; a malformed one is ignored", () =>
    withServer(
      [ScriptedEngine.reply("traced")],
      ({ events, url }) =>
        Effect.gen(function* () {
          const traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
          yield* post(`${url}/v1/run`, chatRequest("a", { requestId: "r-t1" }), {
            traceparent: `00-${traceId}-00f067aa0ba902b7-01`
          })
          yield* post(`${url}/v1/run`, chatRequest("b", { requestId: "r-t2" }), { traceparent: "00-nonsense-01" })
          const ofRequest = (id: string) => (yield_: ReadonlyArray<Event>) =>
            yield_.filter((e) => e.correlation.requestId === id).map((e) => e.correlation.traceId)
          const all = yield* events
          const first = ofRequest("r-t1")(all)
          expect(first.length).toBeGreaterThan(0)
          expect(new Set(first)).toEqual(new Set([traceId]))
          const second = ofRequest("r-t2")(all)
          expect(second.length).toBeGreaterThan(0)
          expect(second.every((t) => t !== undefined && t !== traceId && !t.includes("nonsense"))).toBe(true)
          expect(Http.traceIdOf(`00-${"0".repeat(32)}-00f067aa0ba902b7-01`)).toBeUndefined()
          expect(Http.traceIdOf(`ff-${traceId}-00f067aa0ba902b7-01`)).toBeUndefined()
          expect(Http.traceIdOf(`00-${traceId.toUpperCase()}-00F067AA0BA902B7-01`)).toBe(traceId)
        }),
      { whenExhausted: "repeat-last" }
    )
  )

  it.live("POST /v1/chat/completions: OpenAI shape, the server's own tools run by the server, hints passed on", () =>
    withServer(
      [ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "2+3" } }]), ScriptedEngine.reply("It is 5.")],
      ({ requests, sessions, url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/chat/completions`, {
            model: "anything",
            messages: [
              { role: "system", content: "Be brief." },
              { role: "user", content: [{ type: "text", text: "What is 2+3?" }] }
            ],
            max_tokens: 64,
            temperature: 0.2,
            top_p: 0.9
          })
          expect(res.status).toBe(200)
          expect(res.json).toMatchObject({
            object: "chat.completion",
            model: "scripted",
            choices: [{ index: 0, message: { role: "assistant", content: "It is 5." }, finish_reason: "stop" }],
            pagantic: { toolCallsMade: [{ name: "calculator", result: "5" }] }
          })
          expect(res.json.id).toMatch(/^chatcmpl-/)
          expect(res.json.created).toEqual(expect.any(Number))
          expect(res.json.choices[0].message.tool_calls).toBeUndefined()
          const { completion_tokens, prompt_tokens, total_tokens } = res.json.usage
          expect(total_tokens).toBe(prompt_tokens + completion_tokens)
          expect(prompt_tokens).toBeGreaterThan(0)
          const sent = yield* requests
          expect(sent[0]!.tools.map((t) => t.name)).toEqual(["calculator"])
          expect(sent[0]).toMatchObject({ maxTokens: 64, temperature: 0.2, topP: 0.9 })
          expect(sent[0]!.messages[0]).toMatchObject({ role: "system", content: "Be brief." })
          // OpenAI's API is stateless: the session the request opened is gone
          expect(yield* sessions).toEqual([])
        })
    )
  )

  it.live("chat completions: tool-role history, a tool the server lacks, json_schema structured mode", () =>
    withServer(
      [
        ScriptedEngine.reply("Still 5."),
        // structured mode with tools registered: a tool phase, then the structured answer
        ScriptedEngine.reply('{"answer": 42}'),
        ScriptedEngine.reply('{"answer": 42}')
      ],
      ({ requests, url }) =>
        Effect.gen(function* () {
          const history = yield* post(`${url}/v1/chat/completions`, {
            messages: [
              { role: "user", content: "What is 2+3?" },
              {
                role: "assistant",
                content: null,
                tool_calls: [{ id: "c1", type: "function", function: { name: "calculator", arguments: '{"expression":"2+3"}' } }]
              },
              { role: "tool", tool_call_id: "c1", content: "5" },
              { role: "assistant", content: "5" },
              { role: "user", content: "Again?" }
            ]
          })
          expect(history.status, history.text).toBe(200)
          expect(history.json.choices[0].message.content).toBe("Still 5.")
          const first = (yield* requests)[0]!
          expect(first.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant", "user"])
          expect(first.messages[1]).toMatchObject({ toolCalls: [{ id: "c1", name: "calculator", arguments: { expression: "2+3" } }] })
          expect(first.messages[2]).toMatchObject({ toolCallId: "c1", name: "calculator", content: "5" })

          const structured = yield* post(`${url}/v1/chat/completions`, {
            messages: [{ role: "user", content: "The answer?" }],
            response_format: {
              type: "json_schema",
              json_schema: { name: "a", schema: { type: "object", properties: { answer: { type: "integer" } }, required: ["answer"] } }
            }
          })
          expect(structured.status, structured.text).toBe(200)
          expect(JSON.parse(structured.json.choices[0].message.content)).toEqual({ answer: 42 })
          expect(structured.json.pagantic.structuredOutput).toEqual({ answer: 42 })
          expect((yield* requests).at(-1)!.schema).toMatchObject({ type: "object", required: ["answer"] })
        })
    )
  )

  it.live("chat completions errors use OpenAI's shape with the taxonomy code", () =>
    withServer(
      [ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model"))],
      ({ url }) =>
        Effect.gen(function* () {
          const missing = yield* post(`${url}/v1/chat/completions`, { model: "x" })
          expect(missing.status).toBe(400)
          expect(missing.json).toEqual({
            error: {
              message: "Invalid chat completion request: messages: is missing",
              type: "invalid_request_error",
              code: "CONFIG_INVALID_REQUEST",
              param: "messages",
              pagantic: {
                requestId: missing.headers.get("x-request-id"),
                category: "ConfigurationFailure",
                retryable: false,
                details: expect.objectContaining({ param: "messages" })
              }
            }
          })
          // one line per wrong path, not the schema's decoding tree
          const badRole = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "wizard", content: "hi" }] })
          expect(badRole.json.error.message).toBe(
            'Invalid chat completion request: messages.0.role: expected "system" | "developer" | "user" | "assistant" | "tool", got "wizard"'
          )
          expect(badRole.json.error.param).toBe("messages[0].role")
          const badFormat = yield* post(`${url}/v1/chat/completions`, {
            messages: [{ role: "user", content: "x" }],
            response_format: { type: "yaml" }
          })
          expect(badFormat.status).toBe(400)
          const badArgs = yield* post(`${url}/v1/chat/completions`, {
            messages: [
              { role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "calculator", arguments: "{oops" } }] },
              { role: "user", content: "x" }
            ]
          })
          expect(badArgs.status).toBe(400)
          expect(badArgs.json.error.message).toMatch(/arguments is not valid JSON/)
          expect(badArgs.json.error.param).toBe("messages[0].tool_calls[0].function.arguments")
          const bad = yield* send(`${url}/v1/chat/completions`, { body: "[1," })
          expect(bad.status).toBe(400)
          expect(bad.json.error.code).toBe("CONFIG_INVALID_REQUEST")
          const unavailable = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "x" }] })
          expect(unavailable.status).toBe(503)
          expect(unavailable.json.error).toMatchObject({ type: "server_error", code: "INFERENCE_MODEL_UNAVAILABLE" })
          // streaming that fails before any output is still a plain JSON error
          const streamed = yield* post(`${url}/v1/chat/completions`, { stream: true, messages: [{ role: "user", content: "x" }] })
          expect(streamed.status).toBe(503)
          expect(streamed.json.error.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        }),
      { whenExhausted: "repeat-last" }
    )
  )

  it.live("stream: true answers SSE: deltas that concatenate to the answer, a usage chunk when asked, [DONE]", () =>
    withServer(
      [ScriptedEngine.reply("The quick brown fox jumps.", { chunkDelay: "5 millis" }), ScriptedEngine.reply('{"answer": 1}')],
      // (the last step repeats: structured mode asks twice)
      ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/chat/completions`, {
            stream: true,
            stream_options: { include_usage: true },
            messages: [{ role: "user", content: "go" }]
          })
          expect(res.status).toBe(200)
          expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/)
          const data = sseData(res.text)
          expect(data.at(-1)).toBe("[DONE]")
          const chunks = data.slice(0, -1).map((d) => JSON.parse(d))
          expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0].id)).toBe(true)
          expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" })
          const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")
          expect(text).toBe("The quick brown fox jumps.")
          expect(chunks.filter((c) => (c.choices[0]?.delta.content ?? "") !== "").length).toBe(5)
          // OpenAI's include_usage: a last chunk with no choices and the usage
          const [finish, usage] = chunks.slice(-2)
          expect(finish.choices[0]).toEqual({ index: 0, delta: {}, finish_reason: "stop" })
          expect(finish.usage).toBeUndefined()
          expect(usage.choices).toEqual([])
          expect(usage.usage.total_tokens).toBe(usage.usage.prompt_tokens + usage.usage.completion_tokens)
          expect(usage.usage.prompt_tokens).toBeGreaterThan(0)

          // structured output streams as one content chunk
          const structured = yield* post(`${url}/v1/chat/completions`, {
            stream: true,
            messages: [{ role: "user", content: "go" }],
            response_format: { type: "json_schema", json_schema: { schema: { type: "object", properties: { answer: { type: "integer" } } } } }
          })
          expect(structured.status, structured.text).toBe(200)
          const sChunks = sseData(structured.text).slice(0, -1).map((d) => JSON.parse(d))
          expect(JSON.parse(sChunks.map((c) => c.choices[0].delta.content ?? "").join(""))).toEqual({ answer: 1 })
        }),
      { whenExhausted: "repeat-last" }
    )
  )

  it.live("a streamed turn that runs a tool streams the final answer; the tool run is in the last chunk", () =>
    withServer(
      [
        ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "6*7" } }]),
        ScriptedEngine.reply("It is 42.", { chunkDelay: "5 millis" })
      ],
      ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/chat/completions`, {
            stream: true,
            messages: [{ role: "user", content: "6 times 7?" }]
          })
          expect(res.status).toBe(200)
          expect(res.headers.get("x-request-id")).toEqual(expect.any(String))
          const chunks = sseData(res.text).slice(0, -1).map((d) => JSON.parse(d))
          expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("It is 42.")
          expect(chunks.every((c) => c.choices[0].delta.tool_calls === undefined)).toBe(true)
          expect(chunks.at(-1).pagantic.toolCallsMade).toMatchObject([{ name: "calculator", result: "42" }])
        })
    )
  )

  it.live("a client that disconnects cancels its request: CANCELLED_SIGNAL, the CANCELLED transition", () =>
    withServer(
      [ScriptedEngine.reply("never seen", { delay: "10 seconds" })],
      ({ events, port }) =>
        Effect.gen(function* () {
          const started = Date.now()
          const req = http.request({
            host: "127.0.0.1",
            port,
            method: "POST",
            path: "/v1/run",
            headers: { "content-type": "application/json" }
          })
          req.on("error", () => {})
          req.end(JSON.stringify(chatRequest("slow", { requestId: "r-gone" })))
          const running = yield* eventually(
            Effect.map(events, (es) => es.some((e) => e._tag === "InferenceStart" && e.correlation.requestId === "r-gone"))
          )
          expect(running).toBe(true)
          req.destroy()
          const cancelled = yield* eventually(
            Effect.map(events, (es) => transitionsOf(es, "r-gone").includes("CANCELLED"))
          )
          expect(cancelled).toBe(true)
          expect(Date.now() - started).toBeLessThan(5_000)
          const transition = (yield* events).find(
            (e) => e._tag === "LifecycleTransition" && e.toState === "CANCELLED" && e.correlation.requestId === "r-gone"
          )
          expect(transition?._tag === "LifecycleTransition" && transition.reason).toMatch(/cancelled by its caller/)
          // the engine was interrupted: no inference finished normally
          const ends = (yield* events).filter((e) => e._tag === "InferenceEnd" && e.correlation.requestId === "r-gone")
          expect(ends.every((e) => e._tag === "InferenceEnd" && e.finishReason !== "stop")).toBe(true)
        })
    )
  )

  it.live("a streaming client that disconnects mid-answer cancels it too", () =>
    withServer(
      [ScriptedEngine.reply("a b c d e f g h i j k l m n o p q r s t", { chunkDelay: "150 millis" })],
      ({ events, port }) =>
        Effect.gen(function* () {
          const gotData = yield* Effect.async<boolean>((resume) => {
            const req = http.request({
              host: "127.0.0.1",
              port,
              method: "POST",
              path: "/v1/chat/completions",
              headers: { "content-type": "application/json" }
            })
            req.on("error", () => {})
            req.on("response", (res) => {
              res.once("data", () => {
                req.destroy()
                resume(Effect.succeed(true))
              })
            })
            req.end(JSON.stringify({ stream: true, messages: [{ role: "user", content: "spell" }] }))
          })
          expect(gotData).toBe(true)
          const cancelled = yield* eventually(
            Effect.map(events, (es) =>
              es.some((e) => e._tag === "LifecycleTransition" && e.toState === "CANCELLED")
            )
          )
          expect(cancelled).toBe(true)
        })
    )
  )

  it.live("the status mapping covers the taxonomy", () =>
    Effect.sync(() => {
      expect(Http.statusOf("CONFIG_INVALID_REQUEST")).toBe(400)
      expect(Http.statusOf("CONFIG_NO_ENGINE")).toBe(503)
      expect(Http.statusOf("TOOL_NOT_FOUND")).toBe(422)
      expect(Http.statusOf("TOOL_TIMEOUT")).toBe(504)
      expect(Http.statusOf("CONSTRAINT_JSON_INVALID")).toBe(422)
      expect(Http.statusOf("ORCHESTRATION_NO_CONSENSUS")).toBe(422)
      expect(Http.statusOf("CANCELLED_SIGNAL")).toBe(499)
    })
  )
})

describe("adapters/Http with the bundled model", () => {
  it.live(
    "a chat completion round trip through the loops on LlamaEngine (1 thread)",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const context = yield* Layer.build(
            Http.layer({ port: 0 }).pipe(
              Layer.provideMerge(Live.layer({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }))
            )
          )
          const address = Context.get(context, HttpServer.HttpServer).address
          if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
          const url = `http://127.0.0.1:${address.port}`
          const health = yield* send(`${url}/health`)
          expect(health.json.model.name).toEqual(expect.any(String))
          const res = yield* post(`${url}/v1/chat/completions`, {
            messages: [{ role: "user", content: "Hello" }],
            max_tokens: 8,
            temperature: 0
          })
          expect(res.status).toBe(200)
          expect(res.json.model).toBe(health.json.model.name)
          expect(typeof res.json.choices[0].message.content).toBe("string")
          expect(res.json.usage.completion_tokens).toBeGreaterThan(0)
          expect(res.json.usage.completion_tokens).toBeLessThanOrEqual(8)
        })
      ).pipe(Effect.timeout("25 seconds"), Effect.orDie),
    30_000
  )
})
