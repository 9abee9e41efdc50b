/**
 * The crash matrix (issue #14): a 6-step reference run on a SQLite state file,
 * its process SIGKILLed inside each step and between each two, then restarted
 * without a new start. Every time, the result's canonical JSON equals the
 * uncrashed run's; a step completed before the kill ran once, the step in flight
 * at most twice; the second process ran only the steps not completed; and no run
 * is left running or stale. Real processes and real kills: slow, so the cases run
 * three at a time, each restart loads its modules while the first process runs,
 * and the file is bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import { canonicalJson } from "../src/domain/Json.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as Runs from "../src/services/Runs.js"
import { Probe, Reference } from "./support/durable-runs.js"
import { pooled, spawnChild, tempCase, waitForFile } from "./support/durable-spawn.js"

const uncrashed = () =>
  Effect.runPromise(
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      return (yield* runs.await(yield* runs.start(Reference, { seed: 5 }))).result
    }).pipe(
      Effect.provide(
        InMemoryRuns.layer({ definitions: [Reference] }).pipe(
          Layer.provide(
            Layer.succeed(Probe, { work: (_, value) => Effect.succeed(value), between: () => Effect.void, notify: () => Effect.void })
          )
        )
      )
    )
  )

interface Case {
  readonly pause: string
  /** The first step the second process must run. */
  readonly resumesAt: number
}

const cases: ReadonlyArray<Case> = [1, 2, 3, 4, 5, 6].flatMap((k) => [
  { pause: `mid:step-${k}`, resumesAt: k },
  { pause: `after:${k}`, resumesAt: k + 1 }
])

const crash = async ({ pause }: Case) => {
  const { counter, db, dir } = tempCase(pause.replace(/[^a-z0-9]/g, "-"))
  try {
    const common = { db, counter, definition: "reference" as const, runId: "ref", payload: { seed: 5 } }
    // the restarted process loads its modules while the first one runs (a warm standby)
    const second = spawnChild({ ...common, mode: "resume", standby: true })
    const first = spawnChild({ ...common, mode: "start", pause })
    await waitForFile(counter, (text) => text.includes(`paused ${pause}`), 60_000).catch((error) => {
      throw new Error(`${error}\nchild: ${first.output()}`)
    })
    await first.kill()
    await second.next("standby", 60_000)
    second.send("go")
    const result = await second.next("result", 60_000)
    await second.exited
    const lines = fs.readFileSync(counter, "utf8").trim().split("\n").map((line) => line.split(" "))
    return { result, lines, first: first.pid, second: second.pid }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

describe("durable runs survive SIGKILL", () => {
  it("killed inside each step and between each two, the run ends as if never killed", async () => {
    const expected = canonicalJson(await uncrashed())
    const outcomes = await pooled(3, cases.map((c) => () => crash(c)))
    for (const [index, { first, lines, result, second }] of outcomes.entries()) {
      const { pause, resumesAt } = cases[index]!
      expect({ pause, status: result.status, running: result.running, stale: result.stale }).toEqual({
        pause,
        status: "completed",
        running: [],
        stale: []
      })
      expect({ pause, result: canonicalJson(result.result) }).toEqual({ pause, result: expected })
      const starts = (step: number, pid: number) =>
        lines.filter(([word, name, by]) => word === "start" && name === `step-${step}` && by === String(pid)).length
      for (let step = 1; step <= 6; step++) {
        const inFlight = pause === `mid:step-${step}`
        expect({ pause, step, first: starts(step, first), second: starts(step, second) }).toEqual({
          pause,
          step,
          // before the kill: each step up to the one paused in, once
          first: step < resumesAt || inFlight ? 1 : 0,
          // after: only the steps not completed (the one in flight again: at most twice in all)
          second: step >= resumesAt ? 1 : 0
        })
      }
    }
  }, 240_000)

  it("an at-most-once step killed in flight is not run again: the restart finds its intent and reports the outcome unknown", async () => {
    const { counter, db, dir } = tempCase("once")
    try {
      const common = { db, counter, definition: "charge" as const, runId: "pay", payload: {} }
      const first = spawnChild({ ...common, mode: "start", pause: "mid:charge" })
      await waitForFile(counter, (text) => text.includes("paused mid:charge"), 40_000)
      await first.kill()
      const second = spawnChild({ ...common, mode: "resume" })
      const result = await second.next("result", 40_000)
      await second.exited
      expect(result).toMatchObject({ status: "completed", result: { charged: "unknown" } })
      expect((result.result as { message: string }).message).toContain("outcome is unknown")
      const starts = fs.readFileSync(counter, "utf8").split("\n").filter((line) => line.startsWith("start charge "))
      expect(starts).toEqual([`start charge ${first.pid}`])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)
})
