/**
 * The OpenAI endpoint's protocol on the bundled model, through a real
 * `pagantic serve` on loopback (LlamaEngine, one server for the file): a client
 * tool round trip (the model's calculator call returned as tool_calls, the
 * client's result answered), streamed tool_call deltas, stop, seed
 * reproducibility, n choices, logprobs, and max_tokens 4 as finish_reason length.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { post, serve } from "./support/server.js"

/** The client's own calculator: the bundled model was trained to call one by this name. */
const calculator = {
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluate an arithmetic expression",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] }
  }
}

const ask = (content: string) => [{ role: "user", content }]

const chunksOf = (text: string): ReadonlyArray<any> =>
  text.split("\n").filter((l) => l.startsWith("data: ") && l !== "data: [DONE]").map((l) => JSON.parse(l.slice(6)))

const onModel = <A>(f: (url: string) => Effect.Effect<A>) =>
  Effect.scoped(
    Effect.flatMap(serve({ engine: LlamaEngine.layer({ threads: 1 }) }), (served) => f(`${served.url}/v1/chat/completions`))
  ).pipe(Effect.timeout("100 seconds"), Effect.orDie)

describe("OpenAI protocol on the bundled model", () => {
  it.live("a client tool round trip: the model's call comes back as tool_calls, the client's result is answered", () =>
    onModel((url) =>
      Effect.gen(function* () {
        const messages = ask("What is 12 + 7?")
        const first = yield* post(url, { messages, tools: [calculator], max_tokens: 64, temperature: 0 }, {})
        expect(first.status, first.text.slice(0, 300)).toBe(200)
        const choice = first.json.choices[0]
        expect(choice.finish_reason).toBe("tool_calls")
        expect(first.json.pagantic.toolCallsMade).toEqual([]) // the server's calculator did not run
        const call = choice.message.tool_calls[0]
        expect(call).toMatchObject({ id: expect.any(String), type: "function", function: { name: "calculator" } })
        const args = JSON.parse(call.function.arguments)
        expect(typeof args.expression).toBe("string")

        const second = yield* post(url, {
          messages: [...messages, choice.message, { role: "tool", tool_call_id: call.id, content: "19" }],
          tools: [calculator],
          max_tokens: 64,
          temperature: 0
        })
        expect(second.status, second.text.slice(0, 300)).toBe(200)
        expect(second.json.choices[0].finish_reason).toBe("stop")
        expect(second.json.choices[0].message.content).toContain("19")

        // tool_choice none: nothing is offered, so the same question gets no call (server or client)
        const none = yield* post(url, { messages, tools: [calculator], tool_choice: "none", max_tokens: 32, temperature: 0 })
        expect(none.status, none.text.slice(0, 300)).toBe(200)
        expect(none.json.choices[0].message.tool_calls).toBeUndefined()
        expect(none.json.pagantic.toolCallsMade).toEqual([])
        expect(none.json.choices[0].finish_reason).not.toBe("tool_calls")

        // streamed: the same call as a tool_calls delta
        const streamed = yield* post(url, { messages, tools: [calculator], max_tokens: 64, temperature: 0, stream: true })
        expect(streamed.status).toBe(200)
        const chunks = chunksOf(streamed.text)
        const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
        expect(calls).toHaveLength(1)
        expect(calls[0]).toMatchObject({ index: 0, type: "function", function: { name: "calculator", arguments: call.function.arguments } })
        expect(chunks.at(-1).choices[0].finish_reason).toBe("tool_calls")
      })), 120_000)

  it.live("stop cuts the answer before the stop text; a seed reproduces; n: 2 gives two choices; logprobs spell the answer; max_tokens 4 is length", () =>
    onModel((url) =>
      Effect.gen(function* () {
        const base = { messages: ask("Say hello to the team."), tool_choice: "none", max_tokens: 32 }
        const whole = yield* post(url, { ...base, temperature: 0 })
        expect(whole.status, whole.text.slice(0, 300)).toBe(200)
        const content: string = whole.json.choices[0].message.content
        const words = content.split(/\s+/).filter((w) => w.length > 2)
        expect(words.length).toBeGreaterThan(1)
        const stopWord = words[1]!
        const cut = yield* post(url, { ...base, temperature: 0, stop: [stopWord] })
        expect(cut.status).toBe(200)
        expect(cut.json.choices[0].message.content).toBe(content.slice(0, content.indexOf(stopWord)))
        expect(cut.json.choices[0].finish_reason).toBe("stop")

        const sampled = { ...base, temperature: 1, seed: 1234 }
        const a = yield* post(url, sampled)
        const b = yield* post(url, sampled)
        expect(a.status).toBe(200)
        expect(b.json.choices[0].message.content).toBe(a.json.choices[0].message.content)

        const two = yield* post(url, { ...sampled, n: 2 })
        expect(two.status, two.text.slice(0, 300)).toBe(200)
        expect(two.json.choices.map((c: any) => c.index)).toEqual([0, 1])
        // choice 0 is the request's own seed
        expect(two.json.choices[0].message.content).toBe(a.json.choices[0].message.content)
        expect(two.json.usage.completion_tokens).toBeGreaterThanOrEqual(a.json.usage.completion_tokens)

        const probed = yield* post(url, { ...base, temperature: 0, logprobs: true, top_logprobs: 2 })
        expect(probed.status, probed.text.slice(0, 300)).toBe(200)
        const tokens = probed.json.choices[0].logprobs.content as ReadonlyArray<any>
        expect(tokens.length).toBeGreaterThan(0)
        expect(tokens.map((t) => t.token).join("")).toBe(probed.json.choices[0].message.content)
        for (const t of tokens) {
          expect(t.logprob).toBeLessThanOrEqual(0)
          expect(t.top_logprobs.length).toBeLessThanOrEqual(2)
        }

        const short = yield* post(url, { messages: ask("What is 12 + 7?"), max_tokens: 4, temperature: 0 })
        expect(short.status, short.text.slice(0, 300)).toBe(200)
        expect(short.json.choices[0].finish_reason).toBe("length")
      })), 120_000)
})
