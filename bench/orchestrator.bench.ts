/**
 * What the orchestrator costs over the executor it compiles to, and what durable
 * mode costs over that.
 *
 * - A 100-task DAG of no-op tasks in 4 dependency levels (25 tasks each, every
 *   task of a level depending on two of the level before), through
 *   `Orchestrator.execute` (checks, plan creation, compilation, then the
 *   PlanExecutor) against the same plan through a bare PlanExecutor with a no-op
 *   handler, both at most 4 tasks at once. Each round times DAGS runs of each
 *   side back to back (order alternating); the ratio is the median of per-round
 *   ratios of CPU time, the IQR beside it, wall time shown too. Goal <= 2x.
 * - The same DAG as a durable run (the analysis absent, each task a journaled
 *   step) on InMemoryRuns and on SqliteRuns (a temporary file), against the
 *   orchestrator outside a durable run: wall time per DAG, start to result,
 *   median of DURABLE_DAGS runs. Reported (no goal: the per-step goal is
 *   bench/durable.bench.ts's).
 *
 *   npm run bench                        (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/orchestrator.bench.ts  (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Plan from "../src/domain/Plan.js"
import { isComplete, Task, TaskList } from "../src/domain/Task.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import * as Orchestrator from "../src/programs/Orchestrator.js"
import * as PlanCreator from "../src/programs/orchestrator/PlanCreator.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import * as Runs from "../src/services/Runs.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const ROUNDS = Number(process.env.ORCHESTRATOR_BENCH_ROUNDS ?? 15)
const DAGS = Number(process.env.ORCHESTRATOR_BENCH_DAGS ?? 20)
const DURABLE_DAGS = Number(process.env.ORCHESTRATOR_BENCH_DURABLE_DAGS ?? 5)
const LEVELS = 4
const WIDTH = 25
const CONCURRENCY = 4
const GOAL = 2

const id = (level: number, index: number) => `t${level}_${index}`

/** 100 tasks in 4 levels; a task of level n > 0 depends on two of level n - 1. */
export const dag = new TaskList({
  analysis: "a benchmark DAG",
  tasks: Array.from({ length: LEVELS * WIDTH }, (_, k) => {
    const level = Math.floor(k / WIDTH)
    const index = k % WIDTH
    return new Task({
      id: id(level, index),
      type: "noop",
      processor: "noop",
      priority: 0,
      dependencies: level === 0 ? [] : [id(level - 1, index), id(level - 1, (index + 7) % WIDTH)],
      description: "",
      metadata: {}
    })
  })
})

const plan = new Plan.ExecutionPlan({
  steps: dag.tasks.map((t) => new Plan.Step({ name: t.id, type: "noop", dependsOn: t.dependencies }))
})

const makeOrchestrator = Orchestrator.make({
  processors: { noop: TaskProcessor.make(() => Effect.succeed(null)) },
  maxConcurrent: CONCURRENCY,
  planCreator: PlanCreator.dependency({ maxTasksPerPhase: WIDTH })
})

const makeExecutor = PlanExecutor.make({
  handlers: [PlanExecutor.handler("noop", { input: Schema.Unknown, output: Schema.Unknown, run: () => Effect.succeed(null) })],
  concurrency: CONCURRENCY
})

/** The DAG as a durable run: the orchestrator inside it journals each task. */
const Dag = Runs.define({
  name: "bench-dag",
  payload: Schema.Struct({}),
  success: Schema.Number,
  program: () =>
    Effect.gen(function* () {
      const orchestrator = yield* makeOrchestrator
      const result = yield* orchestrator.execute(dag)
      return result.completed.length
    })
})

interface Timing {
  readonly wall: number
  readonly cpu: number
}

/** Wall and CPU milliseconds of `n` runs of `effect`. */
const timeMs = <E, R>(effect: Effect.Effect<void, E, R>, n: number): Effect.Effect<Timing, never, R> =>
  Effect.gen(function* () {
    const cpu = process.cpuUsage()
    const start = performance.now()
    yield* Effect.repeatN(Effect.orDie(effect), n - 1)
    const wall = performance.now() - start
    const used = process.cpuUsage(cpu)
    return { wall, cpu: (used.user + used.system) / 1000 }
  })

const checked = (completed: number, who: string) =>
  completed === dag.tasks.length ? Effect.void : Effect.dieMessage(`${who} completed ${completed} of ${dag.tasks.length} tasks`)

const perDag = (xs: ReadonlyArray<Timing>, n: number) =>
  `${(median(xs.map((x) => x.cpu)) / n).toFixed(2)} ms CPU/DAG (wall ${(median(xs.map((x) => x.wall)) / n).toFixed(2)} ms)`

/** Wall milliseconds of one durable run of the DAG, start to result. */
const durableDag = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  const start = performance.now()
  const info = yield* runs.await(yield* runs.start(Dag, {}))
  const wall = performance.now() - start
  if (info.status !== "completed") return yield* Effect.dieMessage(`the durable DAG ended ${info.status}: ${info.error?.message}`)
  yield* checked(info.result as number, "the durable DAG")
  return wall
}).pipe(Effect.orDie)

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.gen(function* () {
  const orchestrator = yield* Effect.orDie(makeOrchestrator)
  const executor = yield* makeExecutor
  const orchestrated = Effect.flatMap(orchestrator.execute(dag), (r) =>
    isComplete(r) ? checked(r.completed.length, "the orchestrator") : Effect.dieMessage("the orchestrator did not complete the DAG"))
  const bare = Effect.flatMap(executor.execute(plan), (o) =>
    checked(o._tag === "Completed" ? o.steps.length : 0, "the PlanExecutor"))

  // warm both paths up (JIT, module state)
  yield* timeMs(orchestrated, DAGS)
  yield* timeMs(bare, DAGS)
  const ratios: Array<number> = []
  const ours: Array<Timing> = []
  const base: Array<Timing> = []
  for (let round = 0; round < ROUNDS; round++) {
    const first = round % 2 === 0
    const x = yield* timeMs(first ? orchestrated : bare, DAGS)
    const y = yield* timeMs(first ? bare : orchestrated, DAGS)
    const [o, b] = first ? [x, y] : [y, x]
    ours.push(o)
    base.push(b)
    ratios.push(o.cpu / b.cpu)
  }
  const ratio = median(ratios)
  const rows: Array<Row> = [{
    name: `Orchestrator vs bare PlanExecutor (${LEVELS * WIDTH}-task ${LEVELS}-level DAG of no-op tasks, ${CONCURRENCY} at once, ${DAGS} DAGs x ${ROUNDS} rounds)`,
    ours: perDag(ours, DAGS),
    baseline: perDag(base, DAGS),
    ratio,
    spread: `${quantile(ratios, 0.25).toFixed(2)}-${quantile(ratios, 0.75).toFixed(2)}`,
    goal: `<= ${GOAL}`,
    met: ratio <= GOAL
  }]

  const plainWall = median(yield* Effect.forEach(Array.from({ length: DURABLE_DAGS }), () =>
    Effect.map(timeMs(orchestrated, 1), (t) => t.wall)))
  const durableRow = (store: string, walls: ReadonlyArray<number>): Row => {
    const wall = median(walls)
    return {
      name: `durable DAG on ${store} vs Orchestrator outside a durable run (${dag.tasks.length} journaled tasks, median of ${DURABLE_DAGS})`,
      ours: `${wall.toFixed(1)} ms/DAG (${((wall - plainWall) / dag.tasks.length).toFixed(2)} ms/task more)`,
      baseline: `${plainWall.toFixed(2)} ms/DAG`,
      ratio: wall / plainWall,
      spread: `${quantile(walls, 0.25).toFixed(0)}-${quantile(walls, 0.75).toFixed(0)} ms`,
      goal: "reported",
      met: true
    }
  }
  const inMemory = yield* Effect.forEach(Array.from({ length: DURABLE_DAGS + 1 }), () => durableDag).pipe(
    Effect.provide(InMemoryRuns.layer({ definitions: [Dag] })),
    Effect.orDie
  )
  rows.push(durableRow("InMemoryRuns", inMemory.slice(1)))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-bench-orchestrator-"))
  const onFile = yield* Effect.forEach(Array.from({ length: DURABLE_DAGS + 1 }), () => durableDag).pipe(
    Effect.provide(SqliteRuns.layer({ filename: path.join(dir, "state.db"), definitions: [Dag] })),
    Effect.orDie,
    Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
  )
  rows.push(durableRow("SqliteRuns (a file)", onFile.slice(1)))
  return rows
}).pipe(Effect.scoped)

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      )
    )
  )
}
