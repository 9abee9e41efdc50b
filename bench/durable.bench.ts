/**
 * Durable runs: what journaling costs and how fast a run comes back.
 *
 * - per-step overhead: a 100-step run, each step's latency, on a SQLite file
 *   against the in-memory engine (goal: SQLite p50 <= 4 ms, p99 <= 15 ms)
 * - 100 concurrent 5-step runs on SQLite: runs per second (reported)
 * - human submit to KNOW: `respond` to the run's committed result (goal <= 1 s)
 * - process start to first resumed step: a child killed inside step 3, a new
 *   process started cold (node + tsx loading the sources) and from a warm standby
 *   (modules loaded, state file not yet opened) (goal <= 1 s, warm)
 * - on Postgres (bench/postgres.bench.ts): per-step overhead, and the failover
 *   of a killed runner's run to another runner (goal <= 15 s)
 *
 *   npm run bench                   (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/durable.bench.ts  (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import { Durable } from "../src/services/Durable.js"
import type { Slot } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Probe, secretOf } from "../test/support/durable-runs.js"
import { spawnChild, tempCase, waitForFile } from "../test/support/durable-spawn.js"
import { commitTimes } from "./commit.js"
import * as PostgresBench from "./postgres.bench.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const STEPS = 100
const CONCURRENT = 100

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

const probe = (slots: Ref.Ref<ReadonlyArray<Slot>>) =>
  Layer.succeed(Probe, {
    work: (_, value) => Effect.succeed(value),
    between: () => Effect.void,
    notify: (slot) => Ref.update(slots, (s) => [...s, slot])
  })

const stepTimes = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  const info = yield* runs.await(yield* runs.start(Timed, { steps: STEPS }))
  // the first step carries the run's start
  return (info.result as ReadonlyArray<number>).slice(1)
})

const concurrent = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  const start = performance.now()
  const ids = yield* Effect.forEach(Array.from({ length: CONCURRENT }, (_, i) => i), () => runs.start(Timed, { steps: 5 }))
  yield* Effect.forEach(ids, (id) => runs.await(id), { concurrency: "unbounded" })
  return CONCURRENT / ((performance.now() - start) / 1000)
})

const submitToKnow = (slots: Ref.Ref<ReadonlyArray<Slot>>) =>
  Effect.gen(function* () {
    const runs = yield* Runs.Runs
    const samples: Array<number> = []
    for (let i = 0; i < 5; i++) {
      const id = yield* runs.start(Approval, { slaMillis: 60_000 })
      yield* runs.await(id, { untilSuspended: true })
      const slot = (yield* Ref.get(slots)).find((s) => s.runId === id)!
      const start = performance.now()
      yield* runs.respond(id, slot.key, secretOf(slot), { approved: true, note: "ok" })
      yield* runs.await(id)
      samples.push(performance.now() - start)
    }
    return samples
  })

/** Milliseconds from a restart's start (cold: spawn; warm: "go") to the first line of the step resumed. */
const restart = (warm: boolean) =>
  Effect.promise(async () => {
    const { counter, db, dir } = tempCase(warm ? "bench-warm" : "bench-cold")
    try {
      const common = { db, counter, definition: "reference" as const, runId: "ref", payload: { seed: 5 } }
      const standby = warm ? spawnChild({ ...common, mode: "resume", standby: true }) : undefined
      if (standby !== undefined) await standby.next("standby", 60_000)
      const first = spawnChild({ ...common, mode: "start", pause: "mid:step-3" })
      await waitForFile(counter, (text) => text.includes("paused mid:step-3"), 60_000)
      await first.kill()
      const start = Date.now()
      const second = standby ?? spawnChild({ ...common, mode: "resume" })
      if (standby !== undefined) standby.send("go")
      await waitForFile(counter, (text) => text.split("\n").filter((l) => l.startsWith("start step-3 ")).length === 2, 60_000)
      const elapsed = Date.now() - start
      await second.next("result", 60_000)
      await second.exited
      return elapsed
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

const ms = (x: number) => `${x.toFixed(2)} ms`

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.orDie(Effect.gen(function* () {
  const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
  const memory = InMemoryRuns.layer({ definitions: [Timed, Approval] }).pipe(Layer.provide(probe(slots)))
  const { db, dir } = tempCase("bench-sqlite")
  const sqlite = SqliteRuns.layer({ filename: db, definitions: [Timed, Approval] }).pipe(Layer.provide(probe(slots)))
  const inMemory = yield* Effect.provide(stepTimes, memory)
  const measured = yield* Effect.provide(
    Effect.all({ steps: stepTimes, runsPerSecond: concurrent, submit: submitToKnow(slots) }),
    sqlite
  ).pipe(Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))))
  const commit = tempCase("bench-commit")
  const commits = yield* Effect.provide(commitTimes(STEPS), SqliteRuns.clientLayer(commit.db)).pipe(
    Effect.ensuring(Effect.sync(() => fs.rmSync(commit.dir, { recursive: true, force: true })))
  )
  const memoryRunsPerSecond = yield* Effect.provide(concurrent, memory)
  const cold = yield* restart(false)
  const warm = yield* restart(true)
  const [p50, p99] = [median(measured.steps), quantile(measured.steps, 0.99)]
  const [m50, m99] = [median(inMemory), quantile(inMemory, 0.99)]
  const submit = median(measured.submit)
  const c50 = median(commits)
  return [
    {
      name: `per step vs one commit of the same store, SQLite file (p50; ${STEPS} each)`,
      ours: ms(p50),
      baseline: ms(c50),
      ratio: p50 / c50,
      spread: `p99 ${ms(p99)} vs ${ms(quantile(commits, 0.99))}`,
      goal: "<= 3",
      met: p50 / c50 <= 3
    },
    {
      name: `per step, SQLite file vs in memory (p50; ${STEPS} steps)`,
      ours: ms(p50),
      baseline: ms(m50),
      ratio: p50 / m50,
      spread: `p99 ${ms(p99)} vs ${ms(m99)}`,
      goal: "p50 <= 4 ms, p99 <= 15 ms",
      met: p50 <= 4 && p99 <= 15
    },
    {
      name: `${CONCURRENT} concurrent 5-step runs, SQLite vs in memory`,
      ours: `${measured.runsPerSecond.toFixed(1)} runs/s`,
      baseline: `${memoryRunsPerSecond.toFixed(1)} runs/s`,
      ratio: measured.runsPerSecond / memoryRunsPerSecond,
      spread: "-",
      goal: "(reference)",
      met: true
    },
    {
      name: "human submit to KNOW, SQLite (median of 5)",
      ours: ms(submit),
      baseline: "1000 ms",
      ratio: submit / 1000,
      spread: `max ${ms(Math.max(...measured.submit))}`,
      goal: "<= 1 s",
      met: submit <= 1000
    },
    {
      name: "restart to first resumed step: warm standby vs cold process",
      ours: `${warm} ms`,
      baseline: `${cold} ms`,
      ratio: warm / cold,
      spread: "-",
      goal: "warm <= 1 s",
      met: warm <= 1000
    },
    ...(yield* PostgresBench.run)
  ] satisfies ReadonlyArray<Row>
}))

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) => Console.log(rows.map((r) => `${r.name}: ${r.ours} vs ${r.baseline} (${r.spread}) goal ${r.goal}: ${r.met ? "met" : "NOT met"}`).join("\n"))).pipe(
      Effect.ensuring(Effect.sync(() => process.exit(0)))
    )
  )
}
