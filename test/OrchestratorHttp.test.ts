/**
 * Mode task over HTTP (issue #15): POST /v1/run with mode "task" on the real
 * adapter over a ScriptedEngine. The analyzer's task list is run by the default
 * `infer` processor (the engine answers each task); the response carries the
 * outputs and the orchestration. A task list in the request runs without an
 * analysis; one naming an unknown processor is refused, naming the processors.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { post, serve } from "./support/server.js"

const list = new TaskList({
  analysis: "classify, then sum",
  tasks: [
    new Task({ id: "classify", type: "sentiment", processor: "infer", priority: 1, description: "Classify: great phone" }),
    new Task({ id: "sum", type: "sum", processor: "infer", priority: 2, dependencies: ["classify"], description: "Add 2 and 3" })
  ]
})

const taskRequest = (fields: Record<string, unknown> = {}) => ({
  mode: "task",
  messages: [{ role: "user", content: "classify a review and add 2 and 3" }],
  ...fields
})

describe("POST /v1/run mode task", () => {
  it.scoped("the analyzer's tasks run through the default processor; the response carries outputs and orchestration", () =>
    Effect.gen(function* () {
      const { url } = yield* serve({
        engine: ScriptedEngine.layer([ScriptedEngine.reply(toJson(list)), ScriptedEngine.reply("positive"), ScriptedEngine.reply("5")])
      })
      const res = yield* post(`${url}/v1/run`, taskRequest())
      expect(res.status).toBe(200)
      expect(res.json.error).toBeUndefined()
      expect(res.json.stopReason).toBe("finish")
      expect(res.json.structuredOutput).toEqual({ classify: "positive", sum: "5" })
      expect(JSON.parse(res.json.content)).toEqual({ classify: "positive", sum: "5" })
      expect(res.json.orchestration.analysis).toBe("classify, then sum")
      expect(res.json.orchestration.metadata.phases).toEqual([["classify"], ["sum"]])
      expect(res.json.orchestration.completed.map((t: { id: string }) => t.id)).toEqual(["classify", "sum"])
    }), { timeout: 20_000 })

  it.scoped("a task list in the request runs without analysis; an unknown processor is refused naming the processors", () =>
    Effect.gen(function* () {
      const { url } = yield* serve({ engine: ScriptedEngine.layer([ScriptedEngine.reply("only answer")]) })
      const given = yield* post(`${url}/v1/run`, taskRequest({
        messages: [],
        task: { tasks: { analysis: "given", tasks: [{ id: "one", type: "t", processor: "infer", description: "say it" }] } }
      }))
      expect(given.status).toBe(200)
      expect(given.json.structuredOutput).toEqual({ one: "only answer" })
      const refused = yield* post(`${url}/v1/run`, taskRequest({
        messages: [],
        task: { tasks: { analysis: "given", tasks: [{ id: "one", type: "t", processor: "nope" }] } }
      }))
      expect(refused.status).toBeGreaterThanOrEqual(400)
      expect(refused.text).toContain("ORCHESTRATION_STEP_MISMATCH")
      expect(refused.text).toContain("the processors are infer")
    }), { timeout: 20_000 })
})
