/**
 * The durable commands on Postgres join as clients, not runners: a server runner
 * (in this process) holds a run waiting on a slot; `pagantic runs list`, `runs
 * show` and `respond` run against the same database as child processes, several
 * times, while the cluster's runner table and the shard locks (Postgres advisory
 * locks) are sampled. No command ever registers as a runner or holds a shard; the
 * answer a command gives reaches the run the server owns, which completes there,
 * its step run once (an external counter: a file every execution of the step
 * appends to, whichever process runs it). Skipped, with the reason printed, only
 * where no Postgres can start (test/support/postgres.ts). A second waiting run is
 * cancelled by `pagantic runs cancel`.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as PostgresRuns from "../src/layers/PostgresRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Review, secretOf } from "./support/durable-runs.js"
import * as Postgres from "./support/postgres.js"
import { shared } from "./support/postgres-shared.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const counter = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-client-")), "notify.log")

/**
 * A run that asks a human, appending `<run id> <secret>` to the counter file in a
 * journaled step, and ends with the answer's note. The child processes define the
 * same (`childScript`), appending to the same file.
 */
const Ticket = Runs.define({
  name: "ticket",
  payload: Schema.Struct({ topic: Schema.String }),
  success: Schema.Struct({ outcome: Schema.String }),
  answers: [Review],
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const slot = yield* durable.slot(Review, { sla: "1 hour" })
      yield* durable.step("notify", Schema.Void, Effect.sync(() => fs.appendFileSync(counter, `${durable.runId} ${secretOf(slot)}\n`)))
      const answer = yield* durable.awaitAnswer(Review, slot)
      return { outcome: answer._tag === "Answered" ? `answered:${answer.value.note}` : answer._tag }
    })
})

/**
 * The CLI as `bin/pagantic.js` runs it (NodeRuntime.runMain, Node's stdio), with
 * `Ticket` added through CliRuns and a scripted engine: the arguments come from
 * PAGANTIC_TEST_ARGS, the counter file from PAGANTIC_TEST_COUNTER.
 */
const childScript = `
import * as fs from "node:fs"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Cli from "./src/adapters/Cli.ts"
import * as ScriptedEngine from "./src/layers/ScriptedEngine.ts"
import { Durable } from "./src/services/Durable.ts"
import { Engine } from "./src/services/Engine.ts"
import * as Runs from "./src/services/Runs.ts"
import { Review, secretOf } from "./test/support/durable-runs.ts"
const Ticket = Runs.define({
  name: "ticket",
  payload: Schema.Struct({ topic: Schema.String }),
  success: Schema.Struct({ outcome: Schema.String }),
  answers: [Review],
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const slot = yield* durable.slot(Review, { sla: "1 hour" })
      yield* durable.step("notify", Schema.Void, Effect.sync(() => fs.appendFileSync(process.env.PAGANTIC_TEST_COUNTER, durable.runId + " " + secretOf(slot) + "\\n")))
      const answer = yield* durable.awaitAnswer(Review, slot)
      return { outcome: answer._tag === "Answered" ? "answered:" + answer.value.note : answer._tag }
    })
})
Effect.gen(function* () {
  const { engine } = yield* ScriptedEngine.make([])
  yield* Cli.run(["node", "pagantic", ...JSON.parse(process.env.PAGANTIC_TEST_ARGS)]).pipe(
    Effect.provideService(Cli.CliEngine, { make: () => Layer.succeed(Engine, engine) }),
    Effect.provideService(Cli.CliRuns, { definitions: [Ticket] })
  )
}).pipe(Effect.provide(Layer.mergeAll(NodeContext.layer, Cli.nodeIo)), NodeRuntime.runMain({ disableErrorReporting: true }))
`

interface Completed {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
  readonly millis: number
}

/** One CLI command as a child process, left to exit by itself (killed after 60 s: a hang is a failure). */
const cli = (args: ReadonlyArray<string>): Effect.Effect<Completed> =>
  Effect.async<Completed>((resume) => {
    const started = Date.now()
    const env: Record<string, string | undefined> = {
      ...process.env,
      PAGANTIC_STATE: undefined,
      PAGANTIC_STATE_URL: undefined,
      NO_COLOR: "1",
      PAGANTIC_TEST_ARGS: JSON.stringify(args),
      PAGANTIC_TEST_COUNTER: counter
    }
    for (const key of Object.keys(env)) if (env[key] === undefined) delete env[key]
    const child = execFile(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", childScript],
      { cwd: root, timeout: 60_000, env, killSignal: "SIGKILL" },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null
        resume(Effect.succeed({ code, stdout, stderr, millis: Date.now() - started }))
      }
    )
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** The advisory lock `migrate` runs under: not a shard. */
const migrationLock = PostgresRuns.migrationLockKey

interface Sample {
  readonly runners: ReadonlyArray<string>
  readonly holders: ReadonlyArray<number>
}

/** Who is registered as a runner, and which backends hold shard locks, right now. */
const sample = async (url: string): Promise<Sample> => {
  const runners = await Postgres.query<{ address: string }>(url, "SELECT address FROM cluster_runners ORDER BY address")
  const holders = await Postgres.query<{ pid: number }>(
    url,
    `SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid <> $1
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY pid`,
    [migrationLock]
  )
  return { runners: runners.map((r) => r.address), holders: holders.map((h) => h.pid) }
}

const server = shared()
const skipped = "skipped" in server ? server.skipped : undefined
if (skipped !== undefined) console.warn(`CliPostgresClient: the Postgres cases are SKIPPED: ${skipped}`)
const pg = "skipped" in server ? undefined : server

describe.skipIf(pg === undefined)("pagantic runs list | show | respond | cancel --state-url: clients of the server's runner", () => {
  it.live("never register as runners nor hold a shard; the answer reaches the run on the server, whose step ran once", () =>
    Effect.gen(function* () {
      const url = yield* Effect.promise(() => Postgres.createDatabase(pg!, "cli_client"))
      const runnerPort = yield* Effect.promise(() => Postgres.freePort())
      yield* Effect.scoped(
        Effect.gen(function* () {
          // the server: a runner that starts the run and keeps every shard
          const context = yield* Layer.build(PostgresRuns.layer({ url, definitions: [Ticket], runnerPort }))
          const runs = Context.get(context, Runs.Runs)
          yield* runs.start(Ticket, { topic: "x" }, { id: "cl-1" })
          yield* runs.start(Ticket, { topic: "y" }, { id: "cl-2" })
          expect((yield* runs.await("cl-1", { untilSuspended: true })).status).toBe("suspended")
          expect((yield* runs.await("cl-2", { untilSuspended: true })).status).toBe("suspended")
          yield* Effect.promise(() => Postgres.shardsSettled(url, 1))
          const before = yield* Effect.promise(() => sample(url))
          expect(before.runners).toEqual([`127.0.0.1:${runnerPort}`])
          expect(before.holders).toHaveLength(1)

          // sampled every 100 ms while the commands run
          const samples: Array<Sample> = []
          let sampling = true
          const sampler = (async () => {
            while (sampling) {
              samples.push(await sample(url))
              await new Promise((resolve) => setTimeout(resolve, 100))
            }
          })()

          const secret = fs.readFileSync(counter, "utf8").split("\n").find((line) => line.startsWith("cl-1 "))!.split(" ")[1]!
          const ran: Array<Completed> = []
          for (let i = 0; i < 2; i++) {
            const listed = yield* cli(["runs", "list", "--state-url", url])
            expect({ code: listed.code, stderr: listed.stderr }).toEqual({ code: 0, stderr: "" })
            expect(listed.stdout).toMatch(/^cl-1 {2}suspended \(waiting on review\) {2}ticket {2}\d{4}-/m)
            const shown = yield* cli(["runs", "show", "--json", "--state-url", url, "cl-1"])
            expect({ code: shown.code, stderr: shown.stderr }).toEqual({ code: 0, stderr: "" })
            expect(JSON.parse(shown.stdout)).toMatchObject({ id: "cl-1", status: "suspended", waitingOn: "review" })
            ran.push(listed, shown)
          }
          const answered = yield* cli(["respond", "--secret", secret, "--submit", `{"approved":true,"note":"ok"}`, "--state-url", url, "cl-1", "review"])
          ran.push(answered)
          expect({ code: answered.code, stderr: answered.stderr }).toEqual({ code: 0, stderr: "" })
          expect(answered.stdout).toContain("submit: Accepted (run cl-1, slot review)")
          expect(answered.stdout).toContain("status: completed")
          const cancelled = yield* cli(["runs", "cancel", "--state-url", url, "cl-2"])
          ran.push(cancelled)
          expect({ code: cancelled.code, stderr: cancelled.stderr, stdout: cancelled.stdout }).toEqual({ code: 0, stderr: "", stdout: "run cl-2: cancelled\n" })

          sampling = false
          yield* Effect.promise(() => sampler)
          console.log(`CliPostgresClient: ${samples.length} samples; the commands took ${ran.map((r) => r.millis).join(", ")} ms`)

          // the server ran it to its end; the step ran once, in the server
          const info = yield* runs.await("cl-1")
          expect({ status: info.status, result: info.result }).toEqual({ status: "completed", result: { outcome: "answered:ok" } })
          expect((yield* runs.await("cl-2")).status).toBe("cancelled")
          // each run's step ran once
          expect(fs.readFileSync(counter, "utf8").trim().split("\n").map((line) => line.split(" ")[0]).sort()).toEqual(["cl-1", "cl-2"])

          // no command ever registered as a runner, nor held a shard lock
          expect(samples.length).toBeGreaterThan(10)
          expect(samples.filter((s) => s.runners.join() !== before.runners.join())).toEqual([])
          expect(samples.filter((s) => s.holders.some((pid) => !before.holders.includes(pid)))).toEqual([])
          expect(yield* Effect.promise(() => sample(url))).toEqual(before)
        })
      )
    }).pipe(Effect.timeout("240 seconds"), Effect.orDie), 270_000)
})
