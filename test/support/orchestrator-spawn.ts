/**
 * The parent's side of the orchestrator crash test: spawns
 * test/support/orchestrator-child.ts, reads its JSON lines, SIGKILLs it. Every
 * wait has a bound.
 */
import { spawn } from "node:child_process"
import * as path from "node:path"
import type { Config } from "./orchestrator-child.js"

const root = path.resolve(import.meta.dirname, "..", "..")
const child = path.join(root, "test", "support", "orchestrator-child.ts")

export interface ChildLine {
  readonly event: string
  readonly pid: number
  readonly [key: string]: unknown
}

export interface Child {
  readonly pid: number
  /** The first line with `event`, or a rejection after `timeoutMs` (with the child's output). */
  readonly next: (event: string, timeoutMs: number) => Promise<ChildLine>
  readonly kill: () => Promise<void>
  readonly exited: Promise<number | null>
}

export const spawnChild = (config: Config): Child => {
  const proc = spawn(process.execPath, ["--import", "tsx", child, JSON.stringify(config)], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const lines: Array<ChildLine> = []
  let text = ""
  let buffer = ""
  const listeners = new Set<() => void>()
  proc.stdout.on("data", (data: Buffer) => {
    text += data.toString()
    buffer += data.toString()
    let newline = buffer.indexOf("\n")
    while (newline >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + 1)
      if (line.startsWith("{")) lines.push(JSON.parse(line) as ChildLine)
      newline = buffer.indexOf("\n")
    }
    for (const listener of listeners) listener()
  })
  proc.stderr.on("data", (data: Buffer) => {
    text += data.toString()
  })
  const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)))
  return {
    pid: proc.pid!,
    next: (event, timeoutMs) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const found = lines.find((line) => line.event === event)
          if (found === undefined) return false
          listeners.delete(check)
          clearTimeout(timer)
          resolve(found)
          return true
        }
        const timer = setTimeout(() => {
          listeners.delete(check)
          reject(new Error(`no "${event}" from the child within ${timeoutMs} ms; its output:\n${text}`))
        }, timeoutMs)
        if (!check()) listeners.add(check)
      }),
    kill: async () => {
      proc.kill("SIGKILL")
      await exited
    },
    exited
  }
}
