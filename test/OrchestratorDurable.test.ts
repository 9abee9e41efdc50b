/**
 * The orchestrator in a durable run (issue #15, "kill -9 during phase 2 then
 * resume"): an orchestrated run of three phases on a SQLite state file, its
 * process SIGKILLed inside a phase-2 task, then restarted without a new start.
 * The phase-1 processors are not invoked again, the analyzer is not asked again
 * (the second process's engine gets no request), and the result's canonical JSON
 * equals the uncrashed run's (clock times left out: they differ between any two
 * runs). Real processes and a real kill; bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import { canonicalJson } from "../src/domain/Json.js"
import { OrchestratorResult } from "../src/domain/Task.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Runs from "../src/services/Runs.js"
import { tempCase, waitForFile } from "./support/durable-spawn.js"
import { analyzerReply, Orchestrated, TaskProbe, timeless } from "./support/orchestrator-runs.js"
import { spawnChild } from "./support/orchestrator-spawn.js"

/** The same run in memory, never killed; and how often each processor was invoked. */
const uncrashed = () => {
  const invoked: Array<string> = []
  return Effect.runPromise(
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const info = yield* runs.await(yield* runs.start(Orchestrated, { request: "compute the totals" }))
      return { info, invoked }
    }).pipe(
      Effect.scoped,
      Effect.provide(
        InMemoryRuns.layer({ definitions: [Orchestrated] }).pipe(
          Layer.provide(
            Layer.mergeAll(
              ScriptedEngine.layer([analyzerReply]),
              JsonConstraint.layer,
              Layer.succeed(TaskProbe, { invoked: (task) => Effect.sync(() => void invoked.push(task)) })
            )
          )
        )
      )
    )
  )
}

describe("Orchestrator durable mode", () => {
  it("an in-memory durable run completes every task once and returns the OrchestratorResult", async () => {
    const { info, invoked } = await uncrashed()
    expect(info.status).toBe("completed")
    expect(invoked.sort()).toEqual(["a1", "a2", "b1", "b2", "c1"])
    const result = Schema.decodeUnknownSync(OrchestratorResult)(info.result)
    expect(result.metadata.phases).toEqual([["a1", "a2"], ["b1", "b2"], ["c1"]])
    expect(result.completed.map((t) => t.id).sort()).toEqual(["a1", "a2", "b1", "b2", "c1"])
  }, 20_000)

  it("SIGKILL inside a phase-2 task, restart: phase 1 not invoked again, no analyzer call, the uncrashed result", async () => {
    const expected = canonicalJson(timeless((await uncrashed()).info.result))
    const { counter, db, dir } = tempCase("orchestrator")
    try {
      const common = { db, counter, runId: "orchestrated" }
      const first = spawnChild({ ...common, mode: "start", pause: "b1" })
      await waitForFile(counter, (text) => text.includes("paused b1"), 40_000)
      await first.kill()
      const second = spawnChild({ ...common, mode: "resume" })
      const result = await second.next("result", 40_000)
      await second.exited
      expect({ status: result.status, error: result.error }).toEqual({ status: "completed", error: undefined })
      expect(canonicalJson(timeless(result.result))).toBe(expected)
      expect(result.engineRequests).toBe(0)
      const lines = fs.readFileSync(counter, "utf8").trim().split("\n").map((line) => line.split(" "))
      const invoked = (task: string, pid: number) =>
        lines.filter(([word, name, by]) => word === "invoked" && name === task && by === String(pid)).length
      for (const task of ["a1", "a2"]) expect({ task, first: invoked(task, first.pid), second: invoked(task, second.pid) }).toEqual({ task, first: 1, second: 0 })
      // the task in flight at the kill runs again; phase 3 runs once, after the restart
      expect({ first: invoked("b1", first.pid), second: invoked("b1", second.pid) }).toEqual({ first: 1, second: 1 })
      expect({ first: invoked("c1", first.pid), second: invoked("c1", second.pid) }).toEqual({ first: 0, second: 1 })
      // b2 ran beside b1: once, or again when the kill came before its result was journaled
      expect(invoked("b2", first.pid) + invoked("b2", second.pid)).toBeGreaterThanOrEqual(1)
      expect(invoked("b2", first.pid) + invoked("b2", second.pid)).toBeLessThanOrEqual(2)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)
})
