/**
 * Facade mode query (issue #16): a query checked at INIT (field-named errors, CEL
 * positions, humans refused without durable runs), run in memory or as a durable
 * run (the run id in the response, detached or waited for, a failed run's
 * failure naming it), answered with the KNOW.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SystemRequest } from "../src/domain/System.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as Facade from "../src/programs/Facade.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import * as Runs from "../src/services/Runs.js"

const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.timeout("30 seconds"))

const responders: ReadonlyArray<Responder> = [
  {
    id: "keywords",
    kind: "pattern",
    capabilities: { classification: (r) => ({ category: r.input.includes("grant") ? "research" : "news", _confidence: 0.8 }) }
  },
  { id: "always-news", kind: "pattern", capabilities: { classification: () => ({ category: "news", _confidence: 0.3 }) } },
  { id: "broken", kind: "pattern", capabilities: { broken: () => ({ nope: true }) } },
  { id: "alice", kind: "actor", did: "did:example:alice" }
]

const query = (fields: Record<string, unknown> = {}) => ({
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "pattern", capability: "classification" }],
  fold: { function: "best_of" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
  ...fields
})

const request = (q: unknown, extra: Record<string, unknown> = {}) => ({ mode: "query", messages: [], query: q, ...extra })

const base = Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders }), LexicalReranker.layer())

/** A facade without durable runs. */
const inMemory = Effect.provide(Facade.make(), base)

/** A facade whose queries are runs of `queries` on the in-memory Runs layer (which it exposes). */
const durable = () => {
  const queries = Orchestration.definition({})
  const layer = InMemoryRuns.layer({ definitions: [queries] }).pipe(Layer.provideMerge(base))
  return { queries, layer }
}

describe("mode query, in memory", () => {
  it.effect("answers with the KNOW: the answer, its confidence, the pattern and the calls; no run id", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* inMemory
      const response = yield* facade.runUnknown(request(query()))
      expect(response.error).toBeUndefined()
      expect(response.content).toBe("research")
      expect(response.structuredOutput).toMatchObject({ category: "research" })
      expect(response.confidence).toBe(0.8)
      expect(response.confidenceSource).toBe("fold")
      expect(response.stopReason).toBe("accepted")
      expect(response.query).toMatchObject({ status: "completed", pattern: "single_shot", calls: 2 })
      expect(response.query?.runId).toBeUndefined()
      expect(response.query?.know?.body).toMatchObject({ kind: "core.classification.v1", category: "research" })
    })))

  it.effect("a lifecycle: INIT -> PREPARE -> EXECUTE -> VALIDATE -> COMPLETE", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* inMemory
      const execution = yield* facade.execute(Schema.decodeUnknownSync(SystemRequest)(request(query())))
      expect(execution.transitions.map((t) => t.to)).toEqual(["PREPARE", "EXECUTE", "VALIDATE", "COMPLETE"])
    })))

  it.effect("a bad query is CONFIG_INVALID_REQUEST naming its fields; a CEL error names the field and the position", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* inMemory
      const wrong = yield* facade.runUnknown(request(query({ top_k: 0, answer_shape: { kind: "core.nope.v1" } })))
      expect(wrong.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(wrong.error?.message).toContain("top_k")
      expect(wrong.error?.message).toContain("answer_shape")
      const cel = yield* facade.runUnknown(request(query({ responders: [{ kind: "pattern", capability: "classification", expression: "responder.id ==" }] })))
      expect(cel.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(cel.error?.message).toContain("responders.0.expression")
      expect(JSON.stringify(cel.error?.details)).toContain("position")
      const missing = yield* facade.runUnknown(request(undefined))
      expect(missing.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(missing.error?.message).toContain("query")
    })))

  it.effect("a human responder without durable runs is refused at INIT, naming its field", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* inMemory
      const response = yield* facade.runUnknown(request(query({
        responders: undefined,
        orchestration: {
          pattern: "escalate",
          tiers: [{ responders: [{ kind: "pattern", capability: "classification" }] }, { responders: [{ kind: "actor", did: "did:example:alice" }] }],
          escalation_expression: "fold.answer.confidence < 0.7"
        }
      })))
      expect(response.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(response.error?.message).toContain("orchestration.tiers.1.responders.0")
      expect(response.error?.message).toContain("durable runs")
    })))

  it.effect("no responder registry: CONFIG_NO_ENGINE", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* Effect.provide(Facade.make(), Constraint.layer)
      const response = yield* facade.runUnknown(request(query()))
      expect(response.error?.code).toBe("CONFIG_NO_ENGINE")
      expect(response.error?.message).toContain("ResponderRegistry")
    })))

  it.effect("no valid answer: ORCHESTRATION_NO_CONSENSUS saying what was missing", () =>
    bounded(Effect.gen(function* () {
      const facade = yield* inMemory
      const response = yield* facade.runUnknown(request(query({ responders: [{ kind: "pattern", capability: "broken" }] })))
      expect(response.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(response.error?.message).toContain("only 0 of 1 responders gave a valid answer")
    })))
})

describe("mode query, durable", () => {
  it.live("the query is a run: the response carries its id and the KNOW; the thread is readable through Runs", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = durable()
      yield* Effect.gen(function* () {
        const facade = yield* Facade.make({ queries: { definition: queries } })
        const response = yield* facade.runUnknown(request(query()))
        expect(response.error).toBeUndefined()
        const runId = response.query?.runId
        expect(runId).toBeDefined()
        expect(response.query).toMatchObject({ status: "completed", pattern: "single_shot", calls: 2 })
        const runs = yield* Runs.Runs
        expect((yield* runs.poll(runId!)).status).toBe("completed")
        const thread = yield* Orchestration.thread(runs, runId!)
        expect(thread.map((r) => r.kind)).toEqual(["INTEND", "CALL", "CALL", "DO", "DO", "KNOW"])
        expect(thread.at(-1)).toEqual(response.query?.know)
      }).pipe(Effect.provide(layer))
    })))

  it.live("detached: answers with the run id at once; the run completes on its own", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = durable()
      yield* Effect.gen(function* () {
        const facade = yield* Facade.make({ queries: { definition: queries } })
        const response = yield* facade.runUnknown(request(query()), { detach: true })
        expect(response.error).toBeUndefined()
        expect(response.query?.status === "running" || response.query?.status === "suspended").toBe(true)
        expect(response.query?.know).toBeUndefined()
        const runs = yield* Runs.Runs
        const info = yield* runs.await(response.query!.runId!)
        expect(info.status).toBe("completed")
      }).pipe(Effect.provide(layer))
    })))

  it.live("a query asking a human answers at once with the run id: the run waits for the human", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = durable()
      yield* Effect.gen(function* () {
        const facade = yield* Facade.make({ queries: { definition: queries } })
        const response = yield* facade.runUnknown(request(query({ responders: [{ kind: "actor", did: "did:example:alice" }] })))
        expect(response.error).toBeUndefined()
        const runs = yield* Runs.Runs
        const info = yield* runs.await(response.query!.runId!, { untilSuspended: true })
        expect(info.status).toBe("suspended")
        yield* runs.cancel(info.id)
      }).pipe(Effect.provide(layer))
    })))

  it.live("a run that fails answers with its failure, the run id in its details", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = durable()
      yield* Effect.gen(function* () {
        const facade = yield* Facade.make({ queries: { definition: queries } })
        const response = yield* facade.runUnknown(request(query({ responders: [{ kind: "pattern", capability: "broken" }] })))
        expect(response.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
        const runId = response.error?.details.runId as string
        expect(typeof runId).toBe("string")
        const runs = yield* Runs.Runs
        expect((yield* runs.poll(runId)).status).toBe("failed")
      }).pipe(Effect.provide(layer))
    })))

  it.live("a request whose timeout passes cancels its run", () =>
    bounded(Effect.gen(function* () {
      const queries = Orchestration.definition({})
      const slow: Responder = { id: "slow", kind: "system", name: "slow", capabilities: ["classification"], handle: () => Effect.never }
      const layer = InMemoryRuns.layer({ definitions: [queries] }).pipe(
        Layer.provideMerge(Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders: [slow] }), LexicalReranker.layer()))
      )
      yield* Effect.gen(function* () {
        const facade = yield* Facade.make({ queries: { definition: queries } })
        const response = yield* facade.runUnknown(
          request(query({ responders: [{ kind: "system", capability: "classification" }] }), { hints: { timeout: 300 } })
        )
        expect(response.error?.code).toBe("CANCELLED_TIMEOUT")
        const runs = yield* Runs.Runs
        const [run] = yield* runs.list()
        expect(run?.status).toBe("cancelled")
      }).pipe(Effect.provide(layer))
    })))
})
