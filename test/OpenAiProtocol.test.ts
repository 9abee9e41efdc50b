/**
 * The OpenAI endpoint's protocol on a scripted engine, over a real loopback
 * server: the client's own tools (tool_calls out, tool messages back, streamed
 * as tool_call deltas), the name-clash rule and mixed turns, tool_choice and
 * parallel_tool_calls, every sampling parameter mapped or refused naming it, n
 * choices, and errors in OpenAI's shape for every refusal.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import OpenAI from "openai"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { InferenceResult, type InferenceRequest } from "../src/services/Engine.js"
import { post, send } from "./support/server.js"

interface Fixture {
  readonly url: string
  readonly requests: Effect.Effect<ReadonlyArray<InferenceRequest>>
}

const withServer = <A>(
  script: ReadonlyArray<ScriptedEngine.Step>,
  f: (fixture: Fixture) => Effect.Effect<A>,
  options: Http.Options & { readonly whenExhausted?: "fail" | "repeat-last" } = {}
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { whenExhausted, ...httpOptions } = options
      const engine = ScriptedEngine.layer(script, whenExhausted === undefined ? {} : { whenExhausted })
      const context = yield* Layer.build(
        Http.layer({ port: 0, ...httpOptions }).pipe(Layer.provideMerge(Live.layer({ engine })), Layer.provideMerge(engine))
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
      return yield* f({
        url: `http://127.0.0.1:${address.port}/v1/chat/completions`,
        requests: Context.get(context, ScriptedEngine.ScriptedEngineControl).requests
      })
    })
  ).pipe(Effect.timeout("20 seconds"), Effect.orDie)

const weather = {
  type: "function",
  function: {
    name: "weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  }
}

const ask = (content: string) => [{ role: "user", content }]

/** The data lines of an SSE body, each chunk parsed ([DONE] left out). */
const chunksOf = (text: string): ReadonlyArray<any> =>
  text.split("\n").filter((l) => l.startsWith("data: ") && l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6)))

/** An answer that says the seed it was asked with. */
const echoSeed = ScriptedEngine.respond((request) =>
  Effect.succeed(
    new InferenceResult({
      content: `seed ${request.seed ?? "none"}`,
      toolCalls: [],
      usage: TokenUsage.make({ promptTokens: 10, outputTokens: 2, contextWindow: 4096 }),
      finishReason: "stop"
    })
  )
)

describe("OpenAI protocol: the client's tools", () => {
  it.live("a round trip: tool_calls out (arguments that parse, finish_reason tool_calls), the tool message back continues", () =>
    withServer(
      [ScriptedEngine.toolCalls([{ id: "call_1", name: "weather", arguments: { city: "Paris" } }]), ScriptedEngine.reply("Rain in Paris.")],
      ({ requests, url }) =>
        Effect.gen(function* () {
          const first = yield* post(url, { messages: ask("Weather in Paris?"), tools: [weather] })
          expect(first.status, first.text).toBe(200)
          const choice = first.json.choices[0]
          expect(choice.finish_reason).toBe("tool_calls")
          expect(choice.message.content).toBeNull()
          expect(choice.message.tool_calls).toEqual([
            { id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }
          ])
          expect(JSON.parse(choice.message.tool_calls[0].function.arguments)).toEqual({ city: "Paris" })
          expect(first.json.pagantic.toolCallsMade).toEqual([])
          // offered: the server's calculator and the client's weather, with its description and parameters
          const offered = (yield* requests)[0]!.tools
          expect(offered.map((t) => t.name)).toEqual(["calculator", "weather"])
          expect(offered[1]).toMatchObject({ description: "The weather in a city", parameters: weather.function.parameters })

          const second = yield* post(url, {
            messages: [
              ...ask("Weather in Paris?"),
              choice.message,
              { role: "tool", tool_call_id: "call_1", content: "rain, 12 C" }
            ],
            tools: [weather]
          })
          expect(second.status, second.text).toBe(200)
          expect(second.json.choices[0]).toMatchObject({ message: { content: "Rain in Paris." }, finish_reason: "stop" })
          const sent = (yield* requests)[1]!.messages
          expect(sent.at(-1)).toMatchObject({ role: "tool", toolCallId: "call_1", name: "weather", content: "rain, 12 C" })
        })
    ))

  it.live("streamed: the calls come as tool_calls deltas (index, id, name, arguments), then finish_reason tool_calls", () =>
    withServer(
      [
        ScriptedEngine.toolCalls([
          { id: "a", name: "weather", arguments: { city: "Oslo" } },
          { id: "b", name: "weather", arguments: { city: "Rome" } }
        ])
      ],
      ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(url, { stream: true, messages: ask("Oslo and Rome?"), tools: [weather] })
          expect(res.status, res.text).toBe(200)
          const chunks = chunksOf(res.text)
          const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
          expect(calls).toEqual([
            { index: 0, id: "a", type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } },
            { index: 1, id: "b", type: "function", function: { name: "weather", arguments: '{"city":"Rome"}' } }
          ])
          expect(chunks.at(-1).choices[0].finish_reason).toBe("tool_calls")
          expect(res.text.trimEnd().endsWith("data: [DONE]")).toBe(true)
        })
    ))

  it.live("a client tool named as a server tool is the client's: returned as tool_calls, never run by the server", () =>
    withServer(
      [ScriptedEngine.toolCalls([{ id: "c", name: "calculator", arguments: { expression: "2+2" } }])],
      ({ requests, url }) =>
        Effect.gen(function* () {
          const mine = { type: "function", function: { name: "calculator", description: "My own calculator" } }
          const res = yield* post(url, { messages: ask("2+2?"), tools: [mine] })
          expect(res.status, res.text).toBe(200)
          expect(res.json.choices[0].finish_reason).toBe("tool_calls")
          expect(res.json.choices[0].message.tool_calls[0].function.name).toBe("calculator")
          expect(res.json.pagantic.toolCallsMade).toEqual([])
          const offered = (yield* requests)[0]!.tools
          expect(offered.map((t) => [t.name, t.description])).toEqual([["calculator", "My own calculator"]])
        })
    ))

  it.live("a mixed turn: the server's tool runs (pagantic.toolCallsMade), then the client's call is returned", () =>
    withServer(
      [
        ScriptedEngine.toolCalls([{ id: "s", name: "calculator", arguments: { expression: "6*7" } }]),
        ScriptedEngine.toolCalls([{ id: "c", name: "weather", arguments: { city: "Lima" } }])
      ],
      ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(url, { messages: ask("6*7, then Lima's weather"), tools: [weather] })
          expect(res.status, res.text).toBe(200)
          expect(res.json.pagantic.toolCallsMade).toMatchObject([{ name: "calculator", result: "42" }])
          expect(res.json.choices[0].message.tool_calls.map((c: any) => c.id)).toEqual(["c"])
          expect(res.json.choices[0].finish_reason).toBe("tool_calls")
        })
    ))

  it.live("tool_choice none offers nothing, a named function only that one; parallel_tool_calls false returns one call", () =>
    withServer(
      [
        ScriptedEngine.reply("no tools"),
        ScriptedEngine.toolCalls([{ id: "c", name: "weather", arguments: { city: "X" } }]),
        ScriptedEngine.toolCalls([
          { id: "a", name: "weather", arguments: { city: "A" } },
          { id: "b", name: "weather", arguments: { city: "B" } }
        ])
      ],
      ({ requests, url }) =>
        Effect.gen(function* () {
          const none = yield* post(url, { messages: ask("hi"), tools: [weather], tool_choice: "none" })
          expect(none.status, none.text).toBe(200)
          const named = yield* post(url, {
            messages: ask("hi"),
            tools: [weather],
            tool_choice: { type: "function", function: { name: "weather" } }
          })
          expect(named.json.choices[0].finish_reason).toBe("tool_calls")
          const single = yield* post(url, { messages: ask("A and B"), tools: [weather], parallel_tool_calls: false })
          expect(single.json.choices[0].message.tool_calls.map((c: any) => c.id)).toEqual(["a"])
          const sent = yield* requests
          expect(sent[0]!.tools).toEqual([])
          expect(sent[1]!.tools.map((t) => t.name)).toEqual(["weather"])
        })
    ))

  it.live("refusals name the field: an unknown named tool, a bad tool_choice, a bad tool name, tools with response_format", () =>
    withServer([], ({ requests, url }) =>
      Effect.gen(function* () {
        const unknown = yield* post(url, {
          messages: ask("hi"),
          tools: [weather],
          tool_choice: { type: "function", function: { name: "nope" } }
        })
        expect(unknown.status).toBe(400)
        expect(unknown.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", param: "tool_choice.function.name" })
        const badChoice = yield* post(url, { messages: ask("hi"), tool_choice: "always" })
        expect(badChoice.status).toBe(400)
        expect(badChoice.json.error.param).toBe("tool_choice")
        const badName = yield* post(url, { messages: ask("hi"), tools: [weather, { type: "function", function: { name: "1 bad" } }] })
        expect(badName.status).toBe(400)
        expect(badName.json.error.param).toBe("tools[1].function.name")
        const stray = yield* post(url, {
          messages: [
            ...ask("hi"),
            { role: "assistant", content: "no calls" },
            { role: "tool", tool_call_id: "call_9", name: "weather", content: "sun" }
          ],
          tools: [weather]
        })
        expect(stray.status).toBe(400)
        expect(stray.json.error.message).toMatch(/call_9/)
        const withFormat = yield* post(url, { messages: ask("hi"), tools: [weather], response_format: { type: "json_object" } })
        expect(withFormat.status).toBe(400)
        expect(withFormat.json.error.param).toBe("tools")
        expect(yield* requests).toEqual([])
      })))
})

describe("OpenAI protocol: sampling parameters", () => {
  it.live("stop, seed, penalties reach the engine; a stop text cuts the answer; user is accepted and ignored", () =>
    withServer([ScriptedEngine.reply("The answer is 4.")], ({ requests, url }) =>
      Effect.gen(function* () {
        const res = yield* post(url, {
          messages: ask("2+2?"),
          stop: "answer",
          seed: 42,
          presence_penalty: 0.5,
          frequency_penalty: -0.5,
          user: "someone"
        })
        expect(res.status, res.text).toBe(200)
        expect(res.json.choices[0].message.content).toBe("The ")
        expect(res.json.choices[0].finish_reason).toBe("stop")
        expect((yield* requests)[0]).toMatchObject({ stop: ["answer"], seed: 42, presencePenalty: 0.5, frequencyPenalty: -0.5 })
      }), { whenExhausted: "repeat-last" }))

  it.live("logprobs come back in OpenAI's shape (token, logprob, bytes, top_logprobs)", () =>
    withServer([ScriptedEngine.reply("Hi there")], ({ requests, url }) =>
      Effect.gen(function* () {
        const res = yield* post(url, { messages: ask("hi"), logprobs: true, top_logprobs: 2 })
        expect(res.status, res.text).toBe(200)
        const content = res.json.choices[0].logprobs.content as ReadonlyArray<any>
        expect(content.map((t) => t.token).join("")).toBe("Hi there")
        expect(content[0]).toMatchObject({ token: expect.any(String), logprob: expect.any(Number), top_logprobs: expect.any(Array) })
        expect(content[0].bytes).toEqual(Array.from(new TextEncoder().encode(content[0].token)))
        expect(res.json.choices[0].logprobs.refusal).toBeNull()
        expect((yield* requests)[0]).toMatchObject({ logprobs: true, topLogprobs: 2 })
        // streamed: the finish chunk of the choice carries them
        const streamed = yield* post(url, { messages: ask("hi"), logprobs: true, stream: true })
        const tokens = chunksOf(streamed.text).flatMap((c) => c.choices[0]?.logprobs?.content ?? [])
        expect(tokens.map((t: any) => t.token).join("")).toBe("Hi there")
      }), { whenExhausted: "repeat-last" }))

  it.live("each out-of-range or unsupported parameter is a 400 naming it, before any inference", () =>
    withServer([], ({ requests, url }) =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
          [{ stop: ["a", "b", "c", "d", "e"] }, "stop"],
          [{ stop: [""] }, "stop[0]"],
          [{ presence_penalty: 3 }, "presence_penalty"],
          [{ frequency_penalty: -2.5 }, "frequency_penalty"],
          [{ seed: 1.5 }, "seed"],
          [{ top_logprobs: 21, logprobs: true }, "top_logprobs"],
          [{ top_logprobs: 2 }, "top_logprobs"],
          [{ logprobs: true, response_format: { type: "json_object" } }, "logprobs"],
          [{ n: 0 }, "n"],
          [{ n: 9 }, "n"],
          [{ temperature: 2.5 }, "temperature"],
          [{ logit_bias: { "50256": -100 } }, "logit_bias"],
          [{ functions: [{ name: "f" }] }, "functions"],
          [{ modalities: ["text", "audio"] }, "modalities"],
          [{ stream_options: { include_usage: "yes" } }, "stream_options.include_usage"]
        ]
        for (const [extra, param] of cases) {
          const res = yield* post(url, { messages: ask("hi"), ...extra })
          expect(res.status, `${JSON.stringify(extra)}: ${res.text}`).toBe(400)
          expect(res.json.error, JSON.stringify(extra)).toMatchObject({ type: "invalid_request_error", code: "CONFIG_INVALID_REQUEST", param })
        }
        expect(yield* requests).toEqual([])
      })))
})

describe("OpenAI protocol: n choices", () => {
  it.live("n: 3 with a seed is three runs with seeds seed+i, in order, usage summed", () =>
    withServer([echoSeed], ({ url }) =>
      Effect.gen(function* () {
        const res = yield* post(url, { messages: ask("hi"), n: 3, seed: 7 })
        expect(res.status, res.text).toBe(200)
        expect(res.json.choices.map((c: any) => [c.index, c.message.content])).toEqual([[0, "seed 7"], [1, "seed 8"], [2, "seed 9"]])
        expect(res.json.usage).toEqual({ prompt_tokens: 30, completion_tokens: 6, total_tokens: 36, prompt_tokens_details: { cached_tokens: 0 } })
        expect(res.json.pagantic.choices).toHaveLength(3)
      }), { whenExhausted: "repeat-last" }))

  it.live("streamed n: 2: each choice's deltas and finish under its index; one usage chunk", () =>
    withServer([echoSeed], ({ url }) =>
      Effect.gen(function* () {
        const res = yield* post(url, { messages: ask("hi"), n: 2, seed: 1, stream: true, stream_options: { include_usage: true } })
        expect(res.status, res.text).toBe(200)
        const chunks = chunksOf(res.text)
        const textOf = (index: number) =>
          chunks.flatMap((c) => c.choices.filter((ch: any) => ch.index === index).map((ch: any) => ch.delta.content ?? "")).join("")
        expect(textOf(0)).toBe("seed 1")
        expect(textOf(1)).toBe("seed 2")
        const finishes = chunks.flatMap((c) => c.choices.filter((ch: any) => ch.finish_reason !== null).map((ch: any) => ch.index))
        expect([...finishes].sort()).toEqual([0, 1])
        const usage = chunks.filter((c) => c.usage !== undefined)
        expect(usage).toHaveLength(1)
        expect(usage[0].choices).toEqual([])
        expect(usage[0].usage.prompt_tokens).toBe(20)
      }), { whenExhausted: "repeat-last" }))
})

describe("OpenAI protocol: errors in OpenAI's shape", () => {
  const isOpenAiError = (json: any, code: string, type: string) => {
    expect(Object.keys(json)).toEqual(["error"])
    expect(json.error).toMatchObject({ message: expect.any(String), type, code })
    expect(json.error.param === null || typeof json.error.param === "string").toBe(true)
    expect(json.error.pagantic).toMatchObject({ category: expect.any(String), retryable: expect.any(Boolean) })
  }

  it.live("401, 405, 413, 415, 422 and 5xx all answer {error: {message, type, param, code}} with the taxonomy code", () =>
    Effect.gen(function* () {
      yield* withServer(
        [ScriptedEngine.fail(InferenceFailure.contextExceeded("the prompt does not fit"))],
        ({ url }) =>
          Effect.gen(function* () {
            const noKey = yield* post(url, { messages: ask("hi") })
            expect(noKey.status).toBe(401)
            isOpenAiError(noKey.json, "CONFIG_INVALID_REQUEST", "authentication_error")
            expect(noKey.json.error.param).toBe("Authorization")
            const auth = { authorization: "Bearer k" }
            const method = yield* send(url, { method: "GET", headers: auth })
            expect(method.status).toBe(405)
            isOpenAiError(method.json, "CONFIG_INVALID_REQUEST", "invalid_request_error")
            const big = yield* post(url, { messages: ask("x".repeat(5_000)) }, auth)
            expect(big.status).toBe(413)
            isOpenAiError(big.json, "CONFIG_INVALID_REQUEST", "invalid_request_error")
            const plain = yield* send(url, { body: "{}", headers: { ...auth, "content-type": "text/plain" } })
            expect(plain.status).toBe(415)
            isOpenAiError(plain.json, "CONFIG_INVALID_REQUEST", "invalid_request_error")
            const exceeded = yield* post(url, { messages: ask("hi") }, auth)
            expect(exceeded.status).toBe(422)
            isOpenAiError(exceeded.json, "INFERENCE_CONTEXT_EXCEEDED", "invalid_request_error")
            expect(exceeded.json.error.pagantic.requestId).toBe(exceeded.headers.get("x-request-id"))
          }),
        { apiKey: Redacted.make("k"), maxBodyBytes: 2_000, whenExhausted: "repeat-last" }
      )
      yield* withServer([ScriptedEngine.fail(InferenceFailure.engineError("the engine broke"))], ({ url }) =>
        Effect.gen(function* () {
          const broken = yield* post(url, { messages: ask("hi") })
          expect(broken.status).toBeGreaterThanOrEqual(500)
          isOpenAiError(broken.json, "INFERENCE_ENGINE_ERROR", "server_error")
        }), { whenExhausted: "repeat-last" })
    }))
})

describe("OpenAI protocol: read by the official openai SDK", () => {
  const sdk = (url: string) =>
    new OpenAI({ baseURL: url.replace("/chat/completions", ""), apiKey: "unused", maxRetries: 0, timeout: 15_000 })

  it.live("the SDK's stream helper accumulates two streamed tool calls, and two streamed choices, into final completions", () =>
    withServer(
      [
        ScriptedEngine.toolCalls([
          { id: "a", name: "weather", arguments: { city: "Oslo" } },
          { id: "b", name: "weather", arguments: { city: "Rome" } }
        ]),
        echoSeed
      ],
      ({ url }) =>
        Effect.promise(async () => {
          const client = sdk(url)
          const calls = await client.chat.completions
            .stream({ model: "m", messages: [{ role: "user", content: "Oslo and Rome?" }], tools: [weather as any] })
            .finalChatCompletion()
          expect(calls.choices[0]!.finish_reason).toBe("tool_calls")
          expect(calls.choices[0]!.message.tool_calls!.map((c: any) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
            ["a", "weather", { city: "Oslo" }],
            ["b", "weather", { city: "Rome" }]
          ])
          const two = await client.chat.completions
            .stream({ model: "m", messages: [{ role: "user", content: "hi" }], n: 2, seed: 3, stream_options: { include_usage: true } })
            .finalChatCompletion()
          expect(two.choices.map((c) => [c.index, c.message.content])).toEqual([[0, "seed 3"], [1, "seed 4"]])
          expect(two.usage?.completion_tokens).toBe(4)
          // a refusal is the SDK's BadRequestError with our code and the param
          const refused = await client.chat.completions
            .create({ model: "m", messages: [{ role: "user", content: "hi" }], presence_penalty: 9 })
            .then(() => undefined, (e: unknown) => e)
          expect(refused).toBeInstanceOf(OpenAI.BadRequestError)
          expect(refused).toMatchObject({ status: 400, code: "CONFIG_INVALID_REQUEST", param: "presence_penalty" })
        }),
      { whenExhausted: "repeat-last" }
    ))
})
