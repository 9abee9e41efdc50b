/**
 * What the run loop costs over the tool loop it generalises: one turn (a user
 * message, a tool call, the tool's result fed back, the answer) through
 * `RunLoop.run` with the native-tools strategy versus through `AgentLoop.chat`,
 * on an engine that answers at once, with the same tool registry. Each round
 * times TURNS turns of each side back to back (the order alternating); the ratio
 * is the median of per-round ratios of CPU time (the process's, user + system),
 * the interquartile range beside it, wall time shown too. CPU time, because
 * about half the wall time of a zero-latency turn is the process idle while
 * Effect's scheduler yields to the event loop, which other processes on the
 * machine stretch. Goal: RunLoop <= 1.1x AgentLoop.
 *
 *   npm run bench                    (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/runloop.bench.ts   (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { fileURLToPath } from "node:url"
import * as Message from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RunLoop from "../src/programs/RunLoop.js"
import { Engine, InferenceResult } from "../src/services/Engine.js"
import * as Tool from "../src/services/ToolRegistry.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const ROUNDS = Number(process.env.RUNLOOP_BENCH_ROUNDS ?? 15)
const TURNS = Number(process.env.RUNLOOP_BENCH_TURNS ?? 300)
const GOAL = 1.1

const usage = TokenUsage.make({ promptTokens: 10, outputTokens: 2 })
const call = new Message.ToolCall({ id: "call_1", name: "add", arguments: { a: 2, b: 3 } })
const callReply = new InferenceResult({ content: "", toolCalls: [call], usage, finishReason: "tool_calls" })
const answer = new InferenceResult({ content: "5", toolCalls: [], usage, finishReason: "stop" })

/** Asks for the tool after a user message, answers after a tool result; no latency, records nothing. */
const instantEngine = Layer.succeed(Engine, {
  infer: (request) => Effect.succeed(request.messages.at(-1)?.role === "tool" ? answer : callReply),
  stream: () => Effect.dieMessage("not streamed in this benchmark") as never,
  modelInfo: Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
})

const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})

const services = Layer.merge(instantEngine, Registry.layer([add]))

const runLoopTurn = Effect.flatMap(RunLoop.run([Message.user("What is 2 + 3?")]), (r) =>
  r.content === "5" ? Effect.void : Effect.dieMessage(`RunLoop answered ${r.content} (${r.stopReason})`))

const agentLoopTurn = Effect.flatMap(AgentLoop.make(), (agent) =>
  Effect.flatMap(agent.chat("What is 2 + 3?"), (r) =>
    r.content === "5" ? Effect.void : Effect.dieMessage(`AgentLoop answered ${r.content} (${r.stopReason})`)))

/** Wall and CPU milliseconds of TURNS turns. */
const timeMs = <E>(effect: Effect.Effect<void, E, Engine>) =>
  Effect.gen(function*() {
    const cpu = yield* Effect.sync(() => process.cpuUsage())
    const start = yield* Effect.sync(() => performance.now())
    yield* Effect.repeatN(Effect.orDie(effect), TURNS - 1)
    const wall = (yield* Effect.sync(() => performance.now())) - start
    const used = yield* Effect.sync(() => process.cpuUsage(cpu))
    return { wall, cpu: (used.user + used.system) / 1000 }
  })

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.gen(function*() {
  // warm both paths up (JIT, module state)
  yield* timeMs(runLoopTurn)
  yield* timeMs(agentLoopTurn)
  const ratios: Array<number> = []
  const ours: Array<{ readonly wall: number; readonly cpu: number }> = []
  const base: Array<{ readonly wall: number; readonly cpu: number }> = []
  for (let round = 0; round < ROUNDS; round++) {
    const first = round % 2 === 0
    const x = first ? yield* timeMs(runLoopTurn) : yield* timeMs(agentLoopTurn)
    const y = first ? yield* timeMs(agentLoopTurn) : yield* timeMs(runLoopTurn)
    const [o, b] = first ? [x, y] : [y, x]
    ours.push(o)
    base.push(b)
    ratios.push(o.cpu / b.cpu)
  }
  const ratio = median(ratios)
  const us = (ms: number) => `${((ms / TURNS) * 1000).toFixed(0)} us`
  const perTurn = (xs: ReadonlyArray<{ readonly wall: number; readonly cpu: number }>) =>
    `${us(median(xs.map((x) => x.cpu)))} CPU/turn (wall ${us(median(xs.map((x) => x.wall)))})`
  return [{
    name: `RunLoop turn vs AgentLoop turn (tool call + answer, zero-latency engine, ${TURNS} turns x ${ROUNDS} rounds)`,
    ours: perTurn(ours),
    baseline: perTurn(base),
    ratio,
    spread: `${quantile(ratios, 0.25).toFixed(2)}-${quantile(ratios, 0.75).toFixed(2)}`,
    goal: `<= ${GOAL}`,
    met: ratio <= GOAL
  } satisfies Row]
}).pipe(Effect.provide(services))

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      )
    )
  )
}
