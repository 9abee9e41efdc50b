/**
 * The parent's side of the crash tests: spawns test/support/durable-child.ts on
 * a state file, reads its JSON lines, waits for lines of its counter file, and
 * SIGKILLs it. Every wait has a bound.
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { type Child as AnyChild, root, spawnLines } from "./child.js"
import type { Config } from "./durable-child.js"

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

export interface Child extends Omit<AnyChild<ChildLine>, "send"> {
  /** Writes `line` as one JSON line to the child's stdin. */
  readonly send: (line: unknown) => void
}

/** `next` returns each line once: two waits for one event get two lines. */
export const spawnChild = (config: Config): Child => {
  const child = spawnLines<ChildLine>([...childArgs(), JSON.stringify(config)], { consume: true })
  return { ...child, send: (line) => child.send(JSON.stringify(line)) }
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
