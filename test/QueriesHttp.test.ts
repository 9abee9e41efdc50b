/**
 * `POST /v1/queries` (issue #16) on a real server on 127.0.0.1: the KNOW (200),
 * the run started (202: async, or a query asking a human), hostile and wrong
 * queries refused as JSON naming the field (CEL with its position), the guard's
 * bounds, and the server's time limit cancelling the run.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as OpenApi from "@effect/platform/OpenApi"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Api from "../src/adapters/http/Api.js"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"
import { post, send } from "./support/server.js"

const responders: ReadonlyArray<Responder> = [
  {
    id: "keywords",
    kind: "pattern",
    capabilities: { classification: (r) => ({ category: r.input.includes("grant") ? "research" : "news", _confidence: 0.8 }) }
  },
  { id: "slow", kind: "system", name: "slow", capabilities: ["slow"], handle: () => Effect.never },
  { id: "alice", kind: "actor", did: "did:example:alice" }
]

const query = (fields: Record<string, unknown> = {}) => ({
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "pattern", capability: "classification" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
  ...fields
})

/** A server whose queries are durable runs on the in-memory Runs layer. */
const withServer = <A, E>(f: (url: string, runs: Runs.Service) => Effect.Effect<A, E>, options: Http.Options = {}) =>
  Effect.scoped(
    Effect.gen(function* () {
      const queries = Orchestration.definition({})
      const services = InMemoryRuns.layer({ definitions: [queries] }).pipe(
        Layer.provideMerge(
          Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders }), LexicalReranker.layer(), ScriptedEngine.layer([]))
        )
      )
      const context = yield* Layer.build(
        Http.layer({ port: 0, ...options }).pipe(
          Layer.provideMerge(Facade.layer({ queries: { definition: queries } })),
          Layer.provideMerge(services)
        )
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
      return yield* f(`http://127.0.0.1:${address.port}`, Context.get(context, Runs.Runs))
    })
  ).pipe(Effect.timeout("30 seconds"))

describe("POST /v1/queries", () => {
  it.live("200: the KNOW (answer, confidence, pattern, calls) and the run id", () =>
    withServer((url, runs) =>
      Effect.gen(function* () {
        const reply = yield* post(`${url}/v1/queries`, { ...query(), requestId: "q-1" })
        expect(reply.status).toBe(200)
        expect(reply.headers.get("x-request-id")).toBe("q-1")
        expect(reply.json).toMatchObject({
          requestId: "q-1",
          content: "research",
          confidence: 1,
          confidenceSource: "fold",
          query: { status: "completed", pattern: "single_shot", calls: 1, know: { kind: "KNOW", body: { category: "research" } } }
        })
        const info = yield* runs.poll(reply.json.query.runId)
        expect(info.status).toBe("completed")
      })
    ))

  it.live("202 with the run id: asked async, or the query asks a human", () =>
    withServer((url, runs) =>
      Effect.gen(function* () {
        const asked = yield* post(`${url}/v1/queries`, { ...query(), async: true })
        expect(asked.status).toBe(202)
        expect(asked.headers.get("x-request-id")).toBe(asked.json.requestId)
        expect(asked.json.query.know).toBeUndefined()
        expect((yield* runs.await(asked.json.query.runId)).status).toBe("completed")

        const human = yield* post(`${url}/v1/queries`, query({ responders: [{ kind: "actor", did: "did:example:alice" }] }))
        expect(human.status).toBe(202)
        expect(["running", "suspended"]).toContain(human.json.query.status)
        expect((yield* runs.await(human.json.query.runId, { untilSuspended: true })).status).toBe("suspended")
      })
    ))

  it.live("a wrong query is 400 JSON naming each field; a CEL error names the field and the position", () =>
    withServer((url) =>
      Effect.gen(function* () {
        const wrong = yield* post(`${url}/v1/queries`, query({ top_k: 0, colour: "blue" }))
        expect(wrong.status).toBe(400)
        expect(wrong.json.error.code).toBe("CONFIG_INVALID_REQUEST")
        expect(wrong.json.error.message).toContain("top_k")
        expect(wrong.json.error.message).toContain("colour")

        const cel = yield* post(`${url}/v1/queries`, query({
          responders: [{ kind: "pattern", capability: "classification", expression: "responder.metadata.team = 'risk'" }]
        }))
        expect(cel.status).toBe(400)
        expect(cel.json.error.message).toContain("responders.0.expression")
        expect(JSON.stringify(cel.json.error.details)).toMatch(/"position":\d+/)

        const asyncWrong = yield* post(`${url}/v1/queries`, { ...query(), async: "yes" })
        expect(asyncWrong.status).toBe(400)
        expect(asyncWrong.json.error.message).toContain("async")

        const notJson = yield* send(`${url}/v1/queries`, { body: "{ nope" })
        expect(notJson.status).toBe(400)
        expect(notJson.json.error.code).toBe("CONFIG_INVALID_REQUEST")

        const array = yield* post(`${url}/v1/queries`, [query()])
        expect(array.status).toBe(400)
        expect(array.json.error.message).toContain("infer.query.v1")
      })
    ))

  it.live("a value of the wrong type where text is expected (input.inline, a CEL expression) is 400 naming the field", () =>
    withServer((url) =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
          [{ input: { inline: 42 } }, "input.inline"],
          [{ input: { inline: null } }, "input.inline"],
          [{ responders: [{ kind: "pattern", capability: "classification", expression: null }] }, "responders.0.expression"],
          [{ fold: { function: "expression", expression: null } }, "fold.expression"]
        ]
        for (const [fields, field] of cases) {
          const reply = yield* post(`${url}/v1/queries`, query(fields))
          expect(reply.status, reply.text.slice(0, 300)).toBe(400)
          expect(reply.json.error.code).toBe("CONFIG_INVALID_REQUEST")
          expect(reply.json.error.message).toContain(`${field}: expected string`)
        }
      })
    ))

  it.live("hostile input: nesting, a huge enum in the answer schema, a huge inline input; never a 5xx", () =>
    withServer((url) =>
      Effect.gen(function* () {
        let deep: unknown = "x"
        for (let i = 0; i < 500; i++) deep = { a: deep }
        const nested = yield* post(`${url}/v1/queries`, query({ input: { inline: "x" }, extra: deep }))
        expect(nested.status).toBe(400)

        const enumSchema = { type: "string", enum: Array.from({ length: 5_000 }, (_, i) => `v${i}`) }
        const huge = yield* post(`${url}/v1/queries`, query({ answer_shape: { kind: "core.json.v1", schema: enumSchema } }))
        expect(huge.status).toBe(400)
        expect(huge.json.error.message).toContain("answer_shape.schema")

        const long = yield* post(`${url}/v1/queries`, query({ input: { inline: "x".repeat(300_000) } }))
        expect(long.status).toBe(400)
        expect(long.json.error.message).toContain("input.inline")
        // the message quotes a short excerpt at most
        expect(long.text.length).toBeLessThan(5_000)
      })
    ))

  it.live("the server's time limit: 504 CANCELLED_TIMEOUT and the run cancelled", () =>
    withServer(
      (url, runs) =>
        Effect.gen(function* () {
          const reply = yield* post(`${url}/v1/queries`, query({ responders: [{ kind: "system", capability: "slow" }] }))
          expect(reply.status).toBe(504)
          expect(reply.json.error.code).toBe("CANCELLED_TIMEOUT")
          const [run] = yield* runs.list()
          expect(run?.status).toBe("cancelled")
        }),
      { requestTimeout: "300 millis" }
    ))

  it.live("past maxRunsInFlight a query is 429 with Retry-After naming what is full (a wrong one still 400); a run that ends frees its place", () =>
    withServer(
      (url, runs) =>
        Effect.gen(function* () {
          const slow = query({ responders: [{ kind: "system", capability: "slow" }] })
          const first = yield* post(`${url}/v1/queries`, { ...slow, async: true })
          expect(first.status).toBe(202)
          const full = yield* post(`${url}/v1/queries`, { ...query(), async: true, requestId: "q-full" })
          expect(full.status).toBe(429)
          expect(Number(full.headers.get("retry-after"))).toBeGreaterThan(0)
          expect(full.json).toMatchObject({
            requestId: "q-full",
            error: { code: "ORCHESTRATION_CAPACITY_EXCEEDED", retryable: true, details: { limit: "maxRunsInFlight", max: 1 } }
          })
          // a query that waits for its answer is a durable run in flight too
          expect((yield* post(`${url}/v1/queries`, query())).status).toBe(429)
          expect((yield* post(`${url}/v1/queries`, query({ top_k: 0 }))).status).toBe(400)
          expect(yield* runs.list()).toHaveLength(1)

          yield* runs.cancel(first.json.query.runId)
          for (;;) {
            const again = yield* post(`${url}/v1/queries`, query())
            if (again.status === 200) break
            expect(again.status).toBe(429)
            yield* Effect.sleep("20 millis")
          }
          // a query that ended in the request left its place: the next one is admitted at once
          expect((yield* post(`${url}/v1/queries`, query())).status).toBe(200)
        }),
      { maxRunsInFlight: 1 }
    ))

  it.live("the served model answers queries by default (Live.layer): an llm responder named model, ~model", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const engine = ScriptedEngine.layer([ScriptedEngine.reply(JSON.stringify({ category: "news", _confidence: 0.7 }))])
        const context = yield* Layer.build(Http.layer({ port: 0 }).pipe(Layer.provideMerge(Live.layer({ engine }))))
        const address = Context.get(context, HttpServer.HttpServer).address
        if (address._tag !== "TcpAddress") throw new Error("expected a TCP address")
        const reply = yield* post(`http://127.0.0.1:${address.port}/v1/queries`, query({ responders: [{ kind: "llm", model: "~model" }] }))
        expect(reply.status).toBe(200)
        expect(reply.json).toMatchObject({ content: "news", query: { status: "completed", calls: 1 } })
        // no durable runs here: the query ran in memory
        expect(reply.json.query.runId).toBeUndefined()
      })
    ).pipe(Effect.timeout("30 seconds")))

  it("the contract lists 200, 202 and every refusal status (OpenAPI)", () => {
    const spec = OpenApi.fromApi(Api.PaganticApi)
    const statuses = Object.keys(spec.paths["/v1/queries"]?.post?.responses ?? {}).map(Number).sort((a, b) => a - b)
    expect(statuses).toEqual([200, 202, ...Api.refusalStatuses].sort((a, b) => a - b))
  })
})
