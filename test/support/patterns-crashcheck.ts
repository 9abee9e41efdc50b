/**
 * The crash check shared by the patterns' SIGKILL tests: an uncrashed reference
 * run in memory, then for each boundary a first process killed there (the parent
 * SIGKILLs it mid-call; it SIGKILLs itself right after a record) and a second one,
 * loaded in advance as a warm standby, resuming on the same state file.
 *
 * What holds for each boundary: the run completes with the same KNOW and the same
 * LEARN bodies as the uncrashed one; no CALL whose DO the first process recorded
 * is dispatched again (per responder: the second asks it at most as often as the
 * uncrashed run did, less the DOs the first recorded); only the call in flight at
 * the kill may run twice.
 */
import { expect } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import { canonicalJson } from "../../src/domain/Json.js"
import type * as Records from "../../src/domain/Records.js"
import * as InMemoryRuns from "../../src/layers/InMemoryRuns.js"
import * as Orchestration from "../../src/programs/Orchestration.js"
import * as Runs from "../../src/services/Runs.js"
import { pooled, tempCase, waitForFile } from "./durable-spawn.js"
import { answers, boundaries, layer, Queries, queries } from "./patterns-crash.js"
import type { CrashPattern } from "./patterns-crash.js"
import { spawnChild } from "./patterns-spawn.js"

const runId = "q"

/** The run never killed, in memory: its result, its thread and how often each responder was asked. */
const uncrashed = (pattern: CrashPattern) => {
  const asked = new Map<string, number>()
  const count = (responder: string) => Effect.sync(() => void asked.set(responder, (asked.get(responder) ?? 0) + 1))
  return Effect.runPromise(
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      yield* Orchestration.start(runs, Queries, queries[pattern], { id: runId })
      const info = yield* runs.await(runId)
      expect({ pattern, status: info.status }).toEqual({ pattern, status: "completed" })
      return { result: info.result, thread: yield* Orchestration.thread(runs, runId), asked }
    }).pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Queries] }).pipe(Layer.provide(layer(count)))))
  )
}

const learnBodies = (thread: ReadonlyArray<Records.QueryRecord>) => canonicalJson(thread.filter((r) => r.kind === "LEARN"))

const crash = async (pattern: CrashPattern, pause: string) => {
  const { counter, db, dir } = tempCase(`${pattern}-${pause.replace(/[^a-z0-9]/g, "-")}`)
  try {
    const common = { db, counter, pattern, runId }
    // the second process loads while the first runs (a warm standby), and opens the state file after the kill
    const second = spawnChild({ ...common, mode: "resume", standby: true })
    const first = spawnChild({ ...common, mode: "start", pause })
    if (pause.startsWith("mid:")) {
      await waitForFile(counter, (text) => text.includes(`paused ${pause}`), 60_000).catch((error) => {
        throw new Error(`${error}\nchild: ${first.output()}`)
      })
      await first.kill()
    } else {
      await Promise.race([
        first.exited,
        new Promise((_, reject) => setTimeout(() => reject(new Error(`the child did not kill itself at ${pause}:\n${first.output()}`)), 60_000))
      ])
    }
    await second.next("standby", 60_000)
    second.send("go")
    const result = await second.next("result", 60_000).catch((error) => {
      throw new Error(`${error}\nfirst: ${first.output()}`)
    })
    await second.exited
    const lines = fs.readFileSync(counter, "utf8").trim().split("\n").map((line) => line.split(" "))
    return { pause, result, lines, first: first.pid, second: second.pid }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

export const check = async (pattern: CrashPattern) => {
  const expected = await uncrashed(pattern)
  const outcomes = await pooled(2, boundaries[pattern].map((pause) => () => crash(pattern, pause)))
  for (const { first, lines, pause, result, second } of outcomes) {
    expect({ pause, status: result.status, running: result.running, stale: result.stale }).toEqual({ pause, status: "completed", running: [], stale: [] })
    // the same KNOW and the same LEARN bodies as the uncrashed run
    expect({ pause, know: canonicalJson(result.result) }).toEqual({ pause, know: canonicalJson(expected.result) })
    const thread = result.thread as ReadonlyArray<Records.QueryRecord>
    expect({ pause, learns: learnBodies(thread) }).toEqual({ pause, learns: learnBodies(expected.thread) })
    // no responder asked again once its DO was recorded by the first process
    const calls = new Map(thread.filter((r): r is Records.Call => r.kind === "CALL").map((c) => [c.id, c.body.responder.id]))
    const doneByFirst = lines
      .filter(([word, key, by]) => word === "record" && key!.startsWith("DO:") && /\/do\/\d+$/.test(key!) && by === String(first))
      .map(([, key]) => calls.get(`${runId}/${key!.slice(3).replace("/do/", "/call/")}`))
    const starts = (responder: string, pid: number) =>
      lines.filter(([word, name, by]) => word === "start" && name === responder && by === String(pid)).length
    if (pause.startsWith("record:")) {
      const seen = lines.some(([word, key, by]) => word === "record" && key === `DO:${pause.slice("record:".length)}` && by === String(first))
      expect({ pause, killedAfterTheRecord: seen }).toEqual({ pause, killedAfterTheRecord: true })
    }
    // a responder asked E times in the uncrashed run, whose DOs the first process recorded d times, is
    // asked at most E - d times by the second (a re-dispatched CALL would make it more); in all, at most
    // once more than E (the call in flight at the kill)
    for (const responder of Object.keys(answers)) {
      const expectedAsks = expected.asked.get(responder) ?? 0
      const done = doneByFirst.filter((r) => r === responder).length
      expect({ pause, responder, second: starts(responder, second) <= expectedAsks - done }).toEqual({ pause, responder, second: true })
      expect({ pause, responder, atMostOnceMore: starts(responder, first) + starts(responder, second) <= expectedAsks + 1 }).toEqual({
        pause,
        responder,
        atMostOnceMore: true
      })
    }
  }
  return outcomes.length
}

