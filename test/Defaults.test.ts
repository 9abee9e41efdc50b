/**
 * The documented defaults and boundaries, each pinned by the number the docs
 * state (never by the constant that implements it, so changing the constant
 * turns a test red): the AgentLoop's 20 tool rounds and 2048 max tokens, the
 * structured paths' 2048 max tokens and two re-prompts, a non-retryable rule
 * failure asked once, RedundantLoop's 3 replicas and its majority quorum for an
 * even N, the HTTP body limit of 1 MiB, a verify agreement exactly at its
 * threshold, and a resume from SUSPENDED that is not a new attempt.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import { InferenceFailure, ValidationFailure } from "../src/domain/Failure.js"
import type * as Records from "../src/domain/Records.js"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Lifecycle from "../src/programs/Lifecycle.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as Structured from "../src/programs/Structured.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import { flip } from "./support/flip.js"
import { classify, query, runToEnd, setup } from "./support/patterns-fixtures.js"
import { send } from "./support/server.js"
import { add } from "./support/tools.js"

const structuredEnv = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), ConstraintLive.layer, Observe.eventLogMemory)

const Sentiment = Schema.Struct({ sentiment: Schema.Literal("positive", "negative", "neutral") })
const sentiment = (s: string) => ScriptedEngine.reply(`{"sentiment":"${s}"}`)

describe("AgentLoop defaults", () => {
  it.effect("at most 20 tool rounds, then one call to answer: 21 inferences, max_iterations", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make()
      const result = yield* agent.chat("loop forever")
      expect(result.stopReason).toBe("max_iterations")
      expect(result.toolCalls).toHaveLength(20)
      expect(result.inferences).toBe(21)
    }).pipe(
      Effect.provide(
        Layer.merge(
          ScriptedEngine.layer([ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 1, b: 1 } }])], { whenExhausted: "repeat-last" }),
          Registry.layer([add])
        )
      ),
      Effect.timeout("20 seconds")
    ))

  it.effect("asks for at most 2048 tokens a call", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make()
      yield* agent.chat("hello")
      const requests = yield* ScriptedEngine.requests
      expect(requests.map((r) => r.maxTokens)).toEqual([2048])
    }).pipe(Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("hi")]))))
})

describe("structured defaults", () => {
  it.effect("Structured.run asks for at most 2048 tokens at temperature 0.2", () =>
    Effect.gen(function* () {
      yield* Structured.run([Message.user("classify")], { schema: Sentiment })
      const [request] = yield* ScriptedEngine.requests
      expect(request!.maxTokens).toBe(2048)
      expect(request!.temperature).toBe(0.2)
    }).pipe(Effect.provide(structuredEnv([sentiment("positive")]))))

  it.live("a rejected reply is re-prompted twice: three attempts in all, then the failure", () =>
    Effect.gen(function* () {
      const failure = yield* flip(Structured.run([Message.user("classify")], { schema: Sentiment }))
      expect(failure).toMatchObject({ _tag: "ConstraintFailure" })
      expect(yield* ScriptedEngine.requests).toHaveLength(3)
    }).pipe(
      Effect.provide(structuredEnv([sentiment("furious"), sentiment("furious"), sentiment("furious"), sentiment("positive")])),
      Effect.timeout("20 seconds")
    ))

  it.effect("a non-retryable rule failure is never retried: one attempt, that failure", () =>
    Effect.gen(function* () {
      const final = new ValidationFailure({ code: "VALIDATION_RULE_FAILED", retryable: false, message: "not allowed, whatever the model says" })
      const failure = yield* flip(
        Structured.run([Message.user("classify")], { schema: Sentiment, validate: () => Effect.fail(final) })
      )
      expect({ code: failure.code, message: failure.message, retryable: failure.retryable }).toEqual({ code: "VALIDATION_RULE_FAILED", message: final.message, retryable: false })
      expect(yield* ScriptedEngine.requests).toHaveLength(1)
    }).pipe(Effect.provide(structuredEnv([sentiment("positive"), sentiment("positive"), sentiment("positive")]))))

  it.live("a retryable rule failure is: the second reply passes", () =>
    Effect.gen(function* () {
      const result = yield* Structured.run([Message.user("classify")], {
        schema: Sentiment,
        validate: (v) => v.sentiment === "positive" ? Effect.void : Effect.fail(ValidationFailure.ruleFailed("must be positive"))
      })
      expect(result.attempts).toBe(2)
    }).pipe(Effect.provide(structuredEnv([sentiment("neutral"), sentiment("positive")])), Effect.timeout("20 seconds")))
})

describe("RedundantLoop defaults", () => {
  it.effect("3 replicas", () =>
    Effect.gen(function* () {
      const result = yield* RedundantLoop.run("x", { schema: Sentiment })
      expect(result.replicas).toHaveLength(3)
      expect(yield* ScriptedEngine.requests).toHaveLength(3)
    }).pipe(Effect.provide(structuredEnv([sentiment("neutral"), sentiment("neutral"), sentiment("neutral"), sentiment("neutral")]))))

  const gone = () => ScriptedEngine.fail(InferenceFailure.modelUnavailable("gone"))

  it.effect("N = 4: the quorum is 3, so two valid replicas are no consensus and three are", () =>
    Effect.gen(function* () {
      const below = yield* flip(
        RedundantLoop.run("x", { schema: Sentiment, n: 4, inferenceRetry: RetryPolicy.none })
      ).pipe(Effect.provide(structuredEnv([gone(), gone(), sentiment("neutral"), sentiment("neutral")])))
      expect({ code: below.code, details: below.details }).toMatchObject({ code: "ORCHESTRATION_NO_CONSENSUS", details: { valid: 2, quorum: 3 } })
      const met = yield* RedundantLoop.run("x", { schema: Sentiment, n: 4, inferenceRetry: RetryPolicy.none }).pipe(
        Effect.provide(structuredEnv([gone(), sentiment("neutral"), sentiment("neutral"), sentiment("neutral")]))
      )
      expect(met.value).toEqual({ sentiment: "neutral" })
    }))

  it.effect("N = 2: the quorum is both", () =>
    Effect.gen(function* () {
      const below = yield* flip(
        RedundantLoop.run("x", { schema: Sentiment, n: 2, inferenceRetry: RetryPolicy.none })
      ).pipe(Effect.provide(structuredEnv([gone(), sentiment("neutral")])))
      expect({ code: below.code, details: below.details }).toMatchObject({ code: "ORCHESTRATION_NO_CONSENSUS", details: { valid: 1, quorum: 2 } })
    }))
})

describe("HTTP defaults", () => {
  it.effect("the body limit is 1 MiB: 1,048,576 bytes are read, one more is 413", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const engine = ScriptedEngine.layer([ScriptedEngine.reply("ok")], { whenExhausted: "repeat-last" })
        const context = yield* Layer.build(
          Http.layer({ port: 0 }).pipe(Layer.provideMerge(Live.layer({ engine })), Layer.provideMerge(engine))
        )
        const address = Context.get(context, HttpServer.HttpServer).address
        if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
        const url = `http://127.0.0.1:${address.port}/v1/chat/completions`
        const json = JSON.stringify({ model: "pagantic", messages: [{ role: "user", content: "hi" }] })
        const padded = (size: number) => json + " ".repeat(size - Buffer.byteLength(json))
        const headers = { "content-type": "application/json" }
        const at = yield* send(url, { method: "POST", headers, body: padded(1024 * 1024) })
        expect(at.status).toBe(200)
        const over = yield* send(url, { method: "POST", headers, body: padded(1024 * 1024 + 1) })
        expect(over.status).toBe(413)
      })
    ).pipe(Effect.timeout("20 seconds")))
})

describe("boundaries", () => {
  const learns = (thread: ReadonlyArray<Records.QueryRecord>) =>
    thread.filter((r): r is Records.Learn => r.kind === "LEARN").map((r) => r.body)

  it.live("verify: an agreement exactly at the threshold is agreement (no tiebreaker)", () =>
    Effect.gen(function* () {
      const { calls, layer, queries } = yield* setup({ haiku: [classify("research")], gpt: [classify("research")], opus: [classify("news")] })
      const { thread } = yield* runToEnd(
        queries,
        query({
          orchestration: {
            pattern: "verify",
            primary: [{ kind: "llm", model: "~haiku" }],
            verifier: { kind: "llm", model: "~gpt" },
            tiebreaker: { kind: "llm", model: "~opus" },
            agreement_threshold: 1
          }
        })
      ).pipe(Effect.provide(layer))
      expect(learns(thread)[0]).toMatchObject({ agreement: 1, threshold: 1, branch: "agreed" })
      expect(yield* calls).toEqual({ haiku: 1, gpt: 1 })
    }).pipe(Effect.timeout("30 seconds")))

  it.effect("lifecycle: a resume from SUSPENDED keeps the attempt; VALIDATE -> EXECUTE is the next one", () =>
    Effect.gen(function* () {
      const tracker = yield* Lifecycle.makeTracker
      for (const to of ["PREPARE", "EXECUTE", "SUSPENDED", "EXECUTE"] as const) {
        expect(yield* tracker.transition(to, "test")).toBe(true)
      }
      expect((yield* tracker.state).attempt).toBe(1)
      yield* tracker.transition("VALIDATE", "test")
      yield* tracker.transition("EXECUTE", "test")
      expect((yield* tracker.state).attempt).toBe(2)
    }))
})
