/**
 * The parent's side of the crash tests: spawns test/support/durable-child.ts on
 * a state file, reads its JSON lines, waits for lines of its counter file, and
 * SIGKILLs it. Every wait has a bound.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import type { Config } from "./durable-child.js"

const root = path.resolve(import.meta.dirname, "..", "..")
const child = path.join(root, "test", "support", "durable-child.ts")
const require = createRequire(import.meta.url)

let bundled: string | undefined
/**
 * How to start the child: its sources bundled once per test process with
 * esbuild (tsx's own compiler), so a start costs ~0.4 s of CPU instead of ~2 s
 * of tsx compiling each module; tsx itself when esbuild cannot be loaded.
 */
const childArgs = (): ReadonlyArray<string> => {
  if (bundled === undefined) {
    try {
      const esbuild = require("esbuild") as {
        buildSync: (options: Record<string, unknown>) => unknown
      }
      const out = path.join(os.tmpdir(), `pagantic-durable-child-${process.pid}.mjs`)
      esbuild.buildSync({
        entryPoints: [child],
        bundle: true,
        platform: "node",
        format: "esm",
        outfile: out,
        // the native driver stays outside the bundle, imported from this checkout's node_modules
        plugins: [{
          name: "native-driver",
          setup: (build: { onResolve: (options: { filter: RegExp }, f: () => { path: string; external: boolean }) => void }) =>
            build.onResolve({ filter: /^better-sqlite3$/ }, () => ({ path: require.resolve("better-sqlite3"), external: true }))
        }],
        logLevel: "error",
        banner: { js: 'import { createRequire as __createRequire } from "node:module"; const require = __createRequire(import.meta.url);' }
      })
      process.once("exit", () => fs.rmSync(out, { force: true }))
      bundled = out
    } catch {
      bundled = ""
    }
  }
  return bundled === "" ? ["--import", "tsx", child] : [bundled]
}

export interface ChildLine {
  readonly event: string
  readonly at: number
  readonly pid: number
  readonly [key: string]: unknown
}

export interface Child {
  readonly pid: number
  /** The next line with `event` (already received or to come), or a rejection after `timeoutMs`. */
  readonly next: (event: string, timeoutMs: number) => Promise<ChildLine>
  readonly send: (line: unknown) => void
  readonly kill: () => Promise<void>
  readonly exited: Promise<number | null>
  readonly output: () => string
}

export const spawnChild = (config: Config): Child => {
  const proc = spawn(process.execPath, [...childArgs(), JSON.stringify(config)], {
    cwd: root,
    stdio: ["pipe", "pipe", "pipe"]
  })
  const lines: Array<ChildLine> = []
  const taken = new Set<ChildLine>()
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
          const found = lines.find((line) => line.event === event && !taken.has(line))
          if (found === undefined) return false
          taken.add(found)
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
    send: (line) => proc.stdin.write(`${JSON.stringify(line)}\n`),
    kill: async () => {
      proc.kill("SIGKILL")
      await exited
    },
    exited
  }
}

/** Waits until `file`'s text satisfies `done` (polled every 10 ms), or rejects after `timeoutMs`. */
export const waitForFile = (file: string, done: (text: string) => boolean, timeoutMs: number): Promise<string> =>
  new Promise((resolve, reject) => {
    const started = Date.now()
    const poll = () => {
      const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
      if (done(text)) return resolve(text)
      if (Date.now() - started > timeoutMs) return reject(new Error(`${file} did not reach the expected state within ${timeoutMs} ms:\n${text}`))
      setTimeout(poll, 10)
    }
    poll()
  })

/** A fresh folder under the OS's temp dir, for one case's state file and counter. */
export const tempCase = (name: string) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `pagantic-durable-${name}-`))
  return { dir, db: path.join(dir, "state.db"), counter: path.join(dir, "counter.txt") }
}

/** Runs `tasks` at most `width` at a time. */
export const pooled = async <A>(width: number, tasks: ReadonlyArray<() => Promise<A>>): Promise<Array<A>> => {
  const results: Array<A> = new Array(tasks.length)
  let next = 0
  const worker = async () => {
    while (next < tasks.length) {
      const index = next++
      results[index] = await tasks[index]!()
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, tasks.length) }, worker))
  return results
}
