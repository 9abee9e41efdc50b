/**
 * `pagantic serve` on the bundled model answers mode task with what the model was
 * taught (BundledTasks: its analyzer and the sentiment and calculator processors),
 * as `pagantic task` does; on another model the facade's own processors stay.
 * Real servers on 127.0.0.1 (Live.layer with `bundledTasks`, as serve builds it).
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { post, serve } from "./support/server.js"

const demo = `Classify these reviews: "The room was spotless." and "The waiter ignored us.", then add up 12, 30 and 7.`
const taskRequest = (text: string) => ({ mode: "task", messages: [{ role: "user", content: text }] })

describe("serve, mode task (bundledTasks)", () => {
  it.live("on the bundled model: the analyzer it was taught breaks the request up, its processors run the tasks by phase", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { url } = yield* serve({ engine: LlamaEngine.layer({ sequences: 2 }), bundledTasks: true })
        const res = yield* post(`${url}/v1/run`, taskRequest(demo))
        expect(res.status, res.text.slice(0, 300)).toBe(200)
        const orchestration = res.json.orchestration
        expect(orchestration.metadata.phases).toEqual([["t1", "t2"], ["t3"]])
        expect(orchestration.completed.map((t: any) => [t.id, t.output])).toEqual([
          ["t1", { sentiment: "positive" }],
          ["t2", { sentiment: "negative" }],
          ["t3", 49]
        ])
      })
    ), 180_000)

  it.live("on another model the facade's own processors stay: the analyzer is offered 'infer'", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const list = {
          analysis: "one task",
          tasks: [{ id: "t1", type: "answer", processor: "infer", priority: 1, dependencies: [], description: "say hi", metadata: {} }]
        }
        const { url } = yield* serve({
          engine: ScriptedEngine.layer([ScriptedEngine.reply(JSON.stringify(list)), ScriptedEngine.reply("hi")]),
          bundledTasks: true
        })
        const res = yield* post(`${url}/v1/run`, taskRequest("say hi"))
        expect(res.status, res.text.slice(0, 300)).toBe(200)
        expect(res.json.orchestration.completed.map((t: any) => [t.id, t.output])).toEqual([["t1", "hi"]])
      })
    ), 60_000)
})
