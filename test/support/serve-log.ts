/**
 * What a `pagantic serve` child logs once it listens: "Listening on URL", and,
 * unless it runs with --no-auth, "Runs page: URL/#key=KEY (the admin key, kept
 * in FILE)". `listening` waits for them (bounded), and fails when the child
 * exits first or logs a page link at another address.
 */
import type { ChildProcess } from "node:child_process"
import { spawn } from "node:child_process"

export interface Listening {
  readonly address: string
  /** The admin key of the page link (undefined with --no-auth, which logs no link). */
  readonly key: string | undefined
}

const address = /Listening on (http:\/\/\S+)/
const pageLink = /Runs page: (http:\/\/\S+)\/#key=(\S+) \(the admin key, kept in /

/** The child's address, and the key of its page link when `withKey`, within `withinMs`; `output` gathers what it logs. */
export const listening = (
  child: ChildProcess,
  options: { readonly withKey: boolean; readonly withinMs: number; readonly output?: { text: string } }
): Promise<Listening> => {
  const output = options.output ?? { text: "" }
  return new Promise<Listening>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no address${options.withKey ? " and page link" : ""} logged in ${options.withinMs / 1000} s: ${output.text}`)),
      options.withinMs
    )
    const read = (chunk: Buffer) => {
      output.text += chunk.toString()
      const listened = address.exec(output.text)
      if (listened === null) return
      if (!options.withKey) {
        clearTimeout(timer)
        return resolve({ address: listened[1]!, key: undefined })
      }
      const link = pageLink.exec(output.text)
      if (link === null) return
      clearTimeout(timer)
      if (link[1] !== listened[1]) return reject(new Error(`the page link names ${link[1]}, the server listens on ${listened[1]}`))
      resolve({ address: listened[1]!, key: decodeURIComponent(link[2]!) })
    }
    child.stdout?.on("data", read)
    child.stderr?.on("data", read)
    child.on("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`exited with ${code}: ${output.text}`))
    })
  })
}

/**
 * `node launcher serve ...args` (no key, so no page link awaited) in `cwd` with
 * `env`: its address once it listens (within 40 s), what it logged, and `stop`
 * (SIGTERM, then SIGKILL after 15 s), which resolves when it has exited.
 */
export const spawnServe = (launcher: string, args: ReadonlyArray<string>, options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv }) => {
  const child = spawn(process.execPath, [launcher, "serve", ...args], { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"] })
  const output = { text: "" }
  const address = listening(child, { withKey: false, withinMs: 40_000, output }).then((l) => l.address)
  const stop = async () => {
    if (child.exitCode !== null) return
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
    child.kill("SIGTERM")
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000)
    await exited
    clearTimeout(timer)
  }
  return { listening: address, output, stop }
}
