/**
 * The six patterns on the in-memory durable runs (issue #16): call counts on
 * scripted engines per pattern, the thread's records (every CALL and DO before
 * the fold, one LEARN per step of state, the KNOW as the result), failures as
 * slots, budgets and the quorum.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { InferenceFailure } from "../src/domain/Failure.js"
import type * as Records from "../src/domain/Records.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { classify, query, runToEnd, setup, verdict } from "./support/patterns-fixtures.js"

const kindsOf = (thread: ReadonlyArray<Records.QueryRecord>) => thread.map((r) => r.kind)
const learns = (thread: ReadonlyArray<Records.QueryRecord>) =>
  thread.filter((r): r is Records.Learn => r.kind === "LEARN").map((r) => r.body)
const knowOf = (thread: ReadonlyArray<Records.QueryRecord>) => thread.find((r): r is Records.Know => r.kind === "KNOW")!

const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.timeout("30 seconds"))

describe("single_shot (durable)", () => {
  it.live("one CALL per candidate, every DO recorded before the KNOW; a failing responder is a failed DO", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({
        haiku: [classify("research", 0.9)],
        sonnet: [ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone"))],
        opus: [classify("research")]
      })
      const { info, thread } = yield* runToEnd(
        queries,
        query({ responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }, { kind: "llm", model: "~opus" }] })
      ).pipe(Effect.provide(layer))
      expect(info.status).toBe("completed")
      expect(yield* calls).toEqual({ haiku: 1, sonnet: 1, opus: 1 })
      expect(kindsOf(thread)).toEqual(["INTEND", "CALL", "CALL", "CALL", "DO", "DO", "DO", "KNOW"])
      const failed = thread.find((r): r is Records.Do => r.kind === "DO" && r.body.kind === "infer.failure.v1")!
      expect(failed.body).toMatchObject({ problem: expect.stringContaining("INFERENCE_MODEL_UNAVAILABLE") })
      const call = thread.find((r) => r.id === failed.parents[0])!
      expect(call.kind).toBe("CALL")
      expect((call as Records.Call).body.correlation_id).toBe((failed.body as { correlation_id: string }).correlation_id)
      const know = knowOf(thread)
      expect(know.body).toMatchObject({ kind: "core.classification.v1", category: "research", _orchestration: { pattern: "single_shot", status: "accepted", calls: 3 } })
      expect(know.body._fold.support).toHaveLength(2)
    })))
})

describe("verify", () => {
  const verifyQuery = (extra: Record<string, unknown> = {}) =>
    query({
      orchestration: {
        pattern: "verify",
        primary: [{ kind: "llm", model: "~haiku" }],
        verifier: { kind: "llm", model: "~gpt" },
        tiebreaker: { kind: "llm", model: "~opus" },
        ...extra
      }
    })

  it.live("primary and verifier agree: 2 CALLs, the LEARN says agreed, the primary's answer is committed", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("research")], gpt: [classify("research")] })
      const { thread } = yield* runToEnd(queries, verifyQuery()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1 })
      expect(learns(thread)).toEqual([
        expect.objectContaining({ kind: "infer.orchestration.verify.state.v1", agreement: 1, threshold: 0.85, branch: "agreed" })
      ])
      expect(knowOf(thread).body).toMatchObject({ category: "research", _orchestration: { pattern: "verify", status: "accepted", calls: 2 } })
    })))

  it.live("they disagree: 3 CALLs, the tiebreaker sees both answers and its answer is committed", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries, requests } = yield* setup({
        haiku: [classify("research")],
        gpt: [classify("news")],
        opus: [classify("news", 0.8)]
      })
      const { thread } = yield* runToEnd(queries, verifyQuery()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1, opus: 1 })
      expect(learns(thread)).toEqual([expect.objectContaining({ agreement: 0, branch: "tiebreaker" })])
      const asked = (yield* requests("opus"))[0]!.messages.map((m) => m.content).join("\n")
      expect(asked).toContain(`Answer A: {"category":"research"}`)
      expect(asked).toContain(`Answer B: {"category":"news"}`)
      // the verifier answered without the primary's answer
      const verifierAsked = (yield* requests("gpt"))[0]!.messages.map((m) => m.content).join("\n")
      expect(verifierAsked).not.toContain("research")
      expect(knowOf(thread).body).toMatchObject({ category: "news", _confidence: 1, _orchestration: { calls: 3, stage: 2 } })
    })))

  it.live("a verifier that fails takes the tiebreaker path", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({
        haiku: [classify("research")],
        gpt: [ScriptedEngine.fail(InferenceFailure.engineError("boom"))],
        opus: [classify("research")]
      })
      const { thread } = yield* runToEnd(queries, verifyQuery()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1, opus: 1 })
      expect(learns(thread)[0]).toMatchObject({ branch: "tiebreaker", agreement: 0, problem: expect.stringContaining("boom") })
    })))

  it.live("a CEL agreement threshold over the two responses", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("research")], gpt: [classify("research")], opus: [classify("news")] })
      // 2.0 can never be reached: always the tiebreaker
      const { thread } = yield* runToEnd(queries, verifyQuery({ agreement_threshold: "responses.size() == 2 ? 2.0 : 0.0" })).pipe(
        Effect.provide(layer)
      )
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1, opus: 1 })
      expect(learns(thread)[0]).toMatchObject({ agreement: 1, threshold: 2, branch: "tiebreaker" })
    })))
})
