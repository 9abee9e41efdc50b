/**
 * Codes from real faults (#10): each failure starts where it would in production
 * and travels through a loop and the HTTP adapter to its code and status. Nothing
 * here is a pre-built failure: the bundled model is given a prompt longer than its
 * context or a token limit that cuts its tool call, the OpenAI engine talks to a
 * loopback server that answers garbage, a cut stream or a 500, and a tool says it
 * is unavailable. Where a policy retries, the fake server (or the tool) counts the
 * attempts. Real time throughout; every run is bounded.
 *
 * VALIDATION_SEMANTIC_FAILED is not here: nothing raises it yet.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import type { InferenceFailure } from "../src/domain/Failure.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as OpenAiEngine from "../src/layers/OpenAiEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Calculator from "../src/layers/tools/Calculator.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import { Engine } from "../src/services/Engine.js"
import type { InferenceRequest } from "../src/services/Engine.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as Loopback from "./support/loopback.js"
import { chatRequest, post, send, serve } from "./support/server.js"

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/** A prompt of about 1,500 words: far more than a 256-token context holds. */
const TOO_LONG = Array.from({ length: 1_500 }, (_, i) => `word${i % 97}`).join(" ")

/** The bundled model with a small context, so that a long prompt overflows it. */
const smallContext = LlamaEngine.layer({ threads: 1, contextSize: 256, sequences: 2 })

/** An engine layer that records every request it is given before passing it on. */
const recording = <E>(engine: Layer.Layer<Engine, E>) => {
  const requests: Array<InferenceRequest> = []
  const wrapped = Layer.effect(
    Engine,
    Effect.map(Engine, (inner) =>
      Engine.of({
        ...inner,
        infer: (request) => Effect.zipRight(Effect.sync(() => requests.push(request)), inner.infer(request)),
        stream: (request) => {
          requests.push(request)
          return inner.stream(request)
        }
      }))
  ).pipe(Layer.provide(engine))
  return { layer: wrapped, requests }
}

/** The OpenAI engine at `url`: one transport retry, 10 ms apart; the window given, so /v1/models is never asked. */
const openAiAt = (url: string) =>
  OpenAiEngine.layer({
    baseUrl: url,
    model: "fake-model",
    timeout: "3 seconds",
    contextWindow: 4096,
    retry: { times: 1, base: "10 millis" }
  }).pipe(Layer.provide(NodeHttpClient.layerUndici))

/** Attempts per engine call under `openAiAt`'s transport policy (1 + retries). */
const TRANSPORT_ATTEMPTS = 2
/** Engine calls per turn under the loops' default inference policy (`RetryPolicy.inference`: 1 + 2 retries). */
const LOOP_ATTEMPTS = 3

const completion = (content: string) => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "fake-model",
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }
})

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta, finish_reason: finish }]
})

/** The chat-completions requests a fake server received (never /v1/models). */
const completionsOf = (server: Loopback.Loopback) =>
  server.requests.filter((r) => r.url.endsWith("/chat/completions")).length

/** A fake OpenAI server answering with `handler`, and `pagantic serve` on top of it. */
const overFake = <A>(
  handler: Loopback.Handler,
  f: (fixture: { readonly server: Loopback.Loopback; readonly url: string }) => Effect.Effect<A>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const server = yield* Loopback.make(handler, { lifetime: 30_000 })
      const { url } = yield* serve({ engine: openAiAt(server.url), tools: [] })
      return yield* f({ server, url })
    })
  ).pipe(
    // every 5xx is logged by design (Hostile.test.ts checks it); not in this file's output
    Logger.withMinimumLogLevel(LogLevel.None),
    Effect.timeout("25 seconds"),
    Effect.orDie
  )

/** A loop on the OpenAI engine at `url`, retrying inference 10 ms apart as often as the default policy does. */
const loopOn = (url: string) =>
  // the HTTP client lives as long as the test's scope, not just while the loop is made
  Effect.flatMap(Layer.build(openAiAt(url)), (context) =>
    AgentLoop.make({ inferenceRetry: RetryPolicy.exponential({ base: "10 millis", times: LOOP_ATTEMPTS - 1 }) }).pipe(
      Effect.provide(context)
    ))

/** The calculator as a tool whose dependency is down; `checks` counts how often it was asked. */
const unavailableCalculator = (checks: { count: number }, idempotent = true) =>
  Tool.make({
    ...Calculator.calculator,
    idempotent,
    available: Effect.sync(() => {
      checks.count++
      return false
    })
  })

const expectFailure = (failure: InferenceFailure, code: InferenceFailure["code"], retryable: boolean) => {
  expect(failure._tag).toBe("InferenceFailure")
  expect([failure.code, failure.retryable]).toEqual([code, retryable])
}

// ---------------------------------------------------------------------------
// INFERENCE_CONTEXT_EXCEEDED: the bundled model, a prompt longer than its context
// ---------------------------------------------------------------------------

describe("INFERENCE_CONTEXT_EXCEEDED from a prompt longer than the context", () => {
  it.live("through the AgentLoop: a typed failure, asked once (not retryable), history unchanged, the loop still answers", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const engine = recording(smallContext)
        const context = yield* Layer.build(engine.layer)
        const agent = yield* Effect.provide(AgentLoop.make({ maxTokens: 8 }), context)
        const failure = yield* Effect.flip(agent.chat(TOO_LONG))
        expectFailure(failure as InferenceFailure, "INFERENCE_CONTEXT_EXCEEDED", false)
        expect(failure.details).toMatchObject({ contextWindow: 256 })
        expect((failure.details as { promptTokens: number }).promptTokens).toBeGreaterThan(256)
        expect(engine.requests).toHaveLength(1)
        expect(yield* agent.messages).toEqual([])
        // the loop is not broken by it: a short message fits
        const after = yield* agent.chat("Hello")
        expect(["finish", "length"]).toContain(after.stopReason)
        expect((yield* agent.messages).map((m) => m.role)).toEqual(["user", "assistant"])
      })
    ).pipe(Effect.timeout("25 seconds"), Effect.orDie), 30_000)

  it.live("through serve: 422 with the code on /v1/run and /v1/chat/completions, nothing stored", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const engine = recording(smallContext)
        const { sessions, url } = yield* serve({ engine: engine.layer })
        const run = yield* post(`${url}/v1/run`, chatRequest(TOO_LONG))
        expect(run.status, run.text.slice(0, 300)).toBe(422)
        expect(run.json.error).toMatchObject({ code: "INFERENCE_CONTEXT_EXCEEDED", retryable: false })
        expect(run.json.error.message).toContain("context window holds 256")
        expect(yield* sessions).toEqual([])

        const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: TOO_LONG }] })
        expect(chat.status, chat.text.slice(0, 300)).toBe(422)
        expect(chat.json.error).toMatchObject({ code: "INFERENCE_CONTEXT_EXCEEDED", type: "invalid_request_error" })
        // one engine call per request: no retry of a failure that cannot change
        expect(engine.requests).toHaveLength(2)

        // a streamed request fails before its first byte: still a JSON error with its status
        const streamed = yield* send(`${url}/v1/chat/completions`, {
          body: JSON.stringify({ messages: [{ role: "user", content: TOO_LONG }], stream: true })
        })
        expect(streamed.status).toBe(422)
        expect(streamed.headers.get("content-type")).toContain("application/json")
        expect(streamed.json.error.code).toBe("INFERENCE_CONTEXT_EXCEEDED")

        // the other loops: SpecializedLoop, RedundantLoop, a plan's infer step
        const schema = { type: "object", properties: { sentiment: { type: "string", enum: ["positive", "negative"] } } }
        const others = [
          { mode: "structured", messages: [{ role: "user", content: TOO_LONG }], output: { schema } },
          { mode: "redundant", messages: [{ role: "user", content: TOO_LONG }], output: { schema }, redundancy: { n: 3 } },
          { mode: "plan", messages: [], plan: { steps: [{ name: "a", type: "infer", input: TOO_LONG }] } }
        ]
        for (const body of others) {
          const res = yield* post(`${url}/v1/run`, body)
          expect(res.status, `${body.mode}: ${res.text.slice(0, 300)}`).toBe(422)
          expect(res.json.error.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
        }
      })
    ).pipe(Effect.timeout("25 seconds"), Effect.orDie), 30_000)

  it.live("mid-turn: a tool result that overflows the context ends the turn in 422 at the next inference", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const verbose = Tool.make({ ...Calculator.calculator, handler: () => Effect.succeed(TOO_LONG) })
        const engine = recording(smallContext)
        const { url } = yield* serve({ engine: engine.layer, tools: [verbose] })
        const res = yield* post(`${url}/v1/run`, chatRequest("What is 12 + 7?", { hints: { temperature: 0 } }))
        expect(res.status, res.text.slice(0, 300)).toBe(422)
        expect(res.json.error.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
        // the first inference fitted and called the tool; the second carried its result
        expect(engine.requests).toHaveLength(2)
        expect(engine.requests[1]!.messages.at(-1)).toMatchObject({ role: "tool", name: "calculator" })
      })
    ).pipe(Effect.timeout("25 seconds"), Effect.orDie), 30_000)
})

// ---------------------------------------------------------------------------
// A tool call cut off by max_tokens on the bundled model
// ---------------------------------------------------------------------------

describe("a tool call cut off by max_tokens on the bundled model", () => {
  it.live("is a 200 with finish_reason length on /v1/chat/completions and stopReason length on /v1/run, never a 502", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { url } = yield* serve({ engine: LlamaEngine.layer({ threads: 1 }) })
        const ask = (content: string, extra: Record<string, unknown>) =>
          post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content }], ...extra })

        // with room, the model's first move for arithmetic is a calculator call: the cut below is inside it
        for (const content of ["What is 12 + 7?", "Please compute 71 times 6."]) {
          const whole = yield* ask(content, { max_tokens: 64, temperature: 0 })
          expect(whole.status, whole.text.slice(0, 300)).toBe(200)
          expect(whole.json.pagantic.toolCallsMade[0]).toMatchObject({ name: "calculator", isError: false })
        }

        const cut = yield* ask("What is 12 + 7?", { max_tokens: 4, temperature: 0 })
        expect(cut.status, cut.text.slice(0, 300)).toBe(200)
        expect(cut.json.choices[0].finish_reason).toBe("length")
        expect(cut.json.choices[0].message.content).toBe("")
        expect(cut.json.pagantic.toolCallsMade).toEqual([])
        expect(cut.json.usage.completion_tokens).toBeLessThanOrEqual(4)

        // the sweep: max_tokens 1..16, sampled as a client would; never a bad gateway
        const statuses = new Set<number>()
        const reasons = new Set<string>()
        for (const content of ["What is 12 + 7?", "Please compute 71 times 6."]) {
          for (let maxTokens = 1; maxTokens <= 16; maxTokens++) {
            const res = yield* ask(content, { max_tokens: maxTokens })
            statuses.add(res.status)
            if (res.status === 200) reasons.add(res.json.choices[0].finish_reason)
          }
        }
        expect([...statuses]).toEqual([200])
        expect(reasons.has("length")).toBe(true)

        // streamed: the same cut is a finish chunk with finish_reason length
        const streamed = yield* send(`${url}/v1/chat/completions`, {
          body: JSON.stringify({ messages: [{ role: "user", content: "What is 12 + 7?" }], max_tokens: 4, temperature: 0, stream: true })
        })
        expect(streamed.status).toBe(200)
        const chunks = streamed.text.split("\n").filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)))
        expect(chunks.some((c) => c.error !== undefined)).toBe(false)
        expect(chunks.at(-1).choices[0].finish_reason).toBe("length")

        const run = yield* post(`${url}/v1/run`, chatRequest("What is 12 + 7?", { hints: { maxTokens: 4, temperature: 0 } }))
        expect(run.status, run.text.slice(0, 300)).toBe(200)
        expect(run.json.stopReason).toBe("length")
        expect(run.json.error).toBeUndefined()
        expect(run.json.toolCallsMade).toEqual([])
      })
    ).pipe(Effect.timeout("40 seconds"), Effect.orDie), 45_000)
})

// ---------------------------------------------------------------------------
// The OpenAI engine against a fake server: garbage, a cut stream, a 500
// ---------------------------------------------------------------------------

describe("INFERENCE_ENGINE_ERROR and INFERENCE_MALFORMED_RESPONSE from a real OpenAI-compatible server", () => {
  it.scopedLive("through the AgentLoop: a 500 is retried by the transport, then by the loop; the failure is typed", () =>
    Effect.gen(function* () {
      const server = yield* Loopback.make((_, res) => Loopback.json(res, 500, { error: { message: "CUDA out of memory" } }))
      const agent = yield* loopOn(server.url)
      const failure = yield* Effect.flip(agent.chat("hi"))
      expectFailure(failure as InferenceFailure, "INFERENCE_ENGINE_ERROR", true)
      expect(failure.details).toMatchObject({ status: 500, attempts: TRANSPORT_ATTEMPTS })
      expect(completionsOf(server)).toBe(TRANSPORT_ATTEMPTS * LOOP_ATTEMPTS)
      expect(yield* agent.messages).toEqual([])
    }))

  it.scopedLive("through the AgentLoop: garbage is malformed, not retried by the transport, retried by the loop", () =>
    Effect.gen(function* () {
      const replies = [
        () => ({ status: 200, body: JSON.stringify({ hello: "world" }) }),
        () => ({ status: 200, body: JSON.stringify(completion("a long answer")).slice(0, 40) }),
        () => ({ status: 200, body: "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>" })
      ]
      const reasons: Array<unknown> = []
      for (const reply of replies) {
        const server = yield* Loopback.make((_, res) => {
          const { body, status } = reply()
          Loopback.text(res, status, body, { "content-type": "application/json" })
        })
        const agent = yield* loopOn(server.url)
        const failure = yield* Effect.flip(agent.chat("hi"))
        expectFailure(failure as InferenceFailure, "INFERENCE_MALFORMED_RESPONSE", true)
        expect(failure.details).toMatchObject({ status: 200 })
        // why, in plain words: never the schema's decoding tree
        expect(failure.details.reason).not.toMatch(/<->|readonly |Encoded side/)
        expect(completionsOf(server)).toBe(LOOP_ATTEMPTS)
        reasons.push(failure.details.reason)
      }
      expect(reasons[0]).toBe("choices: is missing")
      expect(reasons[1]).toContain("the reply: ")
    }))

  it.scopedLive("through the AgentLoop: one garbage reply, then a completion: the loop recovers on its retry", () =>
    Effect.gen(function* () {
      const server = yield* Loopback.make((_, res, n) =>
        n === 1 ? Loopback.text(res, 200, "{\"choices\": [", { "content-type": "application/json" }) : Loopback.json(res, 200, completion("Paris."))
      )
      const agent = yield* loopOn(server.url)
      const turn = yield* agent.chat("capital of France?")
      expect(turn.content).toBe("Paris.")
      expect(turn.inferences).toBe(1)
      expect(completionsOf(server)).toBe(2)
    }))

  it.live("through serve: a 500 is 502 INFERENCE_ENGINE_ERROR on both endpoints, after the retries the policies allow", () =>
    overFake(
      (_, res) => Loopback.json(res, 500, { error: { message: "CUDA out of memory" } }),
      ({ server, url }) =>
        Effect.gen(function* () {
          const run = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(run.status, run.text.slice(0, 300)).toBe(502)
          expect(run.json.error).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: true })
          expect(completionsOf(server)).toBe(TRANSPORT_ATTEMPTS * LOOP_ATTEMPTS)

          const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] })
          expect(chat.status, chat.text.slice(0, 300)).toBe(502)
          expect(chat.json.error).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", type: "server_error" })
          expect(completionsOf(server)).toBe(2 * TRANSPORT_ATTEMPTS * LOOP_ATTEMPTS)
        })
    ))

  it.live("through serve: a garbage event in the stream is 502 INFERENCE_MALFORMED_RESPONSE, retried by the loop only before any text", () =>
    overFake(
      (_, res, n) =>
        Loopback.sse(res, n <= 2 * LOOP_ATTEMPTS ? ["<html>oops</html>"] : [chunk({ role: "assistant", content: "a" }), "<html>oops</html>"]),
      ({ server, url }) =>
        Effect.gen(function* () {
          const run = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(run.status, run.text.slice(0, 300)).toBe(502)
          expect(run.json.error).toMatchObject({ code: "INFERENCE_MALFORMED_RESPONSE", retryable: true })
          expect(run.json.error.details.reason).toContain("not valid JSON")
          expect(run.text).not.toMatch(/<->|readonly |Encoded side/)
          expect(completionsOf(server)).toBe(LOOP_ATTEMPTS)

          const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] })
          expect(chat.status, chat.text.slice(0, 300)).toBe(502)
          expect(chat.json.error).toMatchObject({ code: "INFERENCE_MALFORMED_RESPONSE", type: "server_error" })
          expect(completionsOf(server)).toBe(2 * LOOP_ATTEMPTS)

          // after text went out the attempt is not repeated
          const late = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(late.json.error.code).toBe("INFERENCE_MALFORMED_RESPONSE")
          expect(late.json.content).toBe("a")
          expect(completionsOf(server)).toBe(2 * LOOP_ATTEMPTS + 1)
        })
    ))

  it.live("through serve: a JSON body that is not a completion (stream ignored) is 502 INFERENCE_MALFORMED_RESPONSE", () =>
    overFake(
      (_, res) => Loopback.text(res, 200, JSON.stringify(completion("cut")).slice(0, 40), { "content-type": "application/json" }),
      ({ server, url }) =>
        Effect.gen(function* () {
          const run = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(run.status, run.text.slice(0, 300)).toBe(502)
          expect(run.json.error.code).toBe("INFERENCE_MALFORMED_RESPONSE")
          expect(completionsOf(server)).toBe(LOOP_ATTEMPTS)
        })
    ))

  it.live("through serve: a stream cut after text is 502 INFERENCE_ENGINE_ERROR with that text, not retried (its deltas are out)", () =>
    overFake(
      (_, res) => {
        Loopback.sse(res, [chunk({ role: "assistant", content: "Once upon" })], { done: false, end: false })
        setTimeout(() => res.socket?.destroy(), 30)
      },
      ({ server, url }) =>
        Effect.gen(function* () {
          const run = yield* post(`${url}/v1/run`, chatRequest("a story"))
          expect(run.status, run.text.slice(0, 300)).toBe(502)
          expect(run.json.error).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: true })
          expect(run.json.error.details).toMatchObject({ reason: "stream_cut", status: 200 })
          // the partial output is the one attempt's text, never repeated
          expect(run.json.content).toBe("Once upon")
          expect(completionsOf(server)).toBe(1)

          const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "a story" }] })
          expect(chat.status, chat.text.slice(0, 300)).toBe(502)
          expect(chat.json.error.code).toBe("INFERENCE_ENGINE_ERROR")
          expect(completionsOf(server)).toBe(2)

          // an SSE client sees the text once, then the error
          const streamed = yield* send(`${url}/v1/chat/completions`, {
            body: JSON.stringify({ messages: [{ role: "user", content: "a story" }], stream: true })
          })
          expect(streamed.text.split("Once upon").length - 1).toBe(1)
          expect(streamed.text).toContain("INFERENCE_ENGINE_ERROR")
          expect(completionsOf(server)).toBe(3)
        })
    ))
})

describe("what the OpenAI-compatible server says about the request is kept through serve", () => {
  it.live("a context overflow (as a 400 or as an error event in the stream) is 422, asked once; refused credentials 503", () =>
    overFake(
      (req, res) => {
        switch ((req.json as { messages: Array<{ content: string }> }).messages.at(-1)!.content) {
          case "too long":
            return Loopback.json(res, 400, {
              error: { message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens" }
            })
          case "too long, streamed":
            return Loopback.sse(res, [
              { error: { code: 400, message: "the request exceeds the available context size", type: "exceed_context_size_error" } }
            ])
          default:
            return Loopback.json(res, 401, { error: { message: "invalid api key" } })
        }
      },
      ({ server, url }) =>
        Effect.gen(function* () {
          for (const content of ["too long", "too long, streamed"]) {
            const run = yield* post(`${url}/v1/run`, chatRequest(content))
            expect(run.status, run.text.slice(0, 300)).toBe(422)
            expect(run.json.error).toMatchObject({ code: "INFERENCE_CONTEXT_EXCEEDED", retryable: false })
          }
          const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "too long" }] })
          expect(chat.status).toBe(422)
          expect(chat.json.error).toMatchObject({ code: "INFERENCE_CONTEXT_EXCEEDED", type: "invalid_request_error" })
          const denied = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(denied.status).toBe(503)
          expect(denied.json.error).toMatchObject({ code: "INFERENCE_MODEL_UNAVAILABLE", retryable: false })
          // none of these is retried, by the transport or by the loop
          expect(completionsOf(server)).toBe(4)
        })
    ))
})

// ---------------------------------------------------------------------------
// TOOL_UNAVAILABLE: a tool whose dependency is down
// ---------------------------------------------------------------------------

describe("TOOL_UNAVAILABLE from a tool that says it cannot run", () => {
  it.live("through the AgentLoop: retried when idempotent, then fed back to the model as an error; the turn goes on", () =>
    Effect.gen(function* () {
      const checks = { count: 0 }
      const once = { count: 0 }
      const secondary = Tool.make({ ...unavailableCalculator(once, false), name: "calculator_once" })
      const program = Effect.gen(function* () {
        const agent = yield* AgentLoop.make()
        const turn = yield* agent.chat("What is 12 + 7?")
        const requests = yield* ScriptedEngine.requests
        return { turn, requests, history: yield* agent.messages }
      })
      const { history, requests, turn } = yield* program.pipe(
        Effect.provide(
          Layer.merge(
            ScriptedEngine.layer([
              ScriptedEngine.toolCalls([
                { name: "calculator", arguments: { expression: "12 + 7" } },
                { name: "calculator_once", arguments: { expression: "12 + 7" } }
              ]),
              ScriptedEngine.reply("The calculator is down; 12 + 7 is 19.")
            ]),
            Registry.layer([unavailableCalculator(checks), secondary])
          )
        )
      )
      expect(turn.content).toBe("The calculator is down; 12 + 7 is 19.")
      expect(turn.stopReason).toBe("finish")
      expect(turn.inferences).toBe(2)
      expect(turn.toolCalls.map((r) => [r.name, r.isError])).toEqual([["calculator", true], ["calculator_once", true]])
      for (const record of turn.toolCalls) expect(record.result).toContain("TOOL_UNAVAILABLE")
      // RetryPolicy.tool: the idempotent tool is asked 1 + 2 times, the other once
      expect(checks.count).toBe(3)
      expect(once.count).toBe(1)
      // the model saw the errors in its next request
      const fedBack = requests[1]!.messages.filter((m) => m.role === "tool")
      expect(fedBack).toHaveLength(2)
      for (const message of fedBack) {
        expect(message).toMatchObject({ isError: true })
        expect(message.content).toContain("TOOL_UNAVAILABLE")
      }
      expect(history.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"])
    }).pipe(Effect.timeout("10 seconds"), Effect.orDie))

  it.live("through serve on the bundled model: the model's calculator call meets TOOL_UNAVAILABLE, the answer is still 200", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const checks = { count: 0 }
        const { url } = yield* serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [unavailableCalculator(checks)] })
        const res = yield* post(`${url}/v1/chat/completions`, {
          messages: [{ role: "user", content: "What is 12 + 7?" }],
          max_tokens: 48,
          temperature: 0
        })
        expect(res.status, res.text.slice(0, 300)).toBe(200)
        const made = res.json.pagantic.toolCallsMade as ReadonlyArray<{ name: string; isError: boolean; result: string }>
        expect(made.length).toBeGreaterThan(0)
        expect(made[0]).toMatchObject({ name: "calculator", isError: true })
        expect(made[0]!.result).toContain("TOOL_UNAVAILABLE")
        expect(checks.count).toBe(3 * made.length)
      })
    ).pipe(Effect.timeout("40 seconds"), Effect.orDie), 45_000)

  it.live("through serve in plan mode: a tool step is 503 TOOL_UNAVAILABLE", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const checks = { count: 0 }
        const { url } = yield* serve({
          engine: ScriptedEngine.layer([ScriptedEngine.reply("unused")]),
          tools: [unavailableCalculator(checks)]
        })
        const res = yield* post(`${url}/v1/run`, {
          mode: "plan",
          messages: [],
          plan: { steps: [{ name: "sum", type: "tool", input: { name: "calculator", arguments: { expression: "12 + 7" } } }] }
        })
        expect(res.status, res.text.slice(0, 300)).toBe(503)
        expect(res.json.error).toMatchObject({ code: "TOOL_UNAVAILABLE", category: "ToolFailure", retryable: true })
        // a plan step runs its tool once: plans retry only constraint and validation failures
        expect(checks.count).toBe(1)
      })
    ).pipe(Logger.withMinimumLogLevel(LogLevel.None), Effect.timeout("20 seconds"), Effect.orDie))
})
