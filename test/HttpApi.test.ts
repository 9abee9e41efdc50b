/**
 * The HTTP contract as HttpApi sees it (adapters/http/Api): each endpoint's
 * refusal is one typed error whose member schemas carry the statuses, encoded as
 * exactly the endpoint's error body; and on a real server the handlers' typed
 * refusals arrive with that status, that body and the request id header.
 */
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as OpenApi from "@effect/platform/OpenApi"
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as Api from "../src/adapters/http/Api.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { SystemError, SystemRequest, SystemResponse } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { chatRequest, post, send, serve } from "./support/server.js"

const failedResponse = new SystemResponse({
  requestId: "r-1",
  content: "partial",
  toolCallsMade: [],
  tokenUsage: TokenUsage.empty,
  error: new SystemError({
    code: "CONFIG_INVALID_REQUEST",
    category: "ConfigurationFailure",
    retryable: false,
    message: "bad",
    details: {}
  })
})

describe("adapters/http/Api: typed refusals", () => {
  it("a RunFailure encodes as its SystemResponse alone; only the member of its status takes it", () => {
    const failure = new Api.RunFailure({ status: 413, response: failedResponse })
    expect(Schema.encodeSync(Api.RunFailure.at(413))(failure)).toEqual(Schema.encodeSync(SystemResponse)(failedResponse))
    expect(Either.isLeft(Schema.encodeEither(Api.RunFailure.at(400))(failure))).toBe(true)
    const decoded = Schema.decodeUnknownSync(Api.RunFailure.at(413))(Schema.encodeSync(SystemResponse)(failedResponse))
    expect(decoded).toBeInstanceOf(Api.RunFailure)
    expect(decoded.status).toBe(413)
  })

  it("a ChatFailure encodes as OpenAI's { error } alone", () => {
    const body = { error: { message: "m", type: "invalid_request_error", code: "CONFIG_INVALID_REQUEST", param: null } }
    const failure = new Api.ChatFailure({ status: 409, body })
    expect(Schema.encodeSync(Api.ChatFailure.at(409))(failure)).toEqual(body)
    expect(Either.isLeft(Schema.encodeEither(Api.ChatFailure.at(415))(failure))).toBe(true)
  })

  it("the contract lists every refusal status of both endpoints (OpenAPI)", () => {
    const spec = OpenApi.fromApi(Api.PaganticApi)
    const statuses = (path: string) => Object.keys(spec.paths[path]?.post?.responses ?? {}).map(Number).sort((a, b) => a - b)
    const expected = [200, ...Api.refusalStatuses].sort((a, b) => a - b)
    // /v1/run also answers 202 with a run (Prefer: respond-async)
    expect(statuses("/v1/run")).toEqual([...expected, 202].sort((a, b) => a - b))
    expect(statuses("/v1/chat/completions")).toEqual(expected)
  })
})

describe("adapters/Http: refusals on the wire", () => {
  it.scopedLive("each refusal has its status, exactly its endpoint's body and the request id header", () =>
    Effect.gen(function* () {
      const served = yield* serve({
        engine: ScriptedEngine.layer([ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model"))], {
          whenExhausted: "repeat-last"
        }),
        tools: []
      })
      const isRunBody = (json: Record<string, unknown>) => {
        // a SystemResponse and nothing of the typed error around it
        expect(Either.isRight(Schema.decodeUnknownEither(SystemResponse)(json))).toBe(true)
        expect(Object.keys(json)).not.toContain("_tag")
        expect(Object.keys(json)).not.toContain("status")
        expect(Object.keys(json)).not.toContain("response")
      }

      // 503 from the facade: the SystemResponse with its error, the id in the header
      const unavailable = yield* post(`${served.url}/v1/run`, chatRequest("hi", { requestId: "r-503" }))
      expect(unavailable.status).toBe(503)
      expect(unavailable.headers.get("content-type")).toMatch(/^application\/json/)
      expect(unavailable.headers.get("x-request-id")).toBe("r-503")
      isRunBody(unavailable.json)
      expect(unavailable.json.error.code).toBe("INFERENCE_MODEL_UNAVAILABLE")

      // a client's id that is no header value (past Latin-1, a lone surrogate, a control
      // character, a percent sign): percent-encoded UTF-8 in the header, unchanged in the body
      for (const [id, header] of [
        ["흙x", "%ED%9D%99x"],
        ["a\udc30", "a%EF%BF%BD"],
        ["r 1\n", "r%201%0A"],
        ["50%", "50%25"]
      ] as const) {
        const odd = yield* post(`${served.url}/v1/run`, chatRequest("hi", { requestId: id }))
        expect(odd.status).toBe(503)
        expect(odd.headers.get("x-request-id")).toBe(header)
        expect(odd.json.requestId).toBe(id)
      }

      // 415 and 400 at the edge of the handler, before any decoding
      const plain = yield* send(`${served.url}/v1/run`, { body: "{}", headers: { "content-type": "text/plain" } })
      expect(plain.status).toBe(415)
      expect(plain.json.error.code).toBe("CONFIG_INVALID_REQUEST")
      expect(plain.headers.get("x-request-id")).toBe(plain.json.requestId)
      isRunBody(plain.json)
      const notJson = yield* send(`${served.url}/v1/run`, { body: "{nope" })
      expect(notJson.status).toBe(400)
      expect(notJson.json.error.message).toMatch(/not valid JSON/)

      // the chat endpoint: OpenAI's body and nothing else
      const chat = yield* post(`${served.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] })
      expect(chat.status).toBe(503)
      expect(Object.keys(chat.json)).toEqual(["error"])
      expect(chat.json.error).toEqual({
        message: "no model",
        type: "server_error",
        code: "INFERENCE_MODEL_UNAVAILABLE",
        param: null,
        pagantic: { requestId: chat.headers.get("x-request-id"), category: "InferenceFailure", retryable: false, details: {} }
      })
      expect(chat.headers.get("x-request-id")).toEqual(expect.any(String))
      const chatPlain = yield* send(`${served.url}/v1/chat/completions`, {
        body: "{}",
        headers: { "content-type": "text/plain" }
      })
      expect(chatPlain.status).toBe(415)
      expect(Object.keys(chatPlain.json)).toEqual(["error"])
    }).pipe(Effect.timeout("20 seconds")))
})

describe("adapters/Http: a client derived from the contract", () => {
  it.scopedLive("HttpApiClient gets the SystemResponse, and a refusal back as the typed RunFailure with its status", () =>
    Effect.gen(function* () {
      const served = yield* serve({
        engine: ScriptedEngine.layer([
          ScriptedEngine.reply("pong"),
          ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model"))
        ]),
        tools: []
      })
      const client = yield* HttpApiClient.make(Api.PaganticApi, { baseUrl: served.url })
      const payload = Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "ping" }] })
      const ok = yield* client.pagantic.run({ payload })
      expect(ok).toBeInstanceOf(SystemResponse)
      expect((ok as SystemResponse).content).toBe("pong")
      const refused = yield* Effect.flip(client.pagantic.run({ payload }))
      expect(refused).toBeInstanceOf(Api.RunFailure)
      if (refused instanceof Api.RunFailure) {
        expect(refused.status).toBe(503)
        expect(refused.response.error?.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      }
    }).pipe(Effect.provide(NodeHttpClient.layerUndici), Effect.timeout("20 seconds")))
})
