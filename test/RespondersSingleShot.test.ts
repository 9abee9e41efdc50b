import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Check from "../src/programs/query/Check.js"
import * as SingleShot from "../src/programs/query/SingleShot.js"
import type { Responder } from "../src/services/ResponderRegistry.js"

// single_shot over the in-memory pieces: select, one call per candidate in parallel, await, fold.

const aliases = { fast: "fast-model", slow: "slow-model" }

const setup = (script: { readonly fast: ReadonlyArray<ScriptedEngine.Step>; readonly slow: ReadonlyArray<ScriptedEngine.Step> }, extra: ReadonlyArray<Responder> = []) =>
  Effect.gen(function* () {
    const fast = yield* ScriptedEngine.make(script.fast)
    const slow = yield* ScriptedEngine.make(script.slow)
    const responders: ReadonlyArray<Responder> = [
      { id: "keywords", kind: "pattern", capabilities: { classification: (r) => ({ category: r.input.includes("grant") ? "research" : "news" }) } },
      { id: "fast", kind: "llm", model: "fast-model", engine: fast.engine },
      { id: "slow", kind: "llm", model: "slow-model", engine: slow.engine },
      { id: "index", kind: "system", name: "index", handle: () => Effect.fail(InferenceFailure.engineError("index is down")) },
      { id: "alice", kind: "actor", did: "did:example:alice", availability: { typicalResponseDelaySecs: 1 } },
      ...extra
    ]
    return { fast: fast.control, slow: slow.control, layer: Layer.mergeAll(InMemoryResponders.layer({ responders, aliases }), LexicalReranker.layer()) }
  })

const query = (extra: Record<string, unknown> = {}) => {
  const checked = Check.check(
    {
      kind: "infer.query.v1",
      input: { inline: "a grant proposal on protein folding" },
      responders: [
        { kind: "pattern", capability: "classification" },
        { kind: "llm", model: "~fast" },
        { kind: "llm", model: "~slow" },
        { kind: "system", name: "index" }
      ],
      answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
      top_k: 4,
      ...extra
    },
    { aliases }
  )
  if (Either.isLeft(checked)) throw new Error(checked.left.message)
  return checked.right
}

describe("single_shot in memory", () => {
  it.effect("one call per candidate, failures are slots, the fold runs over the rest", () =>
    Effect.gen(function* () {
      const { fast, layer, slow } = yield* setup({
        fast: [ScriptedEngine.reply('{"category":"research","_confidence":0.9}')],
        slow: [ScriptedEngine.reply("not json at all")]
      })
      const result = yield* SingleShot.run(query({ dial: 0.5 })).pipe(Effect.provide(layer))
      expect(result.fold.answer).toEqual({ category: "research" })
      expect(result.fold.confidence).toBe(1)
      expect(result.fold.valid).toBe(2)
      const byResponder = Object.fromEntries(result.responses.map((r) => [r.responder, r.outcome._tag === "Failed" ? r.outcome.problem : "answered"]))
      expect(byResponder.keywords).toBe("answered")
      expect(byResponder.fast).toBe("answered")
      expect(byResponder.slow).toContain("CONSTRAINT_JSON_INVALID")
      expect(byResponder.index).toBe("INFERENCE_ENGINE_ERROR: index is down")
      const sent = yield* fast.requests
      expect(sent.length).toBe(1)
      expect(sent[0]!.temperature).toBe(0.5)
      expect(sent[0]!.schema?.properties?.category?.enum).toEqual(["research", "news"])
      expect((yield* slow.requests).length).toBe(1)
      expect(result.usage.promptTokens).toBe(20)
    }))

  it.effect("a responder past its deadline is a failed slot (TestClock)", () =>
    Effect.gen(function* () {
      const { layer } = yield* setup({
        fast: [ScriptedEngine.reply('{"category":"news"}', { delay: "10 seconds" })],
        slow: [ScriptedEngine.reply('{"category":"research"}', { delay: "200 seconds" })]
      })
      const fiber = yield* Effect.fork(SingleShot.run(query({ max_latency_secs: 100 })).pipe(Effect.provide(layer)))
      yield* TestClock.adjust("100 seconds")
      const result = yield* Fiber.join(fiber)
      const slow = result.responses.find((r) => r.responder === "slow")!
      expect(slow.outcome).toEqual({ _tag: "Failed", problem: "no answer within 100 s" })
      // keywords says research, fast says news: a tie goes to the earliest candidate
      expect(result.fold.support.length).toBe(1)
    }), { timeout: 10_000 })

  it.live("a responder past its deadline is a failed slot (the live clock: one started fiber and a timer per candidate)", () =>
    Effect.gen(function* () {
      const fast = yield* ScriptedEngine.make([ScriptedEngine.reply('{"category":"news"}')])
      const slow = yield* ScriptedEngine.make([ScriptedEngine.reply('{"category":"research"}', { delay: "30 seconds" })])
      // responders that say they answer within 0.1 s, so that a 1-second query keeps them
      const quick = { typicalResponseDelaySecs: 0.1 }
      const layer = Layer.mergeAll(
        InMemoryResponders.layer({
          responders: [
            { id: "fast", kind: "llm", model: "fast-model", engine: fast.engine, availability: quick },
            { id: "slow", kind: "llm", model: "slow-model", engine: slow.engine, availability: quick }
          ],
          aliases
        }),
        LexicalReranker.layer()
      )
      const started = Date.now()
      const result = yield* SingleShot.run(query({
        max_latency_secs: 1,
        responders: [{ kind: "llm", model: "~fast" }, { kind: "llm", model: "~slow" }],
        top_k: 2
      })).pipe(Effect.provide(layer))
      const elapsed = Date.now() - started
      const late = result.responses.find((r) => r.responder === "slow")!
      expect(late.outcome).toEqual({ _tag: "Failed", problem: "no answer within 1 s" })
      expect(result.responses.find((r) => r.responder === "fast")!.outcome._tag).toBe("Answered")
      expect(result.fold.support.length).toBe(1)
      // the deadline, not the slow reply: the run ends about a second in
      expect(elapsed).toBeGreaterThanOrEqual(900)
      expect(elapsed).toBeLessThan(10_000)
    }), { timeout: 20_000 })

  it.effect("awaiting quorum: fold once min_quorum valid answers are in, the rest interrupted", () =>
    Effect.gen(function* () {
      const { layer } = yield* setup({
        fast: [ScriptedEngine.reply('{"category":"research"}', { delay: "1 second" })],
        slow: [ScriptedEngine.reply('{"category":"news"}', { delay: "60 seconds" })]
      })
      const fiber = yield* Effect.fork(SingleShot.run(query({ min_quorum: 2 }), { awaiting: "quorum" }).pipe(Effect.provide(layer)))
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(fiber)
      expect(result.fold.answer).toEqual({ category: "research" })
      expect(result.fold.support.length).toBe(2)
      const slow = result.responses.find((r) => r.responder === "slow")!
      expect(slow.outcome).toEqual({ _tag: "Failed", problem: "interrupted: the quorum was met before it answered" })
    }), { timeout: 10_000 })

  it.effect("below min_quorum: ORCHESTRATION_NO_CONSENSUS naming what was missing", () =>
    Effect.gen(function* () {
      const { layer } = yield* setup({
        fast: [ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone"))],
        slow: [ScriptedEngine.reply("{}")]
      })
      const failure = yield* Effect.flip(SingleShot.run(query({ min_quorum: 2 })).pipe(Effect.provide(layer)))
      expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(failure.message).toBe("only 1 of 4 responders gave a valid answer; min_quorum is 2")
      const missing = (failure.details as { missing: ReadonlyArray<{ responder: string }> }).missing.map((m) => m.responder)
      expect(missing).toEqual(["fast", "index"])
    }))

  it.effect("top_k and the calls budget bound the dispatch; a human has no slot in memory", () =>
    Effect.gen(function* () {
      const { fast, layer, slow } = yield* setup({ fast: [ScriptedEngine.reply('{"category":"news"}')], slow: [] })
      const checked = Check.check(
        {
          kind: "infer.query.v1",
          input: { inline: "x" },
          responders: [{ kind: "actor", did: "did:example:alice" }, { kind: "llm", model: "~fast" }, { kind: "llm", model: "~slow" }],
          answer_shape: { kind: "core.classification.v1" },
          budget: { calls: 2 }
        },
        { aliases }
      )
      const result = yield* SingleShot.run(Either.getOrThrow(checked)).pipe(Effect.provide(layer))
      expect(result.responses.map((r) => r.responder)).toEqual(["alice", "fast"])
      expect(result.responses[0]!.outcome).toEqual({ _tag: "Failed", problem: "a human responder answers through a durable slot; the in-memory single_shot has none" })
      expect((yield* fast.requests).length).toBe(1)
      expect((yield* slow.requests).length).toBe(0)
    }))

  it.effect("a record input needs a record store", () =>
    Effect.gen(function* () {
      const { layer } = yield* setup({ fast: [], slow: [] })
      const failure = yield* Effect.flip(SingleShot.run(query({ input: { record_id: "know-1" } })).pipe(Effect.provide(layer)))
      expect(failure.message).toContain("input.record_id: this runner has no record store")
      const result = yield* SingleShot.run(query({ input: { record_id: "know-1" }, responders: [{ kind: "pattern", capability: "classification" }] }), {
        recordText: () => Effect.succeed("a grant")
      }).pipe(Effect.provide(layer))
      expect(result.fold.answer).toEqual({ category: "research" })
    }))
})
