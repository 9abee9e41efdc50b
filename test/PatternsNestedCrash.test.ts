/**
 * A -> B across a real SIGKILL: the first process dies right after A's KNOW
 * (before B is started) or right after B is started; a second process on the
 * same SQLite state file follows A's trigger again. B exists exactly once, cites
 * A's KNOW, and completes with the summary of A's document.
 */
import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import type * as Records from "../src/domain/Records.js"
import { tempCase } from "./support/durable-spawn.js"
import type { Config } from "./support/patterns-nested-child.js"

const root = path.resolve(import.meta.dirname, "..")
const child = path.join(root, "test", "support", "patterns-nested-child.ts")

/** Runs the child to its exit (bounded); its JSON lines. */
const runChild = (config: Config, timeoutMs: number) =>
  new Promise<{ readonly lines: ReadonlyArray<Record<string, unknown>>; readonly signal: string | null; readonly output: string }>((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child, JSON.stringify(config)], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    proc.stdout.on("data", (d: Buffer) => (output += d.toString()))
    proc.stderr.on("data", (d: Buffer) => (output += d.toString()))
    const timer = setTimeout(() => {
      proc.kill("SIGKILL")
      reject(new Error(`the child did not exit within ${timeoutMs} ms:\n${output}`))
    }, timeoutMs)
    proc.on("exit", (_code, signal) => {
      clearTimeout(timer)
      const lines = output.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>)
      resolve({ lines, signal, output })
    })
  })

const crashThenFollow = async (pause: NonNullable<Config["pause"]>) => {
  const { db, dir } = tempCase(`nested-${pause}`)
  try {
    const first = await runChild({ db, mode: "start", pause }, 60_000)
    const second = await runChild({ db, mode: "resume" }, 60_000)
    return { first, second }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

describe("nested queries across SIGKILL", () => {
  it("killed between A's KNOW and B's start, or just after B's start: B starts exactly once and completes", async () => {
    const outcomes = await Promise.all((["after-know", "after-child-start"] as const).map(async (pause) => ({ pause, ...(await crashThenFollow(pause)) })))
    for (const { first, pause, second } of outcomes) {
      expect({ pause, killed: first.signal }).toEqual({ pause, killed: "SIGKILL" })
      const result = second.lines.find((l) => l.event === "result")
      expect({ pause, result: result === undefined ? second.output : "ok" }).toEqual({ pause, result: "ok" })
      expect({ pause, children: result!.children, status: result!.status, runs: result!.runs }).toEqual({
        pause,
        children: ["a/summary"],
        status: "completed",
        runs: ["a", "a/summary"]
      })
      const thread = result!.thread as ReadonlyArray<Records.QueryRecord>
      expect(thread.find((r) => r.kind === "INTEND")!.body).toMatchObject({ input: { record_id: "a/know" } })
      expect(thread.filter((r) => r.kind === "CALL")).toHaveLength(2)
      expect(thread.find((r) => r.kind === "KNOW")!.body).toMatchObject({ summary: "A two-year study of protein folding under heat stress." })
    }
  }, 150_000)
})
