/**
 * `POST /v1/runs`: a run of a definition the server offers (`Http.Options.definitions`),
 * started by name, its input checked by the definition's payload Schema, the run the
 * caller's (another client's list and show do not see it), counted among the runs in
 * flight. A real server on 127.0.0.1 with a key ring, runs in memory.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { post, send, serve } from "./support/server.js"

/** Held until the test lets go, so that a run stays in flight. */
const gate = Effect.runSync(Deferred.make<void>())

const Restock = Runs.define({
  name: "restock",
  payload: Schema.Struct({ sku: Schema.String, units: Schema.Int.pipe(Schema.between(1, 100)) }),
  success: Schema.Struct({ ordered: Schema.Number }),
  program: ({ sku, units }) =>
    Effect.flatMap(Durable, (durable) => durable.step("order", Schema.Number, Effect.succeed(units))).pipe(
      Effect.zipLeft(sku === "held" ? Deferred.await(gate) : Effect.void),
      Effect.map((ordered) => ({ ordered }))
    )
})

/** Registered with the runs but not offered: no client may start it by name. */
const Internal = Runs.define({
  name: "internal",
  payload: Schema.Unknown,
  success: Schema.Unknown,
  program: (payload) => Effect.succeed(payload)
})

const keys = [
  { name: "carol", role: "client" as const, key: Redacted.make("k-carol") },
  { name: "bob", role: "client" as const, key: Redacted.make("k-bob") }
]
const as = (key: string) => ({ authorization: `Bearer ${key}` })

const withServer = <A, E>(f: (url: string) => Effect.Effect<A, E>, maxRunsPerPrincipal = 16) =>
  Effect.scoped(Effect.flatMap(
    serve({
      engine: ScriptedEngine.layer([]),
      tools: [],
      runs: InMemoryRuns.layer({ definitions: [Restock, Internal] }),
      http: { keys, definitions: [Restock], maxRunsPerPrincipal }
    }),
    (served) => f(served.url)
  )).pipe(Effect.timeout("30 seconds"))

const ended = (url: string, id: string, key: string) =>
  send(`${url}/v1/runs/${id}`, { headers: as(key) }).pipe(
    Effect.filterOrFail((reply) => reply.json?.status === "completed", () => "not completed yet"),
    Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 }),
    Effect.orDie
  )

describe("POST /v1/runs", () => {
  it.live("starts an offered definition by name: 202 with the run, which ends with its result and is the caller's alone", () =>
    withServer((url) =>
      Effect.gen(function* () {
        const started = yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "A-1", units: 12 } }, as("k-carol"))
        expect(started.status, started.text).toBe(202)
        expect(started.json).toMatchObject({ definition: "restock" })
        const id: string = started.json.id
        const done = yield* ended(url, id, "k-carol")
        expect(done.json).toMatchObject({ id, status: "completed", result: { ordered: 12 } })
        expect((yield* send(`${url}/v1/runs/${id}`, { headers: as("k-bob") })).status).toBe(404)
        expect((yield* send(`${url}/v1/runs`, { headers: as("k-bob") })).json.runs).toEqual([])
        expect((yield* send(`${url}/v1/runs`, { headers: as("k-carol") })).json.runs.map((r: { id: string }) => r.id)).toEqual([id])
      })))

  it.live("a definition not offered (unknown, or registered but not offered) is 404 naming definition; a bad input is 400 naming its fields", () =>
    withServer((url) =>
      Effect.gen(function* () {
        for (const name of ["nope", "internal"]) {
          const refused = yield* post(`${url}/v1/runs`, { definition: name, input: {} }, as("k-carol"))
          expect(refused.status).toBe(404)
          expect(refused.json.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { field: "definition" } })
          expect(refused.json.error.message).toContain(`offered: "restock"`)
        }
        const bad = yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: 7, units: 1000 } }, as("k-carol"))
        expect(bad.status).toBe(400)
        expect(bad.json.error.details.fields).toEqual(["input.sku", "input.units"])
        expect(bad.json.error.message).toMatch(/^input\.sku: .*; input\.units: /)
        const shapeless = yield* post(`${url}/v1/runs`, ["restock"], as("k-carol"))
        expect(shapeless.status).toBe(400)
        expect(shapeless.json.error.details.field).toBe("the body")
        expect((yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "A-1", units: 1 } })).status).toBe(401)
        expect((yield* send(`${url}/v1/runs`, { method: "PUT", headers: as("k-carol") })).headers.get("allow")).toBe("GET, POST")
        expect((yield* send(`${url}/v1/runs`, { headers: as("k-carol") })).json.runs).toEqual([])
      })))

  it.live("a principal past its runs in flight is 429 and nothing starts; the place comes back when the run ends", () =>
    withServer((url) =>
      Effect.gen(function* () {
        const held = yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "held", units: 1 } }, as("k-carol"))
        expect(held.status).toBe(202)
        const full = yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "A-1", units: 1 } }, as("k-carol"))
        expect(full.status).toBe(429)
        expect(full.json.error.code).toBe("ORCHESTRATION_CAPACITY_EXCEEDED")
        expect((yield* send(`${url}/v1/runs`, { headers: as("k-carol") })).json.runs).toHaveLength(1)
        // another principal has places of its own
        expect((yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "B-2", units: 1 } }, as("k-bob"))).status).toBe(202)
        yield* Deferred.succeed(gate, undefined)
        yield* ended(url, held.json.id, "k-carol")
        const again = yield* post(`${url}/v1/runs`, { definition: "restock", input: { sku: "A-1", units: 1 } }, as("k-carol")).pipe(
          Effect.filterOrFail((reply) => reply.status === 202, () => "no place yet"),
          Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 50 }),
          Effect.orDie
        )
        expect(again.status).toBe(202)
      }), 1))
})
