/**
 * A client's mistake is a 4xx naming the field it sent, never a 5xx, and what
 * the answer quotes of it is a short excerpt. Each case here was a 500 or a
 * 502, or echoed the input whole: JSON nested 10,000 deep inside a tool call's
 * `arguments` string, a grammar repetition past llama.cpp's bounds, a grammar
 * the engine refuses after the pre-check, a plan step naming a 900 KB tool.
 * Real server on 127.0.0.1; the engine is scripted, its refusal the llama
 * engine's own failure (`LlamaEngine.test.ts` shows llama.cpp making it).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Response from "../src/layers/llama/Response.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { calculator } from "../src/layers/tools/Calculator.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const KEY = "mistakes-key-0123456789"
const auth = { authorization: `Bearer ${KEY}` }

const withServer = <A>(steps: ReadonlyArray<ScriptedEngine.Step>, f: (url: string) => Effect.Effect<A>) =>
  Effect.scoped(
    Effect.flatMap(
      serve({
        engine: ScriptedEngine.layer(steps, { whenExhausted: "repeat-last" }),
        tools: [calculator],
        http: { apiKey: Redacted.make(KEY) }
      }),
      ({ url }) => f(url)
    )
  ).pipe(Effect.timeout("60 seconds"), Effect.orDie)

const nested = (depth: number) => `${"[".repeat(depth)}1${"]".repeat(depth)}`

/** A chat completion after a calculator call the client made with `args` (its arguments string) and its answer. */
const afterCall = (args: string) => ({
  model: "pagantic-tiny",
  messages: [
    { role: "user", content: "add" },
    { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "calculator", arguments: args } }] },
    { role: "tool", tool_call_id: "c1", content: "2" }
  ]
})

describe("client mistakes are 4xx naming the field", () => {
  it.live("JSON nested 10,000 deep inside a tool call's arguments string: 400 naming the arguments, as deep JSON in the body is", () =>
    withServer([ScriptedEngine.reply("ok")], (url) =>
      Effect.gen(function* () {
        const reply = yield* post(`${url}/v1/chat/completions`, afterCall(`{"x":${nested(10_000)}}`), auth)
        expect(reply.status).toBe(400)
        expect(reply.json.error.param).toBe("messages[1].tool_calls[0].function.arguments")
        expect(reply.json.error.message).toBe("messages[1].tool_calls[0].function.arguments is nested too deeply (more than 64 levels)")
        expect(reply.text.length).toBeLessThan(1_000)
        // within the bounds it is a call like any other
        const fine = yield* post(`${url}/v1/chat/completions`, afterCall(`{"x":${nested(20)}}`), auth)
        expect(fine.status).toBe(200)
      })), 60_000)

  it.live("a grammar repetition past the pre-check's bounds: 400 naming output.grammar, before any engine sees it", () =>
    withServer([ScriptedEngine.reply("a")], (url) =>
      Effect.gen(function* () {
        for (const grammar of ['root ::= "a"{100000}', 'root ::= "a"{0,2001}', `root ::= ${Array.from({ length: 5 }, () => '"a"{2000}').join(" ")}`]) {
          const reply = yield* post(`${url}/v1/run`, {
            mode: "chat",
            messages: [{ role: "user", content: "a" }],
            output: { grammar }
          }, auth)
          expect(reply.status, grammar.slice(0, 40)).toBe(400)
          expect(reply.json.error.code).toBe("CONFIG_INVALID_REQUEST")
          expect(reply.json.error.details.field).toBe("output.grammar")
          expect(reply.json.error.message).toMatch(/repeats (an item|items) more than/)
        }
      })), 60_000)

  it.live("a grammar or schema the engine refuses after the pre-check: 400 naming the field (was 502), on /v1/run and on chat completions", () =>
    withServer([
      ScriptedEngine.fail(Response.grammarRejected({ _tag: "Rejected", source: "gbnf", problem: "llama.cpp cannot parse the grammar although it passes the pre-check", bytes: 23 })),
      ScriptedEngine.fail(Response.grammarRejected({ _tag: "Rejected", source: "schema", problem: "llama.cpp cannot parse the grammar made from the schema", bytes: 40 }))
    ], (url) =>
      Effect.gen(function* () {
        const run = yield* post(`${url}/v1/run`, {
          mode: "chat",
          messages: [{ role: "user", content: "a" }],
          output: { grammar: "root ::= <no-such-token>" }
        }, auth)
        expect(run.status).toBe(400)
        expect(run.json.error).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: false })
        expect(run.json.error.details).toMatchObject({ kind: "grammar", source: "gbnf", field: "output.grammar" })
        const chat = yield* post(`${url}/v1/chat/completions`, {
          model: "pagantic-tiny",
          messages: [{ role: "user", content: "a" }],
          response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string" } } } } }
        }, auth)
        expect(chat.status).toBe(400)
        expect(chat.json.error.type).toBe("invalid_request_error")
        expect(chat.json.error.param).toBe("response_format.json_schema.schema")
      })), 60_000)

  it.live("a plan step naming a 900 KB tool: TOOL_NOT_FOUND that quotes an excerpt of the name, not the name", () =>
    withServer([ScriptedEngine.reply("ok")], (url) =>
      Effect.gen(function* () {
        const name = "t".repeat(900_000)
        const reply = yield* post(`${url}/v1/run`, {
          mode: "plan",
          messages: [],
          plan: { steps: [{ name: "s", type: "tool", input: { name, arguments: {} } }] }
        }, auth)
        expect(reply.status).toBe(422)
        expect(reply.json.error.code).toBe("TOOL_NOT_FOUND")
        expect(reply.text.length).toBeLessThan(4_000)
        expect(reply.json.error.message).toContain("(900,000 chars)")
      })), 60_000)

  it.live("a schema keyword outside the subset ($ref, pattern, minLength, format, oneOf) is 400 naming it on /v1/run, response_format and tools, as on /v1/queries; annotations pass", () =>
    withServer([ScriptedEngine.reply(`{"a":"x"}`)], (url) =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
          [{ type: "object", properties: { a: { type: "string", pattern: "^x$" } } }, "properties.a.pattern"],
          [{ type: "object", properties: { a: { type: "string", minLength: 3 } } }, "properties.a.minLength"],
          [{ type: "object", properties: { a: { $ref: "#/$defs/A" } }, $defs: { A: { type: "string" } } }, "$defs"],
          [{ type: "array", items: { type: "string", format: "uri" } }, "items.format"],
          [{ anyOf: [{ type: "string" }, { type: "object", oneOf: [] }] }, "anyOf.1.oneOf"],
          [{ type: "object", additionalProperties: { type: "string" } }, "additionalProperties"]
        ]
        for (const [schema, at] of cases) {
          const run = yield* post(`${url}/v1/run`, { mode: "structured", messages: [{ role: "user", content: "a" }], output: { schema } }, auth)
          expect(run.status, at).toBe(400)
          expect(run.json.error.details.field).toBe(`output.schema.${at}`)
          expect(run.json.error.message).toContain("is not supported (it would not be enforced)")
          const chat = yield* post(`${url}/v1/chat/completions`, {
            model: "pagantic-tiny",
            messages: [{ role: "user", content: "a" }],
            response_format: { type: "json_schema", json_schema: { name: "x", schema } }
          }, auth)
          expect(chat.status, at).toBe(400)
          expect(chat.json.error.param).toBe(`response_format.json_schema.schema.${at}`.replace(/\.(\d+)(?=\.|$)/g, "[$1]"))
          const tools = yield* post(`${url}/v1/chat/completions`, {
            model: "pagantic-tiny",
            messages: [{ role: "user", content: "a" }],
            tools: [{ type: "function", function: { name: "f", parameters: schema } }]
          }, auth)
          expect(tools.status, at).toBe(400)
          expect(tools.json.error.param).toBe(`tools[0].function.parameters.${at}`.replace(/\.(\d+)(?=\.|$)/g, "[$1]"))
        }
        // what zod and OpenAI's strict mode send: annotations and additionalProperties: false
        const strict = {
          $schema: "https://json-schema.org/draft/2020-12/schema",
          title: "A",
          type: "object",
          properties: { a: { type: "string", description: "the a" } },
          required: ["a"],
          additionalProperties: false
        }
        const fine = yield* post(`${url}/v1/run`, { mode: "structured", messages: [{ role: "user", content: "a" }], output: { schema: strict } }, auth)
        expect(fine.status, fine.text.slice(0, 300)).toBe(200)
        expect(fine.json.structuredOutput).toEqual({ a: "x" })
      })), 60_000)

  it.live("a state-changing request from another site's page is 403 naming Sec-Fetch-Site or Origin, before the key or the route; the server's own page, clients that are not browsers and CORS origins pass", () =>
    Effect.scoped(Effect.gen(function* () {
      // no key at all (as `pagantic serve --no-auth`): only the cross-site check stands between a page and the API
      const { url } = yield* serve({
        engine: ScriptedEngine.layer([ScriptedEngine.reply("ok")], { whenExhausted: "repeat-last" }),
        http: { corsOrigins: ["http://app.example"] }
      })
      const own = new URL(url).host
      const form = { "content-type": "application/x-www-form-urlencoded" }
      const refusals: ReadonlyArray<readonly [string, Record<string, string>, string]> = [
        ["/v1/runs/run-1/cancel", { ...form, origin: "http://evil.example", "sec-fetch-site": "cross-site" }, "Sec-Fetch-Site"],
        ["/v1/runs/run-1/cancel", { ...form, origin: "http://localhost:3000", "sec-fetch-site": "same-site" }, "Sec-Fetch-Site"],
        ["/v1/run", { ...form, origin: "http://evil.example" }, "Origin"],
        ["/v1/run", { "content-type": "text/plain", origin: "null" }, "Origin"],
        ["/v1/chat/completions", { "content-type": "text/plain", origin: `http://${own}.evil.example` }, "Origin"]
      ]
      for (const [path, headers, field] of refusals) {
        const reply = yield* send(`${url}${path}`, { method: "POST", body: "mode=chat", headers })
        expect(reply.status, `${path} ${JSON.stringify(headers)}`).toBe(403)
        expect(reply.json.error.code).toBe("CONFIG_INVALID_REQUEST")
        // an OpenAI route's error names the field as OpenAI's do: `param`
        expect(path === "/v1/chat/completions" ? reply.json.error.param : reply.json.error.details.field).toBe(field)
        expect(reply.json.error.message).toContain("from another site's page is refused")
      }
      const chat = chatRequest("hi")
      // the server's own page (same origin), a client with no browser headers, an allowed CORS origin
      for (const headers of [
        { origin: `http://${own}`, "sec-fetch-site": "same-origin" },
        {},
        { origin: "http://app.example", "sec-fetch-site": "cross-site" }
      ]) {
        const reply = yield* post(`${url}/v1/run`, chat, headers)
        expect(reply.status, JSON.stringify(headers)).toBe(200)
      }
      // reading is not refused: GET changes nothing
      expect((yield* send(`${url}/v1/events`, { headers: { origin: "http://evil.example", "sec-fetch-site": "cross-site" } })).status).toBe(200)
    })).pipe(Effect.timeout("60 seconds")), 60_000)
})
