/**
 * `pagantic serve` against a hostile client: each finding of the hardening issue
 * (#10) as a regression test against a real server on 127.0.0.1. A canned engine
 * where the model does not matter; the bundled model where native code is the
 * point (a grammar that used to kill the process).
 */
import { describe, expect, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as http from "node:http"
import * as Http from "../src/adapters/Http.js"
import * as Edge from "../src/adapters/http/Edge.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Calculator from "../src/layers/tools/Calculator.js"
import * as Tool from "../src/services/ToolRegistry.js"
import type { Served } from "./support/server.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const withServer = <A>(
  script: ReadonlyArray<ScriptedEngine.Step>,
  f: (server: Served) => Effect.Effect<A>,
  options: { readonly http?: Http.Options; readonly tools?: ReadonlyArray<Tool.Tool<any, any>> } = {}
) =>
  Effect.scoped(
    Effect.flatMap(
      serve({
        engine: ScriptedEngine.layer(script, { whenExhausted: "repeat-last" }),
        ...(options.tools === undefined ? {} : { tools: options.tools }),
        ...(options.http === undefined ? {} : { http: options.http })
      }),
      f
    )
  ).pipe(Effect.timeout("30 seconds"), Effect.orDie)

/** A structured request for "x" with `output`. */
const structured = (output: Record<string, unknown>) => ({
  mode: "structured",
  messages: [{ role: "user", content: "x" }],
  output
})

/** `{"a":{"a":...}}` nested `levels` deep, as JSON text (JSON.stringify would overflow the stack). */
const deep = (levels: number) => `${'{"a":'.repeat(levels)}"x"${"}".repeat(levels)}`

/** A JSON text nested `levels` deep, written without recursion. */
const deepText = (levels: number) => `${"[".repeat(levels)}1${"]".repeat(levels)}`

/** Every error body is JSON with a code and a message, small, and names no server file. */
const expectCleanError = (reply: { status: number; text: string; json: any }, maxBytes = 4_096) => {
  expect(reply.json, reply.text.slice(0, 200)).toBeDefined()
  const error = reply.json.error
  expect(error).toMatchObject({ message: expect.any(String) })
  expect(reply.text.length).toBeLessThanOrEqual(maxBytes)
  expect(reply.text).not.toMatch(/^\s*at\s.*:\d+:\d+\)?\s*$/m)
  expect(reply.text).not.toContain("node_modules")
}

/** POST /v1/run with a chosen Host header (fetch cannot set it). */
const withHost = (port: number, host: string) =>
  Effect.promise(() =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        { host: "127.0.0.1", port, path: "/v1/run", method: "POST", headers: { host, "content-type": "application/json" }, timeout: 5_000 },
        (res) => {
          let body = ""
          res.on("data", (c) => (body += c))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }))
        }
      )
      req.on("error", reject)
      req.end(JSON.stringify(chatRequest("hi")))
    })
  )

describe("hostile input against pagantic serve", () => {
  // -- 1 and 3: no server file through the API -----------------------------------------
  it.live("grammarFile is a server setting: refused without reading, whatever the path", () =>
    withServer([ScriptedEngine.reply('"x"')], ({ url }) =>
      Effect.gen(function* () {
        const answers = []
        for (const grammarFile of ["/etc/passwd", "/dev/zero", "../../../etc/hostname", "/no/such/file", "/etc"]) {
          const res = yield* post(`${url}/v1/run`, structured({ schema: { type: "string" }, grammarFile }))
          expect(res.status).toBe(400)
          expectCleanError(res)
          expect(res.json.error.message).toContain("output.grammarFile")
          expect(res.text).not.toContain("root:")
          answers.push(res.json.error.message)
        }
        // the same answer for paths that exist and paths that do not: no oracle
        expect(new Set(answers).size).toBe(1)
      })
    ))

  // -- 2: a grammar that overflowed llama.cpp's parser ------------------------------------
  it.live("a grammar nested 20,000 deep is a 400 before native code; the server lives", () =>
    withServer([ScriptedEngine.reply('"a"')], ({ url }) =>
      Effect.gen(function* () {
        const grammar = "root ::= " + "(".repeat(20_000) + '"a"' + ")".repeat(20_000)
        const res = yield* post(`${url}/v1/run`, structured({ schema: { type: "string" }, grammar }))
        expect(res.status).toBe(400)
        expectCleanError(res)
        expect(res.json.error.message).toContain("output.grammar")
        expect((yield* send(`${url}/health`)).status).toBe(200)
      })
    ))

  // -- 4: the whitelist in plan mode -------------------------------------------------------
  it.live("the tool whitelist holds in plan mode: a step naming another tool does not run it", () =>
    Effect.gen(function* () {
      const ran = yield* Ref.make(0)
      const secret = Tool.make({
        name: "secret",
        description: "Must not run for this caller",
        parameters: Schema.Struct({}),
        handler: () => Effect.as(Ref.update(ran, (n) => n + 1), "the secret")
      })
      yield* withServer(
        [ScriptedEngine.reply("x")],
        ({ url }) =>
          Effect.gen(function* () {
            const res = yield* post(`${url}/v1/run`, {
              mode: "plan",
              messages: [],
              tools: ["calculator"],
              plan: { steps: [{ name: "s", type: "tool", input: { name: "secret", arguments: {} } }] }
            })
            expect(res.status).toBe(422)
            expect(res.json.error.code).toBe("TOOL_NOT_FOUND")
            expect(res.text).not.toContain("the secret")
            // the whitelisted tool still runs
            const ok = yield* post(`${url}/v1/run`, {
              mode: "plan",
              messages: [],
              tools: ["calculator"],
              plan: { steps: [{ name: "s", type: "tool", input: { name: "calculator", arguments: { expression: "2+3" } } }] }
            })
            expect(ok.status).toBe(200)
            expect(ok.json.content).toBe("5")
          }),
        { tools: [Calculator.calculator, secret] }
      )
      expect(yield* Ref.get(ran)).toBe(0)
    }))

  // -- 5: deep nesting --------------------------------------------------------------------
  it.live("JSON nested thousands deep in any field of either endpoint is a 400 that says so", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const bodies: ReadonlyArray<readonly [string, string]> = [
          ["/v1/run", deepText(5_000)],
          ["/v1/run", `{"mode":"chat","messages":[{"role":"user","content":"x"}],"hints":{"options":${deep(3_000)}}}`],
          ["/v1/run", `{"mode":"structured","messages":[{"role":"user","content":"x"}],"output":{"schema":${deep(4_000)}}}`],
          ["/v1/run", `{"mode":"plan","messages":[],"plan":{"steps":[{"name":"s","type":"tool","input":${deep(5_000)}}]}}`],
          ["/v1/chat/completions", `{"messages":[{"role":"user","content":${deep(5_000)}}]}`],
          ["/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":${deep(3_000)}}}}`]
        ]
        for (const [path, body] of bodies) {
          const res = yield* send(`${url}${path}`, { body })
          expect(res.status, `${path} ${body.slice(0, 60)}`).toBe(400)
          expect(res.headers.get("content-type")).toContain("application/json")
          expectCleanError(res)
          expect(res.json.error.message).toContain("nested too deeply")
        }
      })
    ))

  // -- 6: nothing kept from a failed request -----------------------------------------------
  it.live("a history that does not fit is not stored; a huge tool name stays out of the event log", () =>
    withServer([ScriptedEngine.fail(InferenceFailure.contextExceeded("the prompt does not fit"))], ({ events, sessions, url }) =>
      Effect.gen(function* () {
        const big = "word ".repeat(180_000)
        const res = yield* post(`${url}/v1/run`, {
          mode: "chat",
          messages: [{ role: "user", content: big }, { role: "assistant", content: "ok" }, { role: "user", content: "and?" }]
        })
        expect(res.status).toBe(422)
        expect(res.json.error.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
        expect(yield* sessions).toEqual([])

        const name = "t".repeat(900_000)
        const tool = yield* post(`${url}/v1/run`, chatRequest("hi", { tools: [name] }))
        expect(tool.status).toBe(422)
        expect(tool.json.error.code).toBe("TOOL_NOT_FOUND")
        expect(tool.text.length).toBeLessThan(4_096)
        const logged = JSON.stringify(yield* events)
        expect(logged).not.toContain("t".repeat(1_000))
        expect(logged).not.toContain("word ".repeat(1_000))
      })
    ))

  // -- 7: one client cannot cancel another's request ---------------------------------------
  it.live("a client-chosen request id in use is refused (409); hanging up cancels only the caller's own request", () =>
    withServer([ScriptedEngine.reply("slow answer", { delay: "1500 millis" })], ({ url }) =>
      Effect.gen(function* () {
        const attacker = new AbortController()
        const first = Effect.promise(() =>
          fetch(`${url}/v1/run`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(chatRequest("a", { requestId: "X" })),
            signal: attacker.signal
          }).then(() => "answered", () => "aborted")
        )
        const attackerRun = yield* Effect.fork(first)
        yield* Effect.sleep("200 millis")
        const victim = yield* post(`${url}/v1/run`, chatRequest("b", { requestId: "X" }))
        expect(victim.status).toBe(409)
        expect(victim.json.error.message).toContain("requestId")
        attacker.abort()
        yield* Effect.ignore(attackerRun.await)
        // once the first X is over, the id is free again and its run is not cancelled by the old hang-up
        yield* Effect.sleep("300 millis")
        const later = yield* post(`${url}/v1/run`, chatRequest("c", { requestId: "X" }))
        expect(later.status).toBe(200)
        expect(later.json.content).toBe("slow answer")
      })
    ), 20_000)

  // -- 8: requests that would hold the event loop ------------------------------------------
  it.live("an enum of 60,000 values and a plan of 9,000 steps are refused with the limit named", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const values = Array.from({ length: 60_000 }, (_, i) => `v${i}`)
        const enumRes = yield* post(`${url}/v1/run`, structured({ schema: { type: "string", enum: values } }))
        expect(enumRes.status).toBe(400)
        expect(enumRes.json.error.message).toContain("output.schema")
        expect(enumRes.json.error.message).toMatch(/at most \d+/)
        const steps = Array.from({ length: 9_000 }, (_, i) => ({
          name: `s${i}`,
          type: "tool",
          input: { name: "calculator", arguments: { expression: "1+1" } }
        }))
        const planRes = yield* post(`${url}/v1/run`, { mode: "plan", messages: [], plan: { steps } })
        expect(planRes.status).toBe(400)
        expect(planRes.json.error.message).toContain("plan.steps")
        // configurable: a server that allows fewer says so
        expect(Http.Guard.defaultLimits).toMatchObject({ maxEnumValues: 500, maxPlanSteps: 256, maxDepth: 64 })
      })
    ))

  it.live("limits are configurable per server", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const steps = Array.from({ length: 3 }, (_, i) => ({
          name: `s${i}`,
          type: "tool",
          input: { name: "calculator", arguments: { expression: "1+1" } }
        }))
        const res = yield* post(`${url}/v1/run`, { mode: "plan", messages: [], plan: { steps } })
        expect(res.status).toBe(400)
        expect(res.json.error.message).toContain("at most 2")
      }), { http: { limits: { maxPlanSteps: 2 } } }))

  // -- 9: whose fault is it ---------------------------------------------------------------
  it.live("client mistakes are 4xx: a tool message answering no call, wrong tool arguments, 1/0 in a plan", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const orphan = yield* post(`${url}/v1/run`, {
          mode: "chat",
          messages: [
            { role: "tool", content: "42", toolCallId: "nope", name: "calculator" },
            { role: "user", content: "hi" }
          ]
        })
        expect(orphan.status).toBe(400)
        expect(orphan.json.error.message).toContain("messages.0")
        const orphanChat = yield* post(`${url}/v1/chat/completions`, {
          messages: [{ role: "tool", content: "42", tool_call_id: "nope" }, { role: "user", content: "hi" }]
        })
        expect(orphanChat.status).toBe(400)

        const plan = (args: unknown) => ({
          mode: "plan",
              messages: [],
          plan: { steps: [{ name: "s", type: "tool", input: { name: "calculator", arguments: args } }] }
        })
        const wrongArgs = yield* post(`${url}/v1/run`, plan({ expr: 3 }))
        expect(wrongArgs.status).toBe(422)
        expect(wrongArgs.json.error.code).toBe("TOOL_EXECUTION_FAILED")
        const divide = yield* post(`${url}/v1/run`, plan({ expression: "1/0" }))
        expect(divide.status).toBe(422)
        expect(divide.json.error.message).toContain("division by zero")
        const nested = yield* post(`${url}/v1/run`, plan({ expression: "(".repeat(50_000) }))
        expect(nested.status).toBe(422)
      })
    ))

  it.live("a schema no grammar can be made from (control characters in an enum) is a 400 naming output.schema", () =>
    withServer([ScriptedEngine.reply('"a"')], ({ url }) =>
      Effect.gen(function* () {
        for (const value of ["a\u0001b", "a\u0000"]) {
          const res = yield* post(`${url}/v1/run`, structured({ schema: { type: "string", enum: [value, "c"] } }))
          expect(res.status).toBe(400)
          expect(res.json.error.message).toContain("output.schema")
          expect(res.json.error.message).toMatch(/control character|NUL/)
          expect(res.json.error.message).not.toContain("Expected undefined")
        }
      })
    ))

  it.live("a schema's anyOf: a value of one of the shapes is the answer; an empty anyOf is a 400 naming output.schema", () =>
    withServer([ScriptedEngine.reply('{"kind":"sum","value":3}')], ({ url }) =>
      Effect.gen(function* () {
        const shapes = {
          anyOf: [
            { type: "object", properties: { kind: { type: "string", enum: ["sum"] }, value: { type: "number" } }, required: ["kind", "value"] },
            { type: "object", properties: { kind: { type: "string", enum: ["text"] }, text: { type: "string" } }, required: ["kind", "text"] }
          ]
        }
        const ok = yield* post(`${url}/v1/run`, structured({ schema: shapes }))
        expect(ok.status).toBe(200)
        expect(ok.json.structuredOutput).toEqual({ kind: "sum", value: 3 })
        const empty = yield* post(`${url}/v1/run`, structured({ schema: { anyOf: [] } }))
        expect(empty.status).toBe(400)
        expect(empty.json.error.message).toContain("output.schema")
      })
    ))

  it.live("an answer of neither shape of an anyOf is a constraint failure, not a success", () =>
    withServer([ScriptedEngine.reply('{"kind":"other"}')], ({ url }) =>
      Effect.gen(function* () {
        const res = yield* post(`${url}/v1/run`, structured({
          schema: { anyOf: [{ type: "object", properties: { kind: { type: "string", enum: ["sum"] } }, required: ["kind"] }, { type: "number" }] }
        }))
        expect(res.status).toBe(422)
        expect(res.json.error.code).toMatch(/^CONSTRAINT_|^VALIDATION_/)
      })
    ))

  it.live("a grammar that is not GBNF is the client's mistake (400), not a bad gateway", () =>
    withServer([ScriptedEngine.reply('"a"')], ({ url }) =>
      Effect.gen(function* () {
        for (const grammar of ["", "not a grammar at all", 'root ::= missing', 'root ::= "a\u0000"']) {
          const res = yield* post(`${url}/v1/run`, structured({ schema: { type: "string" }, grammar }))
          expect(res.status, JSON.stringify(grammar)).toBe(400)
          expectCleanError(res)
        }
      })
    ))

  // -- 10: no echo ----------------------------------------------------------------------
  it.live("errors quote a short excerpt: large input is never echoed or multiplied", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const huge = "z".repeat(300_000)
        const cases: ReadonlyArray<unknown> = [
          { mode: huge, messages: [{ role: "user", content: "x" }] },
          chatRequest("x", { tools: [huge] }),
          { mode: "plan", messages: [], plan: { steps: [{ name: "s", type: "infer", input: { messages: huge } }] } },
          { mode: "plan", messages: [], plan: { steps: [{ name: huge, type: "nope", input: "x" }] } },
          { mode: "chat", messages: [{ role: huge, content: "x" }] },
          // a tool call that ran and failed is reported (what the request did), its arguments cut to an excerpt
          { mode: "plan", messages: [], plan: { steps: [{ name: "s0", type: "tool", input: { name: "calculator", arguments: { expression: huge } } }] } },
          { mode: "plan", messages: [], plan: { steps: [{ name: "s0", type: "tool", input: { name: "calculator", arguments: { expression: Array.from({ length: 20_000 }, (_, i) => i % 10) } } }] } }
        ]
        for (const body of cases) {
          const res = yield* post(`${url}/v1/run`, body)
          expect(res.status).toBeGreaterThanOrEqual(400)
          expect(res.status).toBeLessThan(500)
          expectCleanError(res)
          expect(res.text, res.text.slice(0, 300)).not.toContain("z".repeat(300))
        }
        const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: huge, content: "x" }] })
        expect(chat.status).toBe(400)
        expectCleanError(chat)
      })
    ))

  // -- 11: sessions belong to the server that issued them ------------------------------------
  it.live("sessions are issued by the server: unguessable, and a made-up session id is refused", () =>
    withServer([ScriptedEngine.reply("hello")], ({ url }) =>
      Effect.gen(function* () {
        const made = yield* post(`${url}/v1/run`, chatRequest("hi", { sessionId: "s1" }))
        expect(made.status).toBe(404)
        expect(made.json.error.message).toContain("sessionId")
        const a = yield* post(`${url}/v1/run`, chatRequest("hi"))
        const b = yield* post(`${url}/v1/run`, chatRequest("hi"))
        expect(a.json.sessionId).toMatch(/^session_[0-9a-f-]{36}$/)
        expect(b.json.sessionId).not.toBe(a.json.sessionId)
        const continued = yield* post(`${url}/v1/run`, chatRequest("again", { sessionId: a.json.sessionId }))
        expect(continued.status).toBe(200)
        expect(continued.json.sessionId).toBe(a.json.sessionId)
      })
    ))

  // -- 12: keys, hosts, content types, CORS ------------------------------------------------
  it.live("an API key guards every route but /health; a wrong key is 401", () =>
    withServer(
      [ScriptedEngine.reply("hello")],
      ({ url }) =>
        Effect.gen(function* () {
          expect((yield* send(`${url}/health`)).status).toBe(200)
          const none = yield* post(`${url}/v1/run`, chatRequest("hi"))
          expect(none.status).toBe(401)
          expect(none.headers.get("www-authenticate")).toBe("Bearer")
          expectCleanError(none)
          const wrong = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] }, {
            authorization: "Bearer nope"
          })
          expect(wrong.status).toBe(401)
          expect(wrong.json.error.type).toBe("authentication_error")
          const right = yield* post(`${url}/v1/run`, chatRequest("hi"), { authorization: "Bearer s3cret" })
          expect(right.status).toBe(200)
        }),
      { http: { apiKey: Redacted.make("s3cret") } }
    ))

  it.live("a loopback server answers only to loopback names, JSON bodies only, no CORS", () =>
    withServer([ScriptedEngine.reply("hello")], ({ port, url }) =>
      Effect.gen(function* () {
        // fetch cannot set Host: a raw request can
        const rebound = yield* withHost(port, "evil.example:80")
        expect(rebound.status).toBe(403)
        expect(JSON.parse(rebound.body).error.message).toContain("Host")
        // the whole 127.0.0.0/8 block and localhost are loopback names
        expect((yield* withHost(port, "127.0.0.2:8080")).status).toBe(200)
        expect((yield* withHost(port, "localhost")).status).toBe(200)

        const plain = yield* send(`${url}/v1/run`, { body: JSON.stringify(chatRequest("hi")), headers: { "content-type": "text/plain" } })
        expect(plain.status).toBe(415)
        expectCleanError(plain)
        const ok = yield* post(`${url}/v1/run`, chatRequest("hi"), { origin: "https://evil.example" })
        expect(ok.headers.get("access-control-allow-origin")).toBeNull()
        const preflight = yield* send(`${url}/v1/run`, {
          method: "OPTIONS",
          headers: { origin: "https://evil.example", "access-control-request-method": "POST" }
        })
        expect(preflight.status).toBe(405)
        expect(preflight.headers.get("access-control-allow-origin")).toBeNull()
      })
    ))

  it.effect("the environment configures keys, hosts and origins; flags win over it", () =>
    Effect.gen(function* () {
      const provider = ConfigProvider.fromMap(
        new Map([
          ["PAGANTIC_API_KEY", "k"],
          ["PAGANTIC_HOST", "0.0.0.0"],
          ["PAGANTIC_ALLOWED_HOSTS", "pagantic.internal, localhost"],
          ["PAGANTIC_PORT", "9000"]
        ])
      )
      const options = yield* Effect.withConfigProvider(Http.optionsConfig({ port: 1234 }), provider)
      expect(options.host).toBe("0.0.0.0")
      expect(options.port).toBe(1234)
      expect(Redacted.value(options.apiKey!)).toBe("k")
      expect(options.allowedHosts).toEqual(["pagantic.internal", "localhost"])
      expect(Edge.isLoopback("0.0.0.0")).toBe(false)
      expect(Edge.isLoopback("127.0.0.1")).toBe(true)
      expect(Edge.hostsFor("127.0.0.1", undefined)).toContain("localhost")
      expect(Edge.hostsFor("0.0.0.0", undefined)).toBeUndefined()
      const badPort = yield* Effect.either(
        Effect.withConfigProvider(Http.optionsConfig(), ConfigProvider.fromMap(new Map([["PAGANTIC_PORT", "70000"]])))
      )
      expect(badPort._tag).toBe("Left")
    }))

  it.effect("a server beyond loopback without a key warns at start", () =>
    Effect.gen(function* () {
      const lines: Array<string> = []
      const capture = Logger.make(({ message }) => void lines.push(String(message)))
      // build only the warning (a server on 0.0.0.0 is not started in tests)
      yield* Layer.build(Http.warnIfOpen({ host: "0.0.0.0" })).pipe(
        Effect.scoped,
        Effect.provide(Logger.replace(Logger.defaultLogger, capture))
      )
      expect(lines.join("\n")).toContain("WITHOUT a key")
      lines.length = 0
      yield* Layer.build(Http.warnIfOpen({ host: "0.0.0.0", apiKey: Redacted.make("k") })).pipe(
        Effect.scoped,
        Effect.provide(Logger.replace(Logger.defaultLogger, capture))
      )
      expect(lines).toEqual([])
    }))

  // -- 14: the client's own field names, all problems --------------------------------------
  it.live("problems name the fields the client sent, all of them, in plain words", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const chat = yield* post(`${url}/v1/chat/completions`, { messages: [{ role: "user", content: "x" }], max_tokens: -1 })
        expect(chat.status).toBe(400)
        expect(chat.json.error.message).toContain("max_tokens")
        expect(chat.json.error.message).not.toContain("hints")
        const schema = yield* post(`${url}/v1/chat/completions`, {
          messages: [{ role: "user", content: "x" }],
          response_format: { type: "json_schema", json_schema: { schema: { type: "object", properties: 5 } } }
        })
        expect(schema.status).toBe(400)
        expect(schema.json.error.message).toContain("response_format.json_schema.schema")
        expect(schema.json.error.message).not.toContain("output.")
        const run = yield* post(`${url}/v1/run`, { mode: "chat", messages: [{ role: "user", content: 5 }], hints: { topP: 9 } })
        expect(run.status).toBe(400)
        expect(run.json.error.message).toContain("messages.0")
        expect(run.json.error.message).toContain("hints.topP")
        for (const reply of [chat, schema, run]) {
          expect(reply.text).not.toContain("Encoded side")
          expect(reply.text).not.toContain("<->")
        }
      })
    ))

  // -- 15: unknown paths and methods -----------------------------------------------------
  it.live("unknown paths are a JSON 404, wrong methods a JSON 405 with Allow", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const missing = yield* send(`${url}/v2/everything`)
        expect(missing.status).toBe(404)
        expectCleanError(missing)
        const wrong = yield* send(`${url}/v1/run`)
        expect(wrong.status).toBe(405)
        expect(wrong.headers.get("allow")).toBe("POST")
        expectCleanError(wrong)
        // the runs and queries routes too, with their path parameters
        for (const [path, method, allow] of [
          ["/v1/runs", "DELETE", "GET, POST"],
          ["/v1/runs/r-1/cancel", "GET", "POST"],
          ["/v1/runs/r-1/slots/s-1", "GET", "POST"],
          ["/v1/queries", "GET", "POST"]
        ] as const) {
          const other = yield* send(`${url}${path}`, { method, ...(method === "GET" ? {} : { body: "{}" }) })
          expect(other.status, path).toBe(405)
          expect(other.headers.get("allow")).toBe(allow)
          expectCleanError(other)
        }
        const deeper = yield* send(`${url}/v1/runs/r-1/slots`)
        expect(deeper.status).toBe(404)
      })
    ))

  // -- 16: the same rules everywhere ----------------------------------------------------------
  it.live("a quorum above n and out-of-range sampling in a plan step are refused", () =>
    withServer([ScriptedEngine.reply("x")], ({ url }) =>
      Effect.gen(function* () {
        const quorum = yield* post(`${url}/v1/run`, {
          mode: "redundant",
          messages: [{ role: "user", content: "x" }],
          output: { schema: { type: "string" } },
          redundancy: { n: 3, quorum: 5 }
        })
        expect(quorum.status).toBe(400)
        expect(quorum.json.error.message).toContain("redundancy.quorum")
        for (const input of [{ messages: [], temperature: -1 }, { messages: [], temperature: 1e308 }, { messages: [], topP: -5 }]) {
          const res = yield* post(`${url}/v1/run`, { mode: "plan", messages: [], plan: { steps: [{ name: "s", type: "infer", input }] } })
          expect(res.status, JSON.stringify(input)).toBe(400)
        }
      })
    ))

  // -- 17: every 5xx is logged -----------------------------------------------------------
  it.live("a 5xx is logged with its request id", () =>
    Effect.gen(function* () {
      const lines: Array<string> = []
      const capture = Logger.make(({ annotations, message }) =>
        void lines.push(`${String(message)} ${JSON.stringify(Object.fromEntries(annotations))}`)
      )
      yield* withServer([ScriptedEngine.fail(InferenceFailure.engineError("llama crashed"))], ({ url }) =>
        Effect.gen(function* () {
          const res = yield* post(`${url}/v1/run`, chatRequest("hi", { requestId: "r-logged" }))
          expect(res.status).toBe(502)
        })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, capture)))
      expect(lines.some((line) => line.includes("r-logged") && line.includes("INFERENCE_ENGINE_ERROR"))).toBe(true)
    }))
})

describe("hostile input against pagantic serve on the bundled model", () => {
  it.live(
    "grammars that crashed or flooded llama.cpp are refused; the process answers after",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { url } = yield* serve({ engine: LlamaEngine.layer({ threads: 1 }), tools: [] })
          for (const grammar of ["root ::= " + "(".repeat(20_000) + '"a"' + ")".repeat(20_000), "x".repeat(200_000)]) {
            const res = yield* post(`${url}/v1/run`, structured({ schema: { type: "string" }, grammar }))
            expect(res.status).toBe(400)
            expectCleanError(res)
          }
          const health = yield* send(`${url}/health`)
          expect(health.status).toBe(200)
        })
      ).pipe(Effect.timeout("25 seconds"), Effect.orDie),
    30_000
  )
})
