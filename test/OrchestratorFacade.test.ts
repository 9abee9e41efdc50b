/** The facade's mode task: the Orchestrator behind a SystemRequest, its result in the SystemResponse. */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { ToolFailure } from "../src/domain/Failure.js"
import { SystemRequest, SystemResponse } from "../src/domain/System.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"

/** Tests that could wait forever on the TestClock (a retry that never fires) end here instead. */
const bound = 20_000

const request = (fields: Record<string, unknown>) =>
  Schema.decodeUnknownSync(SystemRequest)({ mode: "task", messages: [{ role: "user", content: "do it" }], ...fields })

const withEngine = (script: ReadonlyArray<ScriptedEngine.Step>) => Layer.merge(ScriptedEngine.layer(script), Constraint.layer)

const upper = TaskProcessor.make((t, { dependencies }) =>
  Effect.succeed([t.description.toUpperCase(), ...Object.values(dependencies)].join("+")))
const broken = TaskProcessor.make((t) => Effect.fail(ToolFailure.executionFailed("broken", `${t.id} broke`, { retryable: false })))

const list = new TaskList({
  analysis: "a then b",
  tasks: [
    new Task({ id: "a", type: "t", processor: "upper", description: "first" }),
    new Task({ id: "b", type: "t", processor: "upper", description: "second", dependencies: ["a"] })
  ]
})

describe("Facade mode task", { timeout: bound }, () => {
  it.effect("analyzes with the engine, runs the tasks, and answers with the orchestration", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ taskProcessors: { upper } })
      const execution = yield* system.execute(request({ requestId: "r-1" }))
      const { response } = execution
      expect(response.error).toBeUndefined()
      expect(response.stopReason).toBe("finish")
      expect(response.structuredOutput).toEqual({ a: "FIRST", b: "SECOND+FIRST" })
      expect(JSON.parse(response.content)).toEqual({ a: "FIRST", b: "SECOND+FIRST" })
      expect(response.orchestration?.metadata.phases).toEqual([["a"], ["b"]])
      expect(response.orchestration?.analysis).toBe("a then b")
      expect(response.tokenUsage.promptTokens).toBe(10)
      expect(execution.transitions.map((t) => `${t.from}->${t.to}`)).toEqual([
        "INIT->PLAN",
        "PLAN->PREPARE",
        "PREPARE->EXECUTE",
        "EXECUTE->VALIDATE",
        "VALIDATE->COMPLETE"
      ])
      // the response, orchestration included, encodes to JSON and back
      const wire = Schema.encodeSync(SystemResponse)(response)
      expect(Schema.decodeUnknownSync(SystemResponse)(JSON.parse(JSON.stringify(wire))).orchestration?.completed.length).toBe(2)
    }).pipe(Effect.provide(withEngine([ScriptedEngine.reply(toJson(list))]))))

  it.effect("a task list in the request runs without analysis; xml and the other settings pass through", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ taskProcessors: { upper, broken } })
      const given = Schema.encodeSync(TaskList)(
        new TaskList({
          analysis: "given",
          tasks: [
            new Task({ id: "x", type: "t", processor: "broken" }),
            new Task({ id: "y", type: "t", processor: "upper", description: "fine" }),
            new Task({ id: "z", type: "t", processor: "upper", dependencies: ["x"] })
          ]
        })
      )
      const response = yield* system.run(
        request({ messages: [], task: { tasks: given, failurePolicy: "continue", scheduling: "phases", maxConcurrent: 2 } })
      )
      expect(response.error).toBeUndefined()
      expect(response.stopReason).toBe("incomplete")
      expect(response.structuredOutput).toEqual({ y: "FINE" })
      expect(response.orchestration?.failed.map((f) => [f.id, f.error.code])).toEqual([["x", "TOOL_EXECUTION_FAILED"]])
      expect(response.orchestration?.skipped.map((s) => [s.id, s.reason])).toEqual([["z", "dependency_failed"]])
      expect(response.orchestration?.metadata).toMatchObject({ scheduling: "phases", failurePolicy: "continue", maxConcurrent: 2 })
      expect(yield* ScriptedEngine.requests).toEqual([])
    }).pipe(Effect.provide(withEngine([]))))

  it.effect("parser xml: the analyzer is asked for XML", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ taskProcessors: { upper } })
      const response = yield* system.run(request({ task: { parser: "xml" } }))
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ only: "HI" })
      const [sent] = yield* ScriptedEngine.requests
      expect(sent!.messages[0]!.content).toContain("<tasks>")
      expect(sent!.schema).toBeUndefined()
    }).pipe(
      Effect.provide(
        withEngine([ScriptedEngine.reply(`<tasks><task id="only" type="t" processor="upper"><description>hi</description></task></tasks>`)])
      )
    ))

  it.effect("an unknown processor in the request's list is the response's error, naming the registered ones", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ taskProcessors: { upper } })
      const response = yield* system.run(
        request({ task: { tasks: { analysis: "", tasks: [{ id: "a", type: "t", processor: "search" }] } } })
      )
      expect(response.error).toMatchObject({ code: "ORCHESTRATION_STEP_MISMATCH" })
      expect(response.error?.message).toContain("the processors are upper")
      expect(response.orchestration).toBeUndefined()
    }).pipe(Effect.provide(withEngine([]))))

  it.effect("the default processor `infer` answers each task with the engine, dependencies' outputs in its prompt", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const tasks = { analysis: "", tasks: [{ id: "a", type: "t", processor: "infer", description: "Name a colour" }, { id: "b", type: "t", processor: "infer", description: "Say it twice", dependencies: ["a"] }] }
      const response = yield* system.run(request({ task: { tasks } }))
      expect(response.structuredOutput).toEqual({ a: "red", b: "red red" })
      const requests = yield* ScriptedEngine.requests
      expect(requests[1]!.messages[1]!.content).toBe(`Say it twice\n\nResults of earlier tasks:\n- a: "red"`)
    }).pipe(Effect.provide(withEngine([ScriptedEngine.reply("red"), ScriptedEngine.reply("red red")]))))

  it.effect("a bad task setting is refused at the boundary (maxConcurrent past 32)", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ taskProcessors: { upper } })
      const response = yield* system.runUnknown({ mode: "task", messages: [{ role: "user", content: "x" }], task: { maxConcurrent: 99 } })
      expect(response.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST" })
      expect(response.error?.message).toContain("maxConcurrent")
    }).pipe(Effect.provide(withEngine([]))))
})
