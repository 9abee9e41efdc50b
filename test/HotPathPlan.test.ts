/**
 * What a PlanExecutor run costs on the hot path (issue 13): a plan of 3 chained
 * `infer` steps on an executor made once, as the "PlanExecutor, 3 steps" row of
 * bench/hotpath.bench.ts runs it. The speed itself is measured in
 * bench/hotpath.bench.ts, against bench/plainPlan.ts.
 *
 * A chain runs on the caller's fiber: each step starts in the step in which the
 * one before ended, with no fiber, queue or scope of the run's own unless its
 * handlers may need a scope (the executor was made where a Scope was).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as Plan from "../src/domain/Plan.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import { Engine, InferenceRequest, InferenceResult } from "../src/services/Engine.js"

const answer = new InferenceResult({
  content: "5",
  toolCalls: [],
  usage: TokenUsage.make({ promptTokens: 10, outputTokens: 2 }),
  finishReason: "stop"
})
const requests: Array<InferenceRequest> = []
const services = Context.make(Engine, {
  infer: (request) => Effect.sync(() => (requests.push(request), answer)),
  stream: () => Stream.die("not streamed"),
  modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
})

const chain = new Plan.ExecutionPlan({
  steps: [
    new Plan.Step({ name: "a", type: "infer", input: "one", dependsOn: [] }),
    new Plan.Step({ name: "b", type: "infer", input: "two", dependsOn: ["a"] }),
    new Plan.Step({ name: "c", type: "infer", input: "three", dependsOn: ["b"] })
  ]
})

describe("PlanExecutor on the hot path", () => {
  it.effect("a plan of 3 chained infer steps, its executor made where no Scope is, sends each step's input in order", () =>
    Effect.gen(function* () {
      // made where no Scope is, as the bench row makes it
      const executor = yield* Effect.provide(PlanExecutor.make({ handlers: [PlanExecutor.infer()] }), services)
      requests.length = 0
      const outcome = yield* Effect.provide(executor.execute(chain), services)
      if (outcome._tag !== "Completed") throw new Error(`expected Completed, got ${outcome._tag}`)
      expect(outcome.steps.map((s) => [s.name, s.type, s.input, s.output, s.attempts])).toEqual([
        ["a", "infer", "one", answer, 1],
        ["b", "infer", "two", answer, 1],
        ["c", "infer", "three", answer, 1]
      ])
      expect(outcome.output).toBe(answer)
      expect([outcome.trace.plannerId, outcome.trace.stepCount]).toEqual(["manual", 3])
      expect(requests.map((r) => r.messages)).toEqual([[Message.user("one")], [Message.user("two")], [Message.user("three")]])
    }))

  it.effect("made where a Scope is (a handler may need one), it completes the same plan", () =>
    Effect.gen(function* () {
      const executor = yield* Effect.scoped(Effect.provide(PlanExecutor.make({ handlers: [PlanExecutor.infer()] }), services))
      const outcome = yield* Effect.provide(executor.execute(chain), services)
      expect([outcome._tag, PlanExecutor.completedSteps(outcome).length]).toEqual(["Completed", 3])
    }))
})
