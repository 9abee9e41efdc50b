/**
 * Server-sent events on both sides of the OpenAI wire: the server's framing of a
 * streamed chat completion (adapters/http/ChatCompletions) and the client's
 * parsing of one (layers/openai/Stream), both on @effect/experimental's Sse.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import { StreamAccumulator, type Step } from "../src/layers/openai/Stream.js"
import * as OpenAiEngine from "../src/layers/OpenAiEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { InferenceRequest, type StreamPart } from "../src/services/Engine.js"
import { post, serve } from "./support/server.js"

const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }], ...extra })

const errorPayload = (payload: string) => InferenceFailure.contextExceeded(`error event: ${payload.slice(0, 40)}`)

const measured = { elapsedMillis: 5, contextWindow: 4096 }

/** Feeds `pieces` in order, then ends the stream: every part, and the failure if one ended it. */
const feed = (pieces: ReadonlyArray<string>, options: { readonly maxEventSize?: number } = {}) => {
  const state = new StreamAccumulator(errorPayload, options)
  const parts: Array<StreamPart> = []
  const take = (step: Step) => {
    parts.push(...step.parts)
    return step.failure
  }
  for (const piece of pieces) {
    const failure = take(state.text(piece))
    if (failure !== undefined) return { parts, failure }
    if (state.done) break
  }
  return { parts, failure: take(state.end(measured)) }
}

const textOf = (parts: ReadonlyArray<StreamPart>) => parts.flatMap((p) => (p._tag === "TextDelta" ? [p.text] : [])).join("")

describe("SSE, client side (layers/openai/Stream)", () => {
  // comments, CRLF, event/id/retry fields, data over two lines, a last event without its blank line
  const wire = [
    ": keep-alive\r\n\r\n",
    `data: ${chunk({ role: "assistant", content: "Hel" })}\r\n\r\n`,
    `event: message\nid: 7\ndata: ${chunk({ content: "lo" })}\n\n`,
    "retry: 10\n\n",
    `data: {"id":"chatcmpl-1","object":"chat.completion.chunk",\ndata: "choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}\n\n`,
    `data: ${chunk({}, "stop", { usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`,
    "data: [DONE]"
  ].join("")

  it("events parse the same however the text is cut: whole, byte by byte, in odd pieces", () => {
    const whole = feed([wire])
    expect(whole.failure).toBeUndefined()
    expect(textOf(whole.parts)).toBe("Hello!")
    const last = whole.parts.at(-1)
    expect(last?._tag).toBe("Finish")
    if (last?._tag === "Finish") {
      expect(last.result.content).toBe("Hello!")
      expect(last.result.finishReason).toBe("stop")
      expect(last.result.usage.promptTokens).toBe(3)
    }
    expect(feed([...wire])).toEqual(whole)
    const pieces: Array<string> = []
    for (let i = 0; i < wire.length; i += 7) pieces.push(wire.slice(i, i + 7))
    expect(feed(pieces)).toEqual(whole)
  })

  it("a bad event after good ones in the same piece: the deltas before it still go out, then a typed failure", () => {
    const { failure, parts } = feed([`data: ${chunk({ content: "a" })}\n\ndata: <html>oops</html>\n\n`])
    expect(parts).toEqual([{ _tag: "TextDelta", text: "a" }])
    expect(failure?.code).toBe("INFERENCE_MALFORMED_RESPONSE")
    expect(failure?.details.body).toContain("<html>")
  })

  it("an error event in a 200 stream goes through the engine's error mapping", () => {
    const { failure } = feed([`data: {"error":{"message":"too long"}}\n\n`])
    expect(failure?.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
  })

  it("an event past the size bound fails typed instead of growing (also without a line end)", () => {
    const { failure, parts } = feed(
      [`data: ${chunk({ content: "a" })}\n\n`, "data: ", "x".repeat(600), "x".repeat(600)],
      { maxEventSize: 1_000 }
    )
    expect(parts).toEqual([{ _tag: "TextDelta", text: "a" }])
    expect(failure?.code).toBe("INFERENCE_MALFORMED_RESPONSE")
    expect(failure?.details.reason).toBe("event_too_large")
    expect(failure?.message).toContain("1000")
  })

  it("an event of many short lines past the size bound fails typed (the parser's own bound, every line within it)", () => {
    const line = `data: ${"y".repeat(94)}\n`
    const { failure, parts } = feed([`data: ${chunk({ content: "a" })}\n\n`, line.repeat(20)], { maxEventSize: 1_000 })
    expect(parts).toEqual([{ _tag: "TextDelta", text: "a" }])
    expect(failure?.code).toBe("INFERENCE_MALFORMED_RESPONSE")
    expect(failure?.details.reason).toBe("event_too_large")
    // the same lines under the bound, closed by a blank line, are one (bad) event, not a size failure
    const under = feed([line.repeat(5) + "\n"], { maxEventSize: 1_000 })
    expect(under.failure?.details.reason).not.toBe("event_too_large")
  })

  it("a reply that is not an event stream is malformed, naming its first line; an empty one was cut", () => {
    const html = feed(["<html><body>502 Bad Gateway</body></html>\n"])
    expect(html.failure?.code).toBe("INFERENCE_MALFORMED_RESPONSE")
    expect(html.failure?.message).toContain("not a server-sent event stream")
    expect(html.failure?.details.body).toContain("502 Bad Gateway")
    const empty = feed([""])
    expect(empty.failure?.code).toBe("INFERENCE_ENGINE_ERROR")
    expect(empty.failure?.details.reason).toBe("stream_cut")
  })

  it("nothing after [DONE] is read", () => {
    const { failure, parts } = feed([`data: ${chunk({ content: "a" }, "stop")}\n\ndata: [DONE]\n\ndata: not json\n\n`])
    expect(failure).toBeUndefined()
    expect(textOf(parts)).toBe("a")
  })
})

describe("SSE, server side (adapters/http/ChatCompletions)", () => {
  it.scopedLive("a streamed completion is framed as OpenAI frames it: `data: <json>` events, [DONE] last", () =>
    Effect.gen(function* () {
      const served = yield* serve({ engine: ScriptedEngine.layer([ScriptedEngine.reply("Once upon a time")]), tools: [] })
      const res = yield* post(`${served.url}/v1/chat/completions`, {
        stream: true,
        messages: [{ role: "user", content: "a story" }]
      })
      expect(res.status).toBe(200)
      expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/)
      expect(res.text).toMatch(/^(data: \{[^\n]*\}\n\n)+data: \[DONE\]\n\n$/)
      const events = res.text.split("\n\n").filter((e) => e !== "").map((e) => e.slice("data: ".length))
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e))
      expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" })
      expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("Once upon a time")
      expect(chunks.at(-1).choices[0].finish_reason).toBe("stop")
    }).pipe(Effect.timeout("20 seconds")))

  it.scopedLive("the project's OpenAI client reads the project's server: deltas, then Finish", () =>
    Effect.gen(function* () {
      const served = yield* serve({ engine: ScriptedEngine.layer([ScriptedEngine.reply("Once upon a time")]), tools: [] })
      const context = yield* Layer.build(NodeHttpClient.layerUndici)
      const engine = yield* OpenAiEngine.make({ baseUrl: `${served.url}/v1`, model: "scripted", timeout: "5 seconds" }).pipe(
        Effect.provide(context)
      )
      const parts = Chunk.toReadonlyArray(
        yield* Stream.runCollect(engine.stream(new InferenceRequest({ messages: [Message.user("a story")] })))
      )
      expect(textOf(parts)).toBe("Once upon a time")
      const last = parts.at(-1)
      expect(last?._tag).toBe("Finish")
      if (last?._tag === "Finish") expect(last.result.content).toBe("Once upon a time")
    }).pipe(Effect.timeout("20 seconds")))
})
