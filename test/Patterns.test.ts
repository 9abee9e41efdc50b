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

const stages = (...models: ReadonlyArray<string>) =>
  models.map((m) => ({ responders: [m === "keywords" ? { kind: "pattern", capability: "classification" } : { kind: "llm", model: `~${m}` }] }))

describe("waterfall", () => {
  const waterfall = (extra: Record<string, unknown> = {}) =>
    query({
      fold: { function: "best_of" },
      orchestration: {
        pattern: "waterfall",
        stages: stages("keywords", "haiku", "sonnet", "opus"),
        accept_expression: "fold.answer.confidence >= 0.85",
        ...extra
      }
    })

  it.live("stages in order until one is accepted: the stages tried are called, one LEARN per refused stage", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("news", 0.5)], sonnet: [classify("research", 0.9)], opus: [classify("x")] })
      const { thread } = yield* runToEnd(queries, waterfall()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, sonnet: 1 })
      expect(learns(thread)).toEqual([
        expect.objectContaining({ kind: "infer.orchestration.waterfall.state.v1", stage: 0, accepted: false, expression: "fold.answer.confidence >= 0.85", fold: expect.objectContaining({ confidence: 0.4 }) }),
        expect.objectContaining({ stage: 1, accepted: false, fold: expect.objectContaining({ confidence: 0.5 }) })
      ])
      expect(knowOf(thread).body).toMatchObject({ category: "research", _orchestration: { pattern: "waterfall", status: "accepted", stage: 2, calls: 3 } })
    })))

  it.live("all stages refused: the last fold committed marked not accepted, or the run fails by option", () =>
    bounded(Effect.gen(function* () {
      const low = { haiku: [classify("news", 0.5)], sonnet: [classify("research", 0.6)], opus: [classify("news", 0.7)] }
      const first = yield* setup(low)
      const { thread } = yield* runToEnd(first.queries, waterfall()).pipe(Effect.provide(first.layer))
      expect(learns(thread)).toHaveLength(4)
      expect(knowOf(thread).body).toMatchObject({ category: "news", _confidence: 0.7, _orchestration: { status: "not_accepted", stage: 3 } })

      const second = yield* setup(low)
      const { info } = yield* runToEnd(second.queries, waterfall({ on_exhausted: "fail" })).pipe(Effect.provide(second.layer))
      expect(info.status).toBe("failed")
      expect(info.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(info.error?.message).toContain("no stage's fold was accepted")
    })))

  it.live("an accept expression that fails on a fold at run time fails the run with ORCHESTRATION_EXPRESSION_FAILED naming it", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup({ haiku: [classify("news", 0.9)] })
      const { info, thread } = yield* runToEnd(queries, waterfall({ accept_expression: "fold.answer.value.score > 0.5" })).pipe(Effect.provide(layer))
      expect(info.status).toBe("failed")
      expect(info.error?.code).toBe("ORCHESTRATION_EXPRESSION_FAILED")
      expect(info.error?.message).toContain("orchestration.accept_expression")
      expect(info.error?.details).toMatchObject({ field: "orchestration.accept_expression", expression: "fold.answer.value.score > 0.5" })
      // the answers it had are still in the thread
      expect(thread.filter((r) => r.kind === "DO").length).toBeGreaterThan(0)
    })))

  it.live("the call budget is checked before each stage", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("news", 0.99)] })
      const { thread } = yield* runToEnd(queries, { ...waterfall(), budget: { calls: 1 } }).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({})
      expect(knowOf(thread).body).toMatchObject({ _orchestration: { status: "not_accepted", budget_exhausted: true, calls: 1, stage: 0 } })
    })))
})

describe("retry_on_low_confidence", () => {
  const retry = (extra: Record<string, unknown> = {}) =>
    query({
      responders: [{ kind: "llm", model: "~haiku" }],
      fold: { function: "best_of" },
      dial: 0.2,
      orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "fold.answer.confidence < 0.7", max_attempts: 3, retry_dial: 0.6, ...extra }
    })

  it.live("retries while the threshold fires, with the retry dial as temperature; one LEARN per attempt", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries, requests } = yield* setup({ haiku: [classify("news", 0.3), classify("research", 0.5), classify("research", 0.9)] })
      const { thread } = yield* runToEnd(queries, retry()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 3 })
      expect((yield* requests("haiku")).map((r) => r.temperature)).toEqual([0.2, 0.6, 0.6])
      expect(learns(thread).map((l) => l.kind === "infer.orchestration.retry.state.v1" && [l.attempt, l.retry, l.dial, l.next_dial])).toEqual([
        [1, true, 0.2, 0.6],
        [2, true, 0.6, 0.6],
        [3, false, 0.6, null]
      ])
      expect(knowOf(thread).body).toMatchObject({ category: "research", _orchestration: { status: "accepted", attempt: 3 } })
    })))

  it.live("exhausted: at most max_attempts CALLs, the most confident attempt committed marked low confidence", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("news", 0.3), classify("research", 0.5), classify("news", 0.4)] })
      const { thread } = yield* runToEnd(queries, retry()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 3 })
      expect(learns(thread)).toHaveLength(3)
      expect(knowOf(thread).body).toMatchObject({ category: "research", _confidence: 0.5, _orchestration: { status: "low_confidence", attempt: 2 } })
    })))
})

describe("budgets", () => {
  it.live("the token budget is checked before each attempt: spent after two, the third is never asked", () =>
    bounded(Effect.gen(function* () {
      // each scripted reply costs 10 prompt tokens and 1 output token
      const { calls, layer, queries } = yield* setup({ haiku: [classify("news", 0.3), classify("news", 0.4), classify("news", 0.9)] })
      const { thread } = yield* runToEnd(
        queries,
        query({
          responders: [{ kind: "llm", model: "~haiku" }],
          fold: { function: "best_of" },
          budget: { tokens: 15 },
          orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "fold.answer.confidence < 0.7", max_attempts: 3 }
        })
      ).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 2 })
      expect(knowOf(thread).body).toMatchObject({
        _confidence: 0.4,
        _orchestration: { status: "low_confidence", attempt: 2, tokens: 22, budget_exhausted: true }
      })
    })))
})

describe("escalate (machines)", () => {
  it.live("tiers until the escalation expression stops: one LEARN per tier", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("news", 0.5)], sonnet: [classify("research", 0.9)] })
      const { thread } = yield* runToEnd(
        queries,
        query({
          fold: { function: "best_of" },
          orchestration: { pattern: "escalate", tiers: stages("haiku", "sonnet", "opus"), escalation_expression: "fold.answer.confidence < 0.7" }
        })
      ).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, sonnet: 1 })
      expect(learns(thread).map((l) => l.kind === "infer.orchestration.escalate.state.v1" && [l.tier, l.escalate, l.expired])).toEqual([
        [0, true, false],
        [1, false, false]
      ])
      expect(knowOf(thread).body).toMatchObject({ category: "research", _orchestration: { pattern: "escalate", status: "accepted", stage: 1 } })
    })))
})

describe("ensemble_with_audit", () => {
  const audited = (extra: Record<string, unknown> = {}) =>
    query({
      orchestration: {
        pattern: "ensemble_with_audit",
        primary_responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~gpt" }, { kind: "llm", model: "~gemini" }],
        auditor: { kind: "llm", model: "~auditor" },
        audit_expression: "audit.approved == true"
      },
      ...extra
    })
  const primaries = { haiku: [classify("research")], gpt: [classify("research")], gemini: [classify("news")] }

  it.live("approve: N + 1 CALLs, the KNOW carries the fold and the verdict", () =>
    bounded(Effect.gen(function* () {
      const { calls, layer, queries, requests } = yield* setup({ ...primaries, auditor: [verdict(true, "consistent with the text")] })
      const { thread } = yield* runToEnd(queries, audited()).pipe(Effect.provide(layer))
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1, gemini: 1, auditor: 1 })
      const asked = (yield* requests("auditor"))[0]!
      expect(asked.schema?.properties?.approved?.type).toBe("boolean")
      expect(asked.messages.map((m) => m.content).join("\n")).toContain(`Answer: {"category":"research"}`)
      expect(learns(thread)).toEqual([expect.objectContaining({ kind: "infer.orchestration.audit.state.v1", audit: expect.objectContaining({ approved: true }) })])
      expect(knowOf(thread).body).toMatchObject({
        category: "research",
        _orchestration: { status: "accepted", calls: 4 },
        audit: { approved: true, rejected: false, ambiguous: false, rationale: "consistent with the text" }
      })
    })))

  it.live("reject: the KNOW says audit.rejected with the auditor's rationale", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup({ ...primaries, auditor: [verdict(false, "it is a news item")] })
      const { thread } = yield* runToEnd(queries, audited()).pipe(Effect.provide(layer))
      expect(knowOf(thread).body).toMatchObject({ _orchestration: { status: "rejected" }, audit: { rejected: true, rationale: "it is a news item" } })
    })))

  it.live("an ambiguous audit under validation_error halts with VALIDATION_RULE_FAILED naming the records", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup({ ...primaries, auditor: [ScriptedEngine.reply("looks fine I guess")] })
      const { id, info, thread } = yield* runToEnd(queries, audited({ obligation_resolution: "validation_error" })).pipe(Effect.provide(layer))
      expect(info.status).toBe("failed")
      expect(info.error?.code).toBe("VALIDATION_RULE_FAILED")
      expect(info.error?.message).toContain(`${id}/auditor/do/0`)
      expect(info.error?.message).toContain(`${id}/ensemble/do/0`)
      // the failed run still shows its answers
      expect(thread.filter((r) => r.kind === "DO")).toHaveLength(4)
      expect(thread.some((r) => r.kind === "KNOW")).toBe(false)
    })))
})

describe("awaiting", () => {
  it.live("quorum: fold once min_quorum valid answers are in; the call still going is interrupted and its DO says so", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup(
        { haiku: [classify("research")], sonnet: [ScriptedEngine.reply('{"category":"news"}', { delay: "60 seconds" })] },
        [],
        { awaiting: "quorum" }
      )
      const { thread } = yield* runToEnd(
        queries,
        query({ responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }], min_quorum: 1 })
      ).pipe(Effect.provide(layer))
      const dos = thread.filter((r): r is Records.Do => r.kind === "DO")
      expect(dos.map((d) => d.body.kind).sort()).toEqual(["core.classification.v1", "infer.failure.v1"])
      expect(dos.find((d) => d.body.kind === "infer.failure.v1")!.body).toMatchObject({ problem: "interrupted: the quorum was met before it answered" })
      expect(knowOf(thread).body).toMatchObject({ category: "research" })
    })))

  it.live("below min_quorum: ORCHESTRATION_NO_CONSENSUS naming what was missing; the DOs are recorded", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup({ haiku: [classify("research")], sonnet: [ScriptedEngine.fail(InferenceFailure.engineError("down"))] })
      const { info, thread } = yield* runToEnd(
        queries,
        query({ responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }], min_quorum: 2 })
      ).pipe(Effect.provide(layer))
      expect(info.error?.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(info.error?.message).toBe("only 1 of 2 responders gave a valid answer; min_quorum is 2")
      expect(JSON.stringify(info.error?.details)).toContain("down")
      expect(thread.filter((r) => r.kind === "DO")).toHaveLength(2)
    })))

  it.live("a bad query is refused before anything is recorded, naming the field", () =>
    bounded(Effect.gen(function* () {
      const { layer, queries } = yield* setup({})
      const failure = yield* Effect.flip(runToEnd(queries, query({ responders: [{ kind: "llm", model: "~nope" }] })).pipe(Effect.provide(layer)))
      expect(failure.code).toBe("CONFIG_INVALID_REQUEST")
      expect(failure.message).toContain("responders.0.model")
    })))
})
