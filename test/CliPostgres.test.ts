/**
 * The CLI's choice of durable store, as real processes (bin/pagantic.js): a
 * Postgres database (`--state-url`, PAGANTIC_STATE_URL) for `migrate`, `runs`
 * and `serve`, on a throwaway embedded Postgres (test/support/postgres.ts; those
 * cases skip, with the reason printed, only where none can start); the refusals
 * (both flags, a malformed URL, an unreachable database: the password never
 * printed); `pagantic query --state FILE` as a durable run of a SQLite file; and
 * the CLI module loading neither SQLite nor the Postgres client.
 */
import { execFile, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"
import * as Postgres from "./support/postgres.js"
import { shared } from "./support/postgres-shared.js"
import * as ServeLog from "./support/serve-log.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const launcher = path.join(root, "bin", "pagantic.js")

interface Completed {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** The variables that choose a store, unset: each case sets its own. */
const clean = { PAGANTIC_STATE: undefined, PAGANTIC_STATE_URL: undefined, NO_COLOR: "1" }

const launch = (args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}, timeout = 60_000): Promise<Completed> =>
  new Promise((resolve) => {
    const merged: Record<string, string | undefined> = { ...process.env, ...clean, ...env }
    for (const key of Object.keys(merged)) if (merged[key] === undefined) delete merged[key]
    execFile(process.execPath, [launcher, ...args], { cwd: root, timeout, env: merged }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : null
      resolve({ code, stdout, stderr })
    })
  })

const tempDir = (name: string) => fs.mkdtempSync(path.join(os.tmpdir(), `pagantic-${name}-`))

/** A query the bundled model answers (a sentiment label), as `serve` and `pagantic query` take it. */
const sentimentQuery = {
  kind: "infer.query.v1",
  input: { inline: "The soup was cold." },
  responders: [{ kind: "llm", model: "~model" }],
  answer_shape: { kind: "core.classification.v1", labels: ["positive", "negative", "neutral"] }
}

/** Every module URL resolved while `entry` (a file under src/) loads, in a fresh Node process. */
const loaded = async (entry: string): Promise<ReadonlyArray<string>> => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ["--import", "tsx", path.join(root, "test/support/loads.mjs"), path.join(root, "src", entry)],
    { cwd: root, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }
  )
  return JSON.parse(stdout) as ReadonlyArray<string>
}

const sqliteModules = (urls: ReadonlyArray<string>) =>
  urls.filter((u) => /\/node_modules\/(@effect\/sql-sqlite-node|better-sqlite3)\//.test(u))
const pgModules = (urls: ReadonlyArray<string>) => urls.filter((u) => /\/node_modules\/(@effect\/sql-pg|pg|pg-pool|postgres)\//.test(u))

describe("the store choice (subprocess, no database needed)", () => {
  it("both flags at once: exit 1, one line naming both, nothing opened", async () => {
    const dir = tempDir("both")
    const run = await launch(["runs", "list", "--state", path.join(dir, "s.db"), "--state-url", "postgres://u:hunter2pw@127.0.0.1/db"])
    expect({ code: run.code, stderr: run.stderr, stdout: run.stdout }).toEqual({
      code: 1,
      stderr: "error: give --state FILE (SQLite) or --state-url URL (Postgres), not both\n",
      stdout: ""
    })
    expect(fs.existsSync(path.join(dir, "s.db"))).toBe(false)
  }, 90_000)

  it("a malformed URL, from the flag or the variable: CONFIG_INVALID_REQUEST naming it, the password not shown", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, Record<string, string>, string]> = [
      [["migrate", "--state-url", "mysql://admin:hunter2pw@db.example/x"], {}, "error: CONFIG_INVALID_REQUEST: --state-url: not a Postgres URL (its scheme is \"mysql:\")"],
      [["runs", "list"], { PAGANTIC_STATE_URL: "postgres://admin:hunter2pw@/x" }, "error: CONFIG_INVALID_REQUEST: PAGANTIC_STATE_URL: not a URL (29 characters, not shown)"],
      [["runs", "list", "--state-url", "postgres:///x"], {}, "error: CONFIG_INVALID_REQUEST: --state-url: the URL names no host"],
      // parsed as a URL of scheme "admin:": only the scheme is quoted
      [["runs", "list", "--state-url", "admin:hunter2pw at db"], {}, "error: CONFIG_INVALID_REQUEST: --state-url: not a Postgres URL (its scheme is \"admin:\")"],
      [["runs", "list", "--state-url", "postgres:admin:hunter2pw@db"], {}, "error: CONFIG_INVALID_REQUEST: --state-url: the URL names no host"]
    ]
    for (const [args, env, message] of cases) {
      const run = await launch(args, env)
      expect({ args, code: run.code }).toEqual({ args, code: 1 })
      expect(run.stderr).toContain(message)
      expect(run.stderr + run.stdout).not.toContain("hunter2pw")
    }
  }, 150_000)

  it("an unreachable database: ORCHESTRATION_STATE_UNAVAILABLE, no stack, the password not shown", async () => {
    const port = await Postgres.freePort()
    const run = await launch(["runs", "list", "--state-url", `postgres://admin:hunter2pw@127.0.0.1:${port}/x`])
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(/^error: ORCHESTRATION_STATE_UNAVAILABLE: cannot connect to the Postgres state database/)
    expect(run.stderr.trim().split("\n")).toHaveLength(1)
    expect(run.stderr + run.stdout).not.toContain("hunter2pw")
  }, 90_000)

  it("serve --state-url with a malformed PAGANTIC_RUNNER_PORT: CONFIG_INVALID_REQUEST naming it, before anything starts", async () => {
    const run = await launch(["serve", "--state-url", "postgres://admin:hunter2pw@127.0.0.1:1/x"], { PAGANTIC_RUNNER_PORT: "eighty", PAGANTIC_PORT: "0" })
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(/^error: CONFIG_INVALID_REQUEST: PAGANTIC_RUNNER_PORT: /)
    expect(run.stderr + run.stdout).not.toContain("hunter2pw")
    expect(run.stdout).not.toContain("Listening on")
  }, 90_000)

  it("--state wins over PAGANTIC_STATE_URL (a flag over the environment)", async () => {
    const file = path.join(tempDir("flag-wins"), "s.db")
    const run = await launch(["migrate", "--state", file], { PAGANTIC_STATE_URL: "postgres://admin:hunter2pw@127.0.0.1:1/x" })
    expect(run.stderr).toBe("")
    expect(run.stdout).toBe(`state tables ready in ${file}\n`)
    expect(fs.existsSync(file)).toBe(true)
  }, 90_000)

  it("importing the CLI loads neither SQLite nor the Postgres client, nor does PostgresRuns until its layer is built (the check can fail: a module importing pg is seen)", async () => {
    const cli = await loaded("adapters/Cli.ts")
    expect(cli.some((u) => u.endsWith("/src/adapters/cli/RunsState.ts"))).toBe(true)
    expect(sqliteModules(cli)).toEqual([])
    expect(pgModules(cli)).toEqual([])
    expect(cli.filter((u) => u.endsWith("/src/adapters/cli/DurableState.ts"))).toEqual([])
    expect(pgModules(await loaded("layers/PostgresRuns.ts"))).toEqual([])
    expect(pgModules(await loaded("../test/fixtures/loads-pg.ts")).length).toBeGreaterThan(0)
  }, 150_000)
})

describe("pagantic query | task --state FILE (subprocess, bundled model)", () => {
  it("is a durable run of the SQLite file: its id printed, runs show finds it completed", async () => {
    const dir = tempDir("query-state")
    const file = path.join(dir, "s.db")
    const queryFile = path.join(dir, "q.json")
    fs.writeFileSync(queryFile, JSON.stringify(sentimentQuery))
    const run = await launch(["query", "--threads", "1", "--state", file, queryFile], {}, 90_000)
    expect(run.stderr).not.toContain("error:")
    expect(run.code).toBe(0)
    const runId = /^run: (\S+) \(completed\)$/m.exec(run.stdout)?.[1]
    expect(runId, run.stdout).toEqual(expect.any(String))
    expect(run.stdout).toMatch(/^answer: (positive|negative|neutral)$/m)
    const shown = await launch(["runs", "show", "--state", file, "--json", runId!])
    expect(shown.stderr).toBe("")
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: runId, status: "completed", definition: "infer.query.v1" })
  }, 200_000)

  it("a query that asks a human is refused before anything is recorded (nobody could answer its slot)", async () => {
    const dir = tempDir("query-human")
    const file = path.join(dir, "s.db")
    const queryFile = path.join(dir, "q.json")
    fs.writeFileSync(queryFile, JSON.stringify({ ...sentimentQuery, responders: [{ kind: "actor", did: "did:example:alice" }] }))
    const run = await launch(["query", "--state", file, queryFile])
    expect(run.code).toBe(1)
    expect(run.stderr).toContain("error: the query asks a human (an actor responder)")
    expect(run.stdout).toBe("")
    expect(fs.existsSync(file)).toBe(false)
  }, 90_000)

  it("task --state FILE: the request is a durable run (pagantic.request), its id printed, the tasks as without it", async () => {
    const file = path.join(tempDir("task-state"), "s.db")
    const run = await launch(
      ["task", "--threads", "1", "--state", file, 'Is this review positive or negative: "The soup was cold." and then add 5 and 8.'],
      {},
      90_000
    )
    expect(run.stderr).not.toContain("error:")
    expect(run.code).toBe(0)
    const runId = /^run: (\S+)$/m.exec(run.stdout)?.[1]
    expect(runId, run.stdout).toEqual(expect.any(String))
    expect(run.stdout).toContain("t2 (calculator): 13")
    const shown = await launch(["runs", "show", "--state", file, "--json", runId!])
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: runId, status: "completed", definition: "pagantic.request" })
  }, 200_000)

  it("without a store it runs in memory: no run id", async () => {
    const dir = tempDir("query-memory")
    const queryFile = path.join(dir, "q.json")
    fs.writeFileSync(queryFile, JSON.stringify(sentimentQuery))
    const run = await launch(["query", "--threads", "1", queryFile], {}, 90_000)
    expect(run.code).toBe(0)
    expect(run.stdout).toMatch(/^answer: /m)
    expect(run.stdout).not.toMatch(/^run: /m)
  }, 120_000)
})

// ---------------------------------------------------------------------------
// On Postgres
// ---------------------------------------------------------------------------

const server = shared()
const skipped = "skipped" in server ? server.skipped : undefined
if (skipped !== undefined) console.warn(`CliPostgres: the Postgres cases are SKIPPED: ${skipped}`)
const pg = "skipped" in server ? undefined : server

/** The URL as the CLI shows it: the password hidden. */
const shown = (url: string) => url.replace(/:[^:@/]*@/, ":***@")
const passwordOf = (url: string) => new URL(url).password

/** The address a `pagantic serve` child logs and the admin key of its page link, within 60 s. */
const listeningAddress = async (child: ReturnType<typeof spawn>, output: { text: string }) => {
  const { address, key } = await ServeLog.listening(child, { withKey: true, withinMs: 60_000, output })
  return { address, key: key! }
}

describe.skipIf(pg === undefined)("on Postgres (subprocess, embedded Postgres)", () => {
  it("migrate --state-url creates the tables and says where (password hidden); runs list through PAGANTIC_STATE_URL", async () => {
    const url = await Postgres.createDatabase(pg!, "cli_migrate")
    expect(await Postgres.tables(url)).toEqual([])
    const run = await launch(["migrate", "--state-url", url])
    expect(run.stderr).toBe("")
    expect(run.code).toBe(0)
    expect(run.stdout).toContain(`state tables ready in ${shown(url)}`)
    expect(run.stdout).not.toContain(passwordOf(url))
    const tables = await Postgres.tables(url)
    expect(tables.length).toBeGreaterThan(3)
    expect(tables.some((t) => t.includes("runs"))).toBe(true)
    expect(tables.some((t) => t.includes("messages"))).toBe(true)
    // again: nothing to create, the same answer
    expect((await launch(["migrate", "--state-url", url])).code).toBe(0)
    // a command's runner leaves: the process exits by itself (a connection left open kept it alive)
    const started = Date.now()
    const listed = await launch(["runs", "list"], { PAGANTIC_STATE_URL: url }, 40_000)
    expect(listed.stderr).toBe("")
    expect(listed.stdout).toBe(`no runs in ${shown(url)}\n`)
    expect(listed.code).toBe(0)
    expect(Date.now() - started).toBeLessThan(40_000)
  }, 200_000)

  it("serve --state-url: a query is a durable run on Postgres, read under /v1/runs and by pagantic runs beside the server", async () => {
    const url = await Postgres.createDatabase(pg!, "cli_serve")
    const runnerPort = await Postgres.freePort()
    // on Postgres the admin key a first start makes is kept in $PAGANTIC_HOME/serve.key
    const home = tempDir("home")
    const child = spawn(process.execPath, [launcher, "serve", "--threads", "1", "--state-url", url], {
      cwd: root,
      env: { ...process.env, ...clean, PAGANTIC_STATE: "", PAGANTIC_STATE_URL: "", PAGANTIC_PORT: "0", PAGANTIC_RUNNER_PORT: String(runnerPort), PAGANTIC_HOME: home },
      stdio: ["ignore", "pipe", "pipe"]
    })
    const output = { text: "" }
    try {
      const { address, key } = await listeningAddress(child, output)
      expect(fs.readFileSync(path.join(home, "serve.key"), "utf8").trim()).toBe(key)
      const auth = { authorization: `Bearer ${key}` }
      const refused = await fetch(`${address}/v1/runs`, { signal: AbortSignal.timeout(10_000) })
      expect(refused.status).toBe(401)
      const reply = await fetch(`${address}/v1/queries`, {
        method: "POST",
        headers: { "content-type": "application/json", ...auth },
        body: JSON.stringify(sentimentQuery),
        signal: AbortSignal.timeout(60_000)
      })
      const body = await reply.json() as { query?: { runId?: string }; error?: unknown }
      expect(reply.status, JSON.stringify(body).slice(0, 900)).toBe(200)
      const runId = body.query?.runId
      expect(runId).toEqual(expect.any(String))
      const list = await fetch(`${address}/v1/runs`, { headers: auth, signal: AbortSignal.timeout(10_000) })
      expect(list.status).toBe(200)
      expect(JSON.stringify(await list.json())).toContain(runId!)
      const one = await fetch(`${address}/v1/runs/${runId}`, { headers: auth, signal: AbortSignal.timeout(10_000) })
      expect(await one.json()).toMatchObject({ id: runId, status: "completed" })
      // recorded in the database itself
      const rows = await Postgres.query<{ n: number }>(url, "SELECT COUNT(*)::int AS n FROM pagantic_runs WHERE id = $1", [runId])
      expect(rows[0]?.n).toBe(1)
      // another process, a runner of the same database beside the server
      const listed = await launch(["runs", "list", "--state-url", url], {}, 40_000)
      expect(listed.stderr).toBe("")
      expect(listed.stdout).toContain(`${runId}  completed  infer.query.v1`)
      expect(listed.code).toBe(0)
      const one2 = await launch(["runs", "show", "--state-url", url, runId!], {}, 40_000)
      expect(one2.stdout).toContain("status: completed")
      expect(one2.code).toBe(0)
      // pruned beside the server, in one transaction: the run ended "ten days ago" goes, the server lists none
      await Postgres.query(url, "UPDATE pagantic_runs SET updated_at = updated_at - $1 WHERE id = $2", [10 * 86_400_000, runId])
      const pruned = await launch(["runs", "prune", "--older-than", "7d", "--state-url", url], {}, 40_000)
      expect(pruned.stdout).toContain("pruned 1 run(s) that ended more than 7d ago")
      expect(pruned.code).toBe(0)
      const after = await fetch(`${address}/v1/runs`, { headers: auth, signal: AbortSignal.timeout(10_000) })
      expect(await after.json()).toEqual({ runs: [] })
      expect(output.text).not.toContain(passwordOf(url))
    } finally {
      // stopped before the database is: a server whose database went away first may never finish shutting down
      const exited = new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", () => resolve())))
      child.kill("SIGTERM")
      const stopped = await Promise.race([exited.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 15_000))])
      if (!stopped) child.kill("SIGKILL")
      expect(stopped, "serve exits within 15 s of SIGTERM").toBe(true)
    }
  }, 300_000)
})
