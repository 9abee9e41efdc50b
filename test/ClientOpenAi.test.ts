/**
 * The official OpenAI Node SDK (`openai`, pinned in devDependencies) against a real
 * `pagantic serve` on the bundled model over loopback, as a user would point it:
 * the model discovered with `models.list`, chat, streaming with usage, the SDK's
 * `parse` helper with a zod json_schema, a client-defined tool the client runs
 * itself, `n`, `stop`, `seed`, `logprobs`, and errors as the SDK's `APIError`
 * carrying pagantic's code. The server registers no tools, so the calculator here
 * is the client's own.
 *
 * The bundled model knows greetings, thanks, sentiment and calculator calls
 * (training/README.md); the prompts stay inside that.
 */
import { expect, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import OpenAI from "openai"
import { zodResponseFormat } from "openai/helpers/zod"
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions"
import { z } from "zod"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Engine } from "../src/services/Engine.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as OpenAiEngine from "../src/layers/OpenAiEngine.js"
import { BUNDLED_CALCULATOR_TOOL, BUNDLED_MODEL_NAME } from "../src/layers/llama/PaganticChatWrapper.js"
import { serve } from "./support/server.js"

class Client extends Context.Tag("test/ClientOpenAi/Client")<Client, { readonly openai: OpenAI; readonly url: string }>() {}

const ClientLive = Layer.scoped(
  Client,
  Effect.map(serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] }), ({ url }) => ({
    url,
    // no retries: a refusal must surface as it was sent; every call is bounded
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30_000 })
  }))
)

/** A call the test expects to succeed. */
const call = <A>(f: (openai: OpenAI) => Promise<A>) => Effect.flatMap(Client, ({ openai }) => Effect.promise(() => f(openai)))

/** A call the test expects to fail: its error. */
const refused = <A>(f: (openai: OpenAI) => Promise<A>) =>
  Effect.flatMap(Client, ({ openai }) => Effect.flip(Effect.tryPromise({ try: () => f(openai), catch: (e) => e })))

const model = BUNDLED_MODEL_NAME
const hello: Array<ChatCompletionMessageParam> = [{ role: "user", content: "Hello!" }]
/** The calculator as the bundled model was trained on it, defined by the client. */
const calculatorTool = {
  type: "function" as const,
  function: {
    name: BUNDLED_CALCULATOR_TOOL.name,
    description: BUNDLED_CALCULATOR_TOOL.description,
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] }
  }
}
const question: ChatCompletionMessageParam = { role: "user", content: "What is 12 plus 7?" }

/** The calculator the client runs itself: sums and products of two numbers, as the model writes them. */
const calculate = (expression: string): string => {
  const match = /^\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*$/.exec(expression)
  if (match === null) return `cannot evaluate ${expression}`
  const [a, b] = [Number(match[1]), Number(match[3])]
  return String(match[2] === "+" ? a + b : match[2] === "-" ? a - b : match[2] === "*" ? a * b : a / b)
}

layer(ClientLive, { excludeTestServices: true, timeout: "60 seconds" })("the openai SDK against pagantic serve", (it) => {
  it.effect("models.list discovers the served model; retrieve finds it; an unknown id is a NotFoundError", () =>
    Effect.gen(function* () {
      const list = yield* call((openai) => openai.models.list())
      expect(list.data).toHaveLength(1)
      const [served] = list.data
      expect(served).toMatchObject({ id: model, object: "model", owned_by: "pagantic" })
      expect(served!.created).toBeGreaterThan(1_600_000_000)
      expect((served as unknown as { context_length: number }).context_length).toBeGreaterThan(0)

      expect(yield* call((openai) => openai.models.retrieve(model))).toEqual(served)

      const missing = yield* refused((openai) => openai.models.retrieve("gpt-4o"))
      expect(missing).toBeInstanceOf(OpenAI.NotFoundError)
      const error = missing as InstanceType<typeof OpenAI.NotFoundError>
      expect(error.status).toBe(404)
      expect(error.code).toBe("CONFIG_INVALID_REQUEST")
      expect(error.type).toBe("invalid_request_error")
      expect(error.param).toBe("model")
      expect(error.message).toContain("gpt-4o")
    }), 30_000)

  it.effect("pagantic's own OpenAiEngine pointed at the server learns the model's context window from /v1/models", () =>
    Effect.gen(function* () {
      const { url } = yield* Client
      // the engine's own report of its window, beside the OpenAI routes
      const health = yield* call(() => fetch(`${url}/health`, { signal: AbortSignal.timeout(10_000) }).then((r) => r.json() as Promise<{ model: { contextWindow: number } }>))
      const info = yield* Effect.flatMap(Engine, (engine) => engine.modelInfo).pipe(
        Effect.provide(OpenAiEngine.layer({ baseUrl: url, model, timeout: "10 seconds" })),
        Effect.provide(FetchHttpClient.layer)
      )
      expect(info.name).toBe(model)
      expect(info.contextWindow).toBeGreaterThan(0)
      expect(info.contextWindow).toBe(health.model.contextWindow)
    }), 30_000)

  it.effect("chat: a greeting is answered, finish_reason stop, usage counted", () =>
    Effect.gen(function* () {
      const completion = yield* call((openai) => openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24 }))
      expect(completion.object).toBe("chat.completion")
      expect(completion.model).toBe(model)
      expect(completion.choices).toHaveLength(1)
      const [choice] = completion.choices
      expect(choice!.finish_reason).toBe("stop")
      expect(choice!.message.role).toBe("assistant")
      expect(choice!.message.content).toMatch(/^Hello/)
      expect(completion.usage!.completion_tokens).toBeGreaterThan(0)
      expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens)
    }), 30_000)

  it.effect("streaming with include_usage: deltas spell the answer, one finish, then a usage chunk with no choices", () =>
    Effect.gen(function* () {
      const whole = yield* call((openai) => openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24 }))
      const chunks = yield* call(async (openai) => {
        const stream = await openai.chat.completions.create({
          model,
          messages: hello,
          temperature: 0,
          max_tokens: 24,
          stream: true,
          stream_options: { include_usage: true }
        })
        const seen: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
        for await (const chunk of stream) seen.push(chunk)
        return seen
      })
      expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0]!.id)).toBe(true)
      const text = chunks.flatMap((c) => c.choices.map((choice) => choice.delta.content ?? "")).join("")
      expect(text).toBe(whole.choices[0]!.message.content)
      expect(chunks.flatMap((c) => c.choices.flatMap((choice) => (choice.finish_reason === null ? [] : [choice.finish_reason])))).toEqual([
        "stop"
      ])
      const last = chunks.at(-1)!
      expect(last.choices).toEqual([])
      // the same prompt again: as many prompt tokens, the engine held them (cached), the same output
      expect(last.usage!.completion_tokens).toBe(whole.usage!.completion_tokens)
      expect(last.usage!.prompt_tokens).toBe(whole.usage!.prompt_tokens)
      expect(last.usage!.prompt_tokens).toBeGreaterThan(0)
      expect(last.usage!.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0)
      expect(last.usage!.prompt_tokens_details!.cached_tokens!).toBeLessThanOrEqual(last.usage!.prompt_tokens)
      expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens)
      expect(chunks.slice(0, -1).every((c) => c.usage == null)).toBe(true)
    }), 30_000)

  it.effect("parse with a zod json_schema: the sentiment comes back parsed", () =>
    Effect.gen(function* () {
      const Sentiment = z.object({ sentiment: z.enum(["positive", "negative", "neutral"]) })
      const classify = (review: string) =>
        call((openai) =>
          openai.chat.completions.parse({
            model,
            messages: [{ role: "system", content: "Classify the sentiment of the review." }, { role: "user", content: review }],
            response_format: zodResponseFormat(Sentiment, "sentiment"),
            temperature: 0
          })
        )
      const good = yield* classify("The movie was absolutely wonderful.")
      expect(good.choices[0]!.message.parsed).toEqual({ sentiment: "positive" })
      const bad = yield* classify("The pizza was really awful.")
      expect(bad.choices[0]!.message.parsed).toEqual({ sentiment: "negative" })

      // a shape the model was never trained on comes back in that shape: the schema constrains decoding
      const Verdict = z.object({ verdict: z.enum(["thumbs-up", "thumbs-down"]) })
      const verdict = yield* call((openai) =>
        openai.chat.completions.parse({
          model,
          messages: [{ role: "system", content: "Classify the sentiment of the review." }, { role: "user", content: "Great food." }],
          response_format: zodResponseFormat(Verdict, "verdict"),
          temperature: 0
        })
      )
      expect(Verdict.parse(verdict.choices[0]!.message.parsed)).toEqual(verdict.choices[0]!.message.parsed)
    }), 30_000)

  it.effect("a client tool round trip: tool_calls come back, the client's result continues the conversation", () =>
    Effect.gen(function* () {
      const first = yield* call((openai) =>
        openai.chat.completions.create({ model, messages: [question], tools: [calculatorTool], temperature: 0 })
      )
      const [choice] = first.choices
      expect(choice!.finish_reason).toBe("tool_calls")
      const calls = choice!.message.tool_calls ?? []
      expect(calls).toHaveLength(1)
      const toolCall = calls[0]!
      if (toolCall.type !== "function") return expect.fail(`a function call, got ${toolCall.type}`)
      expect(toolCall.id).not.toBe("")
      expect(toolCall.function.name).toBe("calculator")
      const args = JSON.parse(toolCall.function.arguments) as { expression: string }
      expect(args.expression.replace(/\s/g, "")).toBe("12+7")
      // the server ran nothing itself
      expect((first as unknown as { pagantic: { toolCallsMade: ReadonlyArray<unknown> } }).pagantic.toolCallsMade).toEqual([])

      const second = yield* call((openai) =>
        openai.chat.completions.create({
          model,
          messages: [
            question,
            choice!.message,
            { role: "tool", tool_call_id: toolCall.id, content: calculate(args.expression) }
          ],
          tools: [calculatorTool],
          temperature: 0
        })
      )
      expect(second.choices[0]!.finish_reason).toBe("stop")
      expect(second.choices[0]!.message.tool_calls ?? []).toEqual([])
      expect(second.choices[0]!.message.content).toContain("19")
    }), 60_000)

  it.effect("runTools: the SDK's own tool runner calls the client's function and loops to the answer", () =>
    Effect.gen(function* () {
      const executed: Array<string> = []
      const result = yield* call(async (openai) => {
        const runner = openai.chat.completions.runTools({
          model,
          messages: [question],
          temperature: 0,
          tools: [
            {
              type: "function",
              function: {
                ...calculatorTool.function,
                parse: JSON.parse,
                function: (args: { expression: string }) => {
                  executed.push(args.expression)
                  return calculate(args.expression)
                }
              }
            }
          ]
        })
        return { content: await runner.finalContent(), messages: runner.messages }
      })
      expect(executed.map((e) => e.replace(/\s/g, ""))).toEqual(["12+7"])
      expect(result.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
      expect(result.content).toContain("19")
    }), 60_000)

  it.effect("n=3: three choices from one request, one usage for them all", () =>
    Effect.gen(function* () {
      const three = yield* call((openai) =>
        openai.chat.completions.create({ model, messages: hello, n: 3, temperature: 1, seed: 11, max_tokens: 24 })
      )
      expect(three.choices.map((c) => c.index)).toEqual([0, 1, 2])
      for (const choice of three.choices) {
        expect(choice.message.content).toEqual(expect.any(String))
        expect(choice.message.content).not.toBe("")
        expect(["stop", "length"]).toContain(choice.finish_reason)
      }
      expect(three.usage!.completion_tokens).toBeGreaterThanOrEqual(3)
      expect(three.usage!.total_tokens).toBe(three.usage!.prompt_tokens + three.usage!.completion_tokens)

      // streamed, the same seeded request: each choice's deltas under its index spell the same three answers
      const texts = yield* call(async (openai) => {
        const stream = await openai.chat.completions.create({ model, messages: hello, n: 3, temperature: 1, seed: 11, max_tokens: 24, stream: true })
        const byIndex = ["", "", ""]
        for await (const chunk of stream) for (const choice of chunk.choices) byIndex[choice.index] += choice.delta.content ?? ""
        return byIndex
      })
      expect(texts).toEqual(three.choices.map((c) => c.message.content))
    }), 60_000)

  it.effect("stop: the answer ends before the first stop string, finish_reason stop; more than 4 is a 400 naming stop", () =>
    Effect.gen(function* () {
      const whole = yield* call((openai) => openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24 }))
      const content = whole.choices[0]!.message.content!
      expect(content).toContain("help")
      const cut = yield* call((openai) =>
        openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24, stop: ["help", "zebra"] })
      )
      expect(cut.choices[0]!.finish_reason).toBe("stop")
      expect(cut.choices[0]!.message.content).toBe(content.slice(0, content.indexOf("help")))
      // a single string is a stop too
      const single = yield* call((openai) =>
        openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24, stop: "help" })
      )
      expect(single.choices[0]!.message.content).toBe(content.slice(0, content.indexOf("help")))

      const tooMany = yield* refused((openai) =>
        openai.chat.completions.create({ model, messages: hello, stop: ["a", "b", "c", "d", "e"] })
      )
      expect(tooMany).toBeInstanceOf(OpenAI.BadRequestError)
      expect((tooMany as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("stop")
    }), 60_000)

  it.effect("seed: the same sampled request twice gives the same answer; other seeds vary it", () =>
    Effect.gen(function* () {
      // a prompt the model was not trained on: its answer is not settled, so sampling shows
      const sample = (seed: number) =>
        Effect.map(
          call((openai) =>
            openai.chat.completions.create({ model, messages: [{ role: "user", content: "Tell me a story" }], temperature: 2, seed, max_tokens: 16 })
          ),
          (c) => c.choices[0]!.message.content
        )
      const a = yield* sample(42)
      expect(yield* sample(42)).toBe(a)
      const others = new Set<string | null>([a])
      for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) others.add(yield* sample(seed))
      expect(others.size).toBeGreaterThan(1)
    }), 60_000)

  it.effect("logprobs: one entry per generated token, spelling the answer, with the greedy token on top", () =>
    Effect.gen(function* () {
      const completion = yield* call((openai) =>
        openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24, logprobs: true, top_logprobs: 3 })
      )
      const [choice] = completion.choices
      const entries = choice!.logprobs?.content ?? []
      expect(entries.length).toBeGreaterThan(0)
      expect(entries.length).toBeLessThanOrEqual(completion.usage!.completion_tokens)
      expect(entries.map((e) => e.token).join("")).toBe(choice!.message.content)
      for (const entry of entries) {
        expect(Number.isFinite(entry.logprob)).toBe(true)
        expect(entry.logprob).toBeLessThanOrEqual(0)
        expect(entry.top_logprobs).toHaveLength(3)
        const tops = entry.top_logprobs.map((t) => t.logprob)
        expect([...tops].sort((x, y) => y - x)).toEqual(tops)
        // greedy decoding picks the most probable token
        expect(entry.top_logprobs[0]!.token).toBe(entry.token)
      }
      // without logprobs, none are sent
      const plain = yield* call((openai) => openai.chat.completions.create({ model, messages: hello, temperature: 0, max_tokens: 24 }))
      expect(plain.choices[0]!.logprobs ?? null).toBeNull()
    }), 30_000)

  it.effect("errors: a refused parameter is a BadRequestError with our code and the parameter named", () =>
    Effect.gen(function* () {
      const error = yield* refused((openai) => openai.chat.completions.create({ model, messages: hello, temperature: 5 }))
      expect(error).toBeInstanceOf(OpenAI.APIError)
      expect(error).toBeInstanceOf(OpenAI.BadRequestError)
      const api = error as InstanceType<typeof OpenAI.BadRequestError>
      expect(api.status).toBe(400)
      expect(api.code).toBe("CONFIG_INVALID_REQUEST")
      expect(api.type).toBe("invalid_request_error")
      expect(api.param).toBe("temperature")
      expect(api.message).toContain("temperature")
      expect(api.requestID).toEqual(expect.any(String))

      // a streamed request refused before its first byte is an APIError too, not a broken stream
      const streamed = yield* refused((openai) =>
        openai.chat.completions.create({ model, messages: hello, top_p: 3, stream: true })
      )
      expect(streamed).toBeInstanceOf(OpenAI.BadRequestError)
      expect((streamed as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("top_p")
    }), 30_000)
})
