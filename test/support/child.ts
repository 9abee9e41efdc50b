/**
 * A child process for the crash tests: started with `args`, its stdout read as
 * JSON lines (`{"event": ...}`; other lines only kept in its output), each wait
 * bounded, and a SIGKILL that resolves once the process is gone.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

/** The checkout: the nearest directory above this module with a package.json (also when the benchmarks run compiled, from .tmp/bench). */
export const root = ((): string => {
  let dir = import.meta.dirname
  while (!fs.existsSync(path.join(dir, "package.json"))) {
    const parent = path.dirname(dir)
    if (parent === dir) return path.resolve(import.meta.dirname, "..", "..")
    dir = parent
  }
  return dir
})()

export interface Line {
  readonly event: string
  readonly [key: string]: unknown
}

export interface Child<L extends Line> {
  readonly pid: number
  /** The next line with `event` (see `consume`), or a rejection after `timeoutMs` (with the child's output). */
  readonly next: (event: string, timeoutMs: number) => Promise<L>
  /** Writes one line to the child's stdin. */
  readonly send: (line: string) => void
  readonly kill: () => Promise<void>
  readonly exited: Promise<number | null>
  readonly output: () => string
}

export interface Options {
  /**
   * true: each line is returned by `next` once, so two waits for one event get
   * two lines; false: `next` returns the first line with that event every time.
   */
  readonly consume: boolean
}

export const spawnLines = <L extends Line>(args: ReadonlyArray<string>, options: Options): Child<L> => {
  const proc = spawn(process.execPath, [...args], { cwd: root, stdio: ["pipe", "pipe", "pipe"] })
  const lines: Array<L> = []
  const taken = new Set<L>()
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
      if (line.startsWith("{")) lines.push(JSON.parse(line) as L)
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
          const found = lines.find((line) => line.event === event && !taken.has(line))
          if (found === undefined) return false
          if (options.consume) taken.add(found)
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

/** A TypeScript child under test/support (run through tsx) given `config` as its one argument. */
export const spawnTsx = <L extends Line>(file: string, config: unknown, options: Options): Child<L> =>
  spawnLines<L>(["--import", "tsx", path.join(root, "test", "support", file), JSON.stringify(config)], options)
