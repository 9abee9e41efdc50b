/**
 * Human slots across a real SIGKILL (issue #14): a crash then an answer, a crash
 * then no answer with the kill at 40% of a 4 s SLA (the SLA still fires within
 * 1 s of its original absolute deadline), and a second process refused while the
 * first owns the state file. The restarted process is a warm standby (modules
 * loaded, state file not yet opened) so the measured latency is the runs', not
 * the module loader's.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import type { ChildLine } from "./support/durable-spawn.js"
import { spawnChild, tempCase, waitForFile } from "./support/durable-spawn.js"

interface Ticket {
  readonly runId: string
  readonly key: string
  readonly secret: string
  readonly deadline: number
}

const ticketOf = async (counter: string): Promise<Ticket> => {
  const file = `${counter}.secret`
  await waitForFile(file, (text) => text.length > 0, 40_000)
  return JSON.parse(fs.readFileSync(file, "utf8")) as Ticket
}

const recordOf = (result: ChildLine, kind: string, key: string) =>
  (result.records as ReadonlyArray<{ kind: string; key: string; at: number; body: unknown }>).find(
    (r) => r.kind === kind && r.key === key
  )

const starts = (counter: string, step: string) =>
  fs.readFileSync(counter, "utf8").split("\n").filter((line) => line.startsWith(`start ${step} `)).length

describe("human slots across a crash", () => {
  it("crash then answer: the restarted process takes the answer and finishes, prepare ran once", async () => {
    const { counter, db, dir } = tempCase("slot-answer")
    try {
      const common = { db, counter, definition: "approval" as const, runId: "ask", payload: { slaMillis: 60_000 } }
      const first = spawnChild({ ...common, mode: "start" })
      const ticket = await ticketOf(counter)
      const second = spawnChild({ ...common, mode: "resume", standby: true })
      await second.next("standby", 40_000)
      await first.kill()
      second.send("go")
      await second.next("ready", 20_000)
      second.send({ runId: ticket.runId, slot: ticket.key, secret: "wrong", answer: { approved: true, note: "x" } })
      expect(await second.next("respond", 20_000)).toMatchObject({ ok: false, code: "ORCHESTRATION_SLOT_FORBIDDEN" })
      second.send({ runId: ticket.runId, slot: ticket.key, secret: ticket.secret, answer: { approved: true, note: "after the crash" } })
      expect(await second.next("respond", 20_000)).toMatchObject({ ok: true, result: "Accepted" })
      const result = await second.next("result", 20_000)
      expect(result).toMatchObject({ status: "completed", result: { outcome: "approved", note: "after the crash" }, running: [], stale: [] })
      expect(recordOf(result, "DO", "review")?.body).toMatchObject({ slot: "answered" })
      expect(starts(counter, "prepare")).toBe(1)
      expect(starts(counter, "finish")).toBe(1)
      await second.exited
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)

  it("crash then no answer: killed at 40% of a 4 s SLA, the slot expires within 1 s of its original deadline", async () => {
    const { counter, db, dir } = tempCase("slot-expire")
    try {
      const common = { db, counter, definition: "approval" as const, runId: "ask", payload: { slaMillis: 4_000 } }
      const second = spawnChild({ ...common, mode: "resume", standby: true })
      await second.next("standby", 40_000)
      const first = spawnChild({ ...common, mode: "start" })
      const ticket = await ticketOf(counter)
      const killAt = ticket.deadline - 4_000 + 1_600
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, killAt - Date.now())))
      await first.kill()
      second.send("go")
      const result = await second.next("result", 20_000)
      expect(result).toMatchObject({ status: "completed", result: { outcome: "expired", deadline: ticket.deadline } })
      const expired = recordOf(result, "DO", "review")
      expect(expired?.body).toMatchObject({ slot: "expired" })
      // fired at the original absolute deadline, not 4 s after the restart
      expect(expired!.at).toBeGreaterThanOrEqual(ticket.deadline)
      expect(expired!.at - ticket.deadline).toBeLessThan(1_000)
      expect(starts(counter, "prepare")).toBe(1)
      await second.exited
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)

  it("a second process on an owned state file fails fast, naming the owner", async () => {
    const { counter, db, dir } = tempCase("owner")
    try {
      const common = { db, counter, definition: "approval" as const, runId: "ask", payload: { slaMillis: 60_000 } }
      const first = spawnChild({ ...common, mode: "start" })
      await ticketOf(counter)
      const second = spawnChild({ ...common, mode: "resume" })
      const refused = await second.next("failed", 40_000)
      expect(refused).toMatchObject({ code: "ORCHESTRATION_STATE_UNAVAILABLE" })
      expect(refused.message).toContain(`process ${first.pid}`)
      await second.exited
      await first.kill()
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 90_000)
})
