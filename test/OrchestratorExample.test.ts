import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { program } from "../examples/orchestrator.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"

/** Tests that could wait forever on the TestClock (a retry that never fires) end here instead. */
const bound = 20_000

const analysis = new TaskList({
  analysis: "two reviews and a sum are independent; the report reads them all",
  tasks: [
    new Task({ id: "r1", type: "sentiment", processor: "sentiment", priority: 1, description: "Classify: great battery" }),
    new Task({ id: "r2", type: "sentiment", processor: "sentiment", priority: 1, description: "Classify: the screen cracked" }),
    new Task({ id: "sum", type: "math", processor: "calculator", priority: 1, description: "Add 12 and 30", metadata: { expression: "12 + 30" } }),
    new Task({ id: "report", type: "report", processor: "report", priority: 2, dependencies: ["r1", "r2", "sum"], description: "Report" })
  ]
})

describe("examples/orchestrator", { timeout: bound }, () => {
  it.effect("decomposes, plans two phases and runs every task on a scripted analyzer", () =>
    Effect.gen(function* () {
      const result = yield* program
      expect(result.metadata.phases).toEqual([["r1", "r2", "sum"], ["report"]])
      expect(result.completed.map((t) => [t.id, t.output])).toEqual([
        ["r1", "positive"],
        ["r2", "negative"],
        ["sum", 42],
        ["report", "r1=positive, r2=negative, sum=42"]
      ])
      const [request] = yield* ScriptedEngine.requests
      expect(request!.messages[0]!.content).toContain("Consider:\n- Independent tasks run in parallel\n")
    }).pipe(Effect.provide(Layer.merge(JsonConstraint.layer, ScriptedEngine.layer([ScriptedEngine.reply(toJson(analysis))])))))
})
