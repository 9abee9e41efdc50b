/**
 * No test leaves a process behind (vitest's globalSetup): every process the run
 * starts inherits a marker in its environment (PAGANTIC_TEST_RUN, set here
 * before the workers start), and when every file is done, a process that still
 * carries it has outlived its test. Those are killed and named, and the run
 * fails. Linux only (it reads /proc); elsewhere it does nothing.
 */
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"

const MARKER = "PAGANTIC_TEST_RUN"

/** The processes whose environment holds `marker`, with their command lines. */
const carrying = (marker: string): ReadonlyArray<{ readonly pid: number; readonly command: string }> => {
  const found: Array<{ pid: number; command: string }> = []
  for (const entry of fs.readdirSync("/proc")) {
    const pid = Number(entry)
    if (!Number.isInteger(pid) || pid === process.pid) continue
    try {
      if (!fs.readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(marker)) continue
      const command = fs.readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0").join(" ").trim()
      // vitest's own workers, which its pool ends after the teardown
      if (/^node \(vitest \d+\)/.test(command)) continue
      found.push({ pid, command: command.slice(0, 200) })
    } catch {
      // gone, or not ours to read
    }
  }
  return found
}

export default function setup() {
  if (process.platform !== "linux") return
  const marker = `${MARKER}=${randomUUID()}`
  process.env[MARKER] = marker.slice(MARKER.length + 1)
  return async () => {
    // a child stopped by its test's last step may take a moment to exit
    const deadline = Date.now() + 10_000
    let left = carrying(marker)
    while (left.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250))
      left = carrying(marker)
    }
    if (left.length === 0) return
    for (const { pid } of left) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // already gone
      }
    }
    throw new Error(
      `${left.length} process(es) outlived the tests that started them (killed now):\n${left.map((p) => `  ${p.pid} ${p.command}`).join("\n")}`
    )
  }
}
