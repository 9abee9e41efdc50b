/**
 * The parent's side of the patterns' crash tests: spawns
 * test/support/patterns-child.ts, reads its JSON lines (each wait bounded), and
 * SIGKILLs it.
 */
import { spawn } from "node:child_process"
import * as path from "node:path"
import type { Config } from "./patterns-child.js"

const root = path.resolve(import.meta.dirname, "..", "..")
const child = path.join(root, "test", "support", "patterns-child.ts")

export interface ChildLine {
  readonly event: string
  readonly pid: number
  readonly [key: string]: unknown
}

export interface Child {
  readonly pid: number
  readonly next: (event: string, timeoutMs: number) => Promise<ChildLine>
  readonly send: (line: string) => void
  readonly kill: () => Promise<void>
  readonly exited: Promise<number | null>
  readonly output: () => string
}

export const spawnChild = (config: Config): Child => {
  const proc = spawn(process.execPath, ["--import", "tsx", child, JSON.stringify(config)], { cwd: root, stdio: ["pipe", "pipe", "pipe"] })
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
    output: () => text,
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
    send: (line) => proc.stdin.write(`${line}\n`),
    kill: async () => {
      proc.kill("SIGKILL")
      await exited
    },
    exited
  }
}
