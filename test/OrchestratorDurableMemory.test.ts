/**
 * The orchestrator in a durable run, in memory: each attempt of each task is a
 * step keyed by the task id and the attempt, so a retried task's failed attempt
 * and its successful one are both in the journal, and a completed thread imported
 * into an empty store re-drives to the same result with no processor invoked and
 * no analyzer request. Two orchestrator calls in one run need distinct durable
 * keys; the same key twice is a defect naming both call sites.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { InferenceFailure } from "../src/domain/Failure.js"
import { OrchestratorResult, Task, TaskList, toJson } from "../src/domain/Task.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Orchestrator from "../src/programs/Orchestrator.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"
import * as Runs from "../src/services/Runs.js"
import { timeless } from "./support/orchestrator-runs.js"

/** Invocations of the processor, by task and attempt (across layers). */
const invoked: Array<string> = []

const list = new TaskList({
  analysis: "a flaky task, then one that reads it",
  tasks: [
    new Task({ id: "flaky", type: "t", processor: "work", description: "first" }),
    new Task({ id: "after", type: "t", processor: "work", dependencies: ["flaky"], description: "second" })
  ]
})

/** Fails `flaky`'s first attempt with a retryable failure; otherwise answers with the description and its inputs. */
const work = TaskProcessor.make((task, { attempt, dependencies }) =>
  Effect.suspend(() => {
    invoked.push(`${task.id}#${attempt}`)
    return task.id === "flaky" && attempt === 1
      ? Effect.fail(InferenceFailure.engineError("the engine hiccupped"))
      : Effect.succeed({ text: task.description, inputs: dependencies })
  })
)

const make = Orchestrator.make({
  processors: { work },
  retry: { maxAttempts: 2, backoffMultiplier: 1, initialDelay: "1 millis" }
})

const Analyzed = Runs.define({
  name: "analyzed",
  payload: Schema.Struct({}),
  success: OrchestratorResult,
  program: () => Effect.flatMap(make, (orchestrator) => orchestrator.process("do the two things"))
})

const Twice = Runs.define({
  name: "twice",
  payload: Schema.Struct({ sameKey: Schema.Boolean }),
  success: Schema.Array(Schema.Number),
  program: ({ sameKey }) =>
    Effect.gen(function* () {
      const orchestrator = yield* make
      const first = yield* orchestrator.execute(list, {}, { durableKey: "first" })
      const second = yield* orchestrator.execute(list, {}, { durableKey: sameKey ? "first" : "second" })
      return [first.completed.length, second.completed.length]
    })
})

const inMemory = <A, E>(script: ReadonlyArray<ScriptedEngine.Step>, body: Effect.Effect<A, E, Runs.Runs | ScriptedEngine.ScriptedEngineControl>) =>
  Effect.scoped(Effect.provide(
    body,
    InMemoryRuns.layer({ definitions: [Analyzed, Twice] }).pipe(
      Layer.provideMerge(Layer.merge(ScriptedEngine.layer(script), JsonConstraint.layer))
    )
  ))

describe("Orchestrator durable mode, in memory", () => {
  it.live("a retried task's attempts are journaled apart; the imported thread re-drives with nothing invoked and no analyzer call", () =>
    Effect.gen(function* () {
      invoked.length = 0
      const first = yield* inMemory([ScriptedEngine.reply(toJson(list))], Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Analyzed, {}, { id: "analyzed-run" })
        return { info: yield* runs.await(id), thread: yield* runs.exportThread(id) }
      }))
      expect(first.info.status).toBe("completed")
      expect(invoked).toEqual(["flaky#1", "flaky#2", "after#1"])
      const result = Schema.decodeUnknownSync(OrchestratorResult)(first.info.result)
      expect(result.completed.map((t) => [t.id, t.attempts])).toEqual([["flaky", 2], ["after", 1]])
      const done = first.thread.records.filter((r) => r.kind === "DO")
      expect(done.map((r) => r.key)).toEqual([
        "orchestrator/analysis",
        "orchestrator/task/flaky/1",
        "orchestrator/task/flaky/2",
        "orchestrator/task/after/1"
      ])
      expect(done[1]!.body).toMatchObject({ error: { code: "INFERENCE_ENGINE_ERROR" } })

      const replay = yield* inMemory([], Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const info = yield* runs.await(yield* runs.importThread(first.thread))
        return { info, requests: yield* ScriptedEngine.requests }
      }))
      expect(replay.info.status).toBe("completed")
      expect(timeless(replay.info.result)).toEqual(timeless(first.info.result))
      expect(replay.requests).toHaveLength(0)
      expect(invoked).toHaveLength(3)
    }), { timeout: 20_000 })

  it.live("two orchestrator calls in one run with distinct durable keys both run; the same key twice is a defect naming both sites", () =>
    inMemory([], Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const distinct = yield* runs.await(yield* runs.start(Twice, { sameKey: false }))
      expect(distinct.status).toBe("completed")
      expect(distinct.result).toEqual([2, 2])
      const same = yield* runs.await(yield* runs.start(Twice, { sameKey: true }))
      expect(same.status).toBe("failed")
      expect(same.error?.message).toContain(`"first/task/flaky/1" is used twice`)
    })), { timeout: 20_000 })
})
