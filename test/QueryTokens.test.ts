/**
 * Mode query's token usage: the SystemResponse's `tokenUsage` carries what the
 * query's llm responders spent, as every other mode's does (it was only in
 * `query.tokens`): in memory the exact usage of each responder's inferences
 * (prompt and output apart), on a durable run the KNOW's total.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Orchestration from "../src/programs/Orchestration.js"
import type { Responder } from "../src/services/ResponderRegistry.js"

const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.timeout("30 seconds"))

const aliases = { fast: "fast-model", slow: "slow-model" }

/** Two llm responders (prompt 10 + output 7, prompt 12 + output 5) and a pattern responder (no tokens). */
const registry = Effect.gen(function* () {
  const fast = yield* ScriptedEngine.make([
    ScriptedEngine.reply('{"category":"research","_confidence":0.9}', { usage: { promptTokens: 10, outputTokens: 7 } })
  ])
  const slow = yield* ScriptedEngine.make([
    ScriptedEngine.reply('{"category":"research","_confidence":0.6}', { usage: { promptTokens: 12, outputTokens: 5 } })
  ])
  const responders: ReadonlyArray<Responder> = [
    { id: "fast", kind: "llm", model: "fast-model", engine: fast.engine },
    { id: "slow", kind: "llm", model: "slow-model", engine: slow.engine },
    { id: "keywords", kind: "pattern", capabilities: { classification: () => ({ category: "research", _confidence: 0.5 }) } }
  ]
  return Layer.mergeAll(Constraint.layer, InMemoryResponders.layer({ responders, aliases }), LexicalReranker.layer())
})

const request = {
  mode: "query",
  messages: [],
  query: {
    kind: "infer.query.v1",
    input: { inline: "a grant proposal on protein folding" },
    responders: [{ kind: "llm", model: "~fast" }, { kind: "llm", model: "~slow" }, { kind: "pattern", capability: "classification" }],
    fold: { function: "best_of" },
    answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
    top_k: 3
  }
}

describe("mode query: tokenUsage", () => {
  it.effect("in memory: the responders' inferences, prompt and output apart; the total is query.tokens", () =>
    bounded(Effect.gen(function* () {
      const layer = yield* registry
      const facade = yield* Effect.provide(Facade.make(), layer)
      const response = yield* facade.runUnknown(request)
      expect(response.error).toBeUndefined()
      expect(response.query?.tokens).toBe(34)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 22, outputTokens: 12, calls: 2 })
      expect(response.tokenUsage.totalTokens).toBe(response.query?.tokens)
    })))

  it.live("a durable run: the KNOW's total, as output tokens, with the run's CALLs", () =>
    bounded(Effect.gen(function* () {
      const layer = yield* registry
      const queries = Orchestration.definition({ aliases })
      const runs = InMemoryRuns.layer({ definitions: [queries] }).pipe(Layer.provideMerge(layer))
      const response = yield* Effect.flatMap(Facade.make({ queries: { definition: queries } }), (f) => f.runUnknown(request)).pipe(
        Effect.provide(runs),
        Effect.scoped
      )
      expect(response.error).toBeUndefined()
      expect(response.query?.runId).toBeDefined()
      expect(response.query?.tokens).toBe(34)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 0, outputTokens: 34, calls: 3 })
    })))
})
