/**
 * `npm run bench`: runs the benchmarks and prints one table of ratios measured
 * side by side in this run.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as os from "node:os"
import * as EngineBench from "./engine.bench.js"
import * as HotPathBench from "./hotpath.bench.js"
import * as HttpBench from "./http.bench.js"
import * as ObserveBench from "./observe.bench.js"
import * as OrchestratorBench from "./orchestrator.bench.js"
import * as RunLoopBench from "./runloop.bench.js"
import * as SoakBench from "./soak.bench.js"
import type { Row } from "./Table.js"
import { Reporter } from "../src/adapters/cli/Progress.js"

const table = (rows: ReadonlyArray<Row>): string => {
  const header = ["benchmark", "ours", "baseline", "ratio", "IQR", "goal", "met"]
  const cells = rows.map((r) => [r.name, r.ours, r.baseline, r.ratio.toFixed(3), r.spread ?? "-", r.goal, r.goal === "(reference)" ? "-" : r.met ? "yes" : "NO"])
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)))
  const line = (cols: ReadonlyArray<string>) => cols.map((c, i) => c.padEnd(widths[i]!)).join(" | ")
  return [line(header), widths.map((w) => "-".repeat(w)).join("-|-"), ...cells.map(line)].join("\n")
}

/** The groups below, for the progress line on standard error (live on a terminal, plain lines otherwise). */
const GROUPS = 11

const main = Effect.gen(function*() {
  const bar = new Reporter("bench", GROUPS, "groups")
  const step = Effect.sync(() => bar.advance())
  yield* Console.log(
    `pagantic engine benchmarks: bundled model, ${os.cpus().length} CPUs, 1 thread, ${EngineBench.SEQUENCES} sequences`
  )
  const load = () => os.loadavg().map((l) => l.toFixed(2)).join(" ")
  yield* Console.log(`load average before: ${load()} (other processes on the machine skew every figure)`)
  const rows = yield* EngineBench.run
  yield* Console.log(table(rows))
  yield* step
  yield* Effect.flatMap(Effect.promise(() => import("./model.bench.js")), (b) => Effect.flatMap(b.run, (rows) => Console.log(`\nOn the bundled model: the same short chat answer through the facade and through HTTP chat completions, against the engine called directly (one sequence, prompts asked once per path)\n${table(rows)}`)))
  yield* Effect.flatMap(Effect.promise(() => import("./votes.bench.js")), (b) => Effect.flatMap(b.run, (rows) => Console.log(`\nVotes: RedundantLoop N=5 with replicas started together (prefix-tree sampleMany, and independent replicas) against the same five calls in sequence, beside llama.cpp's batching\n${table(rows)}`)))
  yield* step
  yield* Console.log(`\nHTTP adapter: canned answers (ScriptedEngine, and an engine that records nothing), ${HttpBench.CONCURRENCY} keep-alive clients on loopback`)
  yield* Console.log(table(yield* HttpBench.run))
  yield* step
  yield* Console.log("\nIn-memory event log, metrics and conversation store: 1,000 writes into a full store against a small one (O(1): ~1.0)")
  yield* Console.log(table(yield* ObserveBench.run))
  yield* step
  yield* Console.log(`\nRun loop overhead over the tool loop, on an engine that answers at once:\n${table(yield* RunLoopBench.run)}`)
  yield* step
  yield* Console.log(`\nHot path: the loops against the same work as plain Effect programs, on an engine that answers at once (CPU time per call; in a process of its own):\n${table(yield* HotPathBench.runIsolated)}`)
  yield* step
  yield* Console.log(`\nHTTP adapter against a bare @effect/platform route serving the same JSON:\n${table([HttpBench.versusBareRow(yield* HttpBench.versusBare)])}`)
  yield* step
  yield* Console.log(
    `\nSoak: ${SoakBench.REQUESTS} requests through the HTTP adapter, an engine that fails ${SoakBench.FAILURE_RATE * 100}% of calls (each InferenceFailure kind), tools that hang or throw`
  )
  const soak = yield* SoakBench.run
  yield* Console.log(table(soak.rows))
  yield* Console.log(`answers by status and code:\n${SoakBench.breakdown(soak.result)}`)
  for (const problem of soak.result.problems.slice(0, 10)) yield* Console.log(`problem: ${problem}`)
  yield* step
  yield* Effect.flatMap(Effect.promise(() => import("./folds.bench.js")), (b) => Effect.flatMap(b.run, (rows) => Console.log(`\nFolds over 1,000 classification responses (shuffled arrival), median of 50 runs against the budget\n${table(rows)}`)))
  yield* step
  yield* Effect.flatMap(Effect.promise(() => import("./durable.bench.js")), (b) => Effect.flatMap(b.run, (rows) => Console.log(`\nDurable runs: journaled steps on a SQLite file against the in-memory engine, concurrent runs, a human's answer to the committed result, a killed process's run coming back\n${table(rows)}`)))
  yield* step
  yield* Console.log(`\nOrchestrator over the bare PlanExecutor (CPU time), and durable mode over the orchestrator (wall time):\n${table(yield* OrchestratorBench.run)}`)
  yield* step
  bar.end()
  yield* Console.log(`load average after: ${load()}`)
})

NodeRuntime.runMain(main)
