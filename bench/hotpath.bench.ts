/**
 * What the loops cost around a model that answers at once: each row runs one of
 * the library's programs against the same work written as a plain Effect program
 * (Effect.gen, a Ref for the history, Effect.forEach for tools, the engine and the
 * tool handler called directly), on the same zero-latency engine, side by side in
 * this process. A round times the same number of calls of each side back to
 * back (the order alternating): at least CALLS (200), and as many more as make
 * the faster side's round last ROUND_MS (250 ms) of CPU time (20,000 calls at
 * most), so that one garbage collection more or less (V8 collects on helper
 * threads too) does not decide a round of a row whose call takes microseconds. The
 * ratio is the median of per-round ratios of CPU time (the process's, user +
 * system), the interquartile range beside it, wall time per
 * call shown too. CPU time, because much of a zero-latency call's wall time is
 * the process idle while Effect's scheduler yields to the event loop, which other
 * processes on the machine stretch.
 *
 * Rows: an AgentLoop turn (the model asks for add(2,3), the tool runs, the model
 * answers "5"; a fresh loop per turn), the same turn against the Vercel AI SDK's
 * `generateText` (bench/vercelAi.ts), the same with Telemetry.layerInMemory (the
 * OpenTelemetry SDK recording every span), Structured.run (valid JSON at the first
 * reply), RedundantLoop N=5 (five replicas and a majority vote), a PlanExecutor
 * plan of 3 chained infer steps, and a Facade chat request.
 *
 *   npm run bench                     (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/hotpath.bench.ts    (alone; HOTPATH_BENCH_ONLY=<part of a name> picks rows)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Scope from "effect/Scope"
import * as Schema from "effect/Schema"
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Message from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as Plan from "../src/domain/Plan.js"
import { SystemRequest } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as Telemetry from "../src/layers/Telemetry.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Facade from "../src/programs/Facade.js"
import * as PlanExecutor from "../src/programs/PlanExecutor.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as Structured from "../src/programs/Structured.js"
import type { Constraint } from "../src/services/Constraint.js"
import { Engine, InferenceRequest, InferenceResult, streamFrom, StreamPart } from "../src/services/Engine.js"
import * as Tool from "../src/services/ToolRegistry.js"
import * as PlainFacade from "./plainFacade.js"
import { plainPlanEquivalent } from "./plainPlan.js"
import { vercelAiTurn } from "./vercelAi.js"
import { profiled, summarize } from "./Gc.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const ROUNDS = Number(process.env.HOTPATH_BENCH_ROUNDS ?? 11)
const CALLS = Number(process.env.HOTPATH_BENCH_CALLS ?? 200)
/** The least CPU time of a side's round (the faster side's), in ms: fast rows run more calls per round. */
const ROUND_MS = Number(process.env.HOTPATH_BENCH_ROUND_MS ?? 250)
const MAX_CALLS = 20_000
/** CPU time each side of a comparison runs before its rounds are sized and timed, in ms. */
const WARM_MS = Number(process.env.HOTPATH_BENCH_WARM_MS ?? 500)

// ---------------------------------------------------------------------------
// Engines that answer at once and keep nothing
// ---------------------------------------------------------------------------

const usage = TokenUsage.make({ promptTokens: 10, outputTokens: 2 })
const modelInfo = Effect.succeed(new ModelInfo({ name: "instant", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))

const engineOf = (infer: (request: InferenceRequest) => InferenceResult): Layer.Layer<Engine> =>
  Layer.succeed(Engine, {
    infer: (request) => Effect.sync(() => infer(request)),
    // by callback (Engine.streamFrom), as the library's own engines stream: the loops run it without Stream machinery
    stream: (request) =>
      streamFrom((emit) =>
        Effect.suspend(() => {
          const result = infer(request)
          return Effect.zipRight(emit(StreamPart.textDelta(result.content)), emit(StreamPart.finish(result)))
        })
      ),
    modelInfo
  })

const call = new Message.ToolCall({ id: "call_1", name: "add", arguments: { a: 2, b: 3 } })
const callReply = new InferenceResult({ content: "", toolCalls: [call], usage, finishReason: "tool_calls" })
const answer = new InferenceResult({ content: "5", toolCalls: [], usage, finishReason: "stop" })

/** Asks for add(2,3) after a user message, answers "5" after a tool result. */
const toolEngine = engineOf((request) => request.messages.at(-1)?.role === "tool" ? answer : callReply)

const jsonReply = new InferenceResult({ content: '{"answer": 5}', toolCalls: [], usage, finishReason: "stop" })
const jsonEngine = engineOf(() => jsonReply)

const textReply = new InferenceResult({ content: "pong", toolCalls: [], usage, finishReason: "stop" })
const textEngine = engineOf(() => textReply)

const addParameters = Schema.Struct({ a: Schema.Number, b: Schema.Number })
const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: addParameters,
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})

const Answer = Schema.Struct({ answer: Schema.Number })

const expect = (ok: boolean, what: string): Effect.Effect<void> => ok ? Effect.void : Effect.dieMessage(what)

// ---------------------------------------------------------------------------
// Ours
// ---------------------------------------------------------------------------

/** One AgentLoop turn on a fresh loop (needs the tool engine and registry: `agentServices`). */
export const agentTurn = Effect.flatMap(AgentLoop.make(), (agent) =>
  Effect.flatMap(agent.chat("What is 2 + 3?"), (r) => expect(r.content === "5", `AgentLoop answered ${r.content} (${r.stopReason})`)))

const structuredCall = Effect.flatMap(
  Structured.run([Message.user("What is 2 + 3? Answer as JSON.")], { schema: Answer }),
  (r) => expect(r.value.answer === 5, `Structured answered ${r.content}`)
)

const redundantCall = Effect.flatMap(
  RedundantLoop.run("What is 2 + 3? Answer as JSON.", { schema: Answer, n: 5 }),
  (r) => expect(r.value.answer === 5 && r.confidence === 1, `RedundantLoop answered ${r.content}`)
)

const chain = new Plan.ExecutionPlan({
  steps: [
    new Plan.Step({ name: "a", type: "infer", input: "one", dependsOn: [] }),
    new Plan.Step({ name: "b", type: "infer", input: "two", dependsOn: ["a"] }),
    new Plan.Step({ name: "c", type: "infer", input: "three", dependsOn: ["b"] })
  ]
})

/** A plan on an executor made once. */
const planCall = (executor: PlanExecutor.PlanExecutor) =>
  Effect.flatMap(executor.execute(chain), (outcome) =>
    expect(outcome._tag === "Completed" && outcome.steps.length === 3, `PlanExecutor ended ${outcome._tag}`))

const chatRequest = Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "ping" }] })

/** A request on a facade made once, as a server makes it. */
const facadeCall = (system: Facade.Facade) =>
  Effect.flatMap(system.run(chatRequest), (response) =>
    expect(response.error === undefined && response.content === "pong", `Facade answered ${JSON.stringify(response.error ?? response.content).slice(0, 300)}`))

// ---------------------------------------------------------------------------
// The same work as plain Effect programs
// ---------------------------------------------------------------------------

const addDefinition = new Message.ToolDefinition({
  name: "add",
  description: "Adds two numbers",
  parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] }
})
const decodeAdd = Schema.decodeUnknown(addParameters)
const toolMessage = (c: Message.ToolCall, content: string, isError: boolean): Message.Message =>
  new Message.ToolMessage({ role: "tool", content, toolCallId: c.id, name: c.name, isError })

/** A tool turn: a Ref for the history, the engine, the tool calls under a concurrency cap, until an answer. */
const plainTurn = Effect.gen(function* () {
  const engine = yield* Engine
  const history = yield* Ref.make<ReadonlyArray<Message.Message>>([Message.user("What is 2 + 3?")])
  for (let i = 0; i < 20; i++) {
    const messages = yield* Ref.get(history)
    const reply = yield* engine.infer(new InferenceRequest({ messages, tools: [addDefinition], maxTokens: 2048 }, true))
    yield* Ref.update(history, (h) => [...h, Message.assistant(reply.content, reply.toolCalls)])
    if (reply.toolCalls.length === 0) return yield* expect(reply.content === "5", `plain loop answered ${reply.content}`)
    const results = yield* Effect.forEach(
      reply.toolCalls,
      (c) =>
        decodeAdd(c.arguments).pipe(
          Effect.flatMap(add.handler),
          Effect.map((value) => toolMessage(c, typeof value === "string" ? value : JSON.stringify(value), false)),
          Effect.orElseSucceed(() => toolMessage(c, "Error: bad arguments", true))
        ),
      { concurrency: 4 }
    )
    yield* Ref.update(history, (h) => [...h, ...results])
  }
})

const decodeAnswer = Schema.decodeUnknown(Schema.parseJson(Answer))

/** One structured answer: the engine, then the reply parsed and decoded with the schema. */
const plainStructured = (prompt: string) =>
  Effect.flatMap(Engine, (engine) =>
    engine.infer(new InferenceRequest({ messages: [Message.user(prompt)], maxTokens: 2048, temperature: 0.2 }, true)).pipe(
      Effect.flatMap((reply) => decodeAnswer(reply.content)),
      Effect.orDie
    ))

const plainStructuredCall = Effect.flatMap(
  plainStructured("What is 2 + 3? Answer as JSON."),
  (value) => expect(value.answer === 5, "plain structured answer")
)

/** Five structured answers at once, voted on their JSON. */
const plainRedundant = Effect.gen(function* () {
  const values = yield* Effect.all(Array.from({ length: 5 }, () => plainStructured("What is 2 + 3? Answer as JSON.")), {
    concurrency: 5
  })
  const votes = new Map<string, number>()
  for (const v of values) {
    const key = JSON.stringify(v)
    votes.set(key, (votes.get(key) ?? 0) + 1)
  }
  const [winner, count] = [...votes.entries()].reduce((best, e) => (e[1] > best[1] ? e : best))
  return yield* expect(count === 5 && winner === '{"answer":5}', "plain vote")
})

/** Three engine calls, one after the other, their results kept by name. */
const plainPlan = Effect.gen(function* () {
  const engine = yield* Engine
  const outputs: Record<string, InferenceResult> = {}
  for (const [name, input] of [["a", "one"], ["b", "two"], ["c", "three"]] as const) {
    outputs[name] = yield* engine.infer(new InferenceRequest({ messages: [Message.user(input)] }, true))
  }
  return yield* expect(Object.keys(outputs).length === 3, "plain plan")
})

/** A chat request: the engine on the request's messages, a response object built from the reply. */
const plainChat = Effect.gen(function* () {
  const engine = yield* Engine
  const reply = yield* engine.infer(new InferenceRequest({ messages: chatRequest.messages, maxTokens: 2048 }, true))
  const response = { requestId: "r", success: true, content: reply.content, usage: reply.usage, toolCallsMade: [] }
  return yield* expect(response.content === "pong", "plain chat")
})

/** The same chat request on a plain-Effect chat endpoint made once (bench/plainFacade.ts: what it does and leaves out). */
const plainFacadeCall = (endpoint: Effect.Effect.Success<typeof PlainFacade.make>) =>
  Effect.flatMap(endpoint.run(chatRequest), (response) =>
    expect(response.error === undefined && response.content === "pong", "plain facade"))

// ---------------------------------------------------------------------------
// Side by side
// ---------------------------------------------------------------------------

interface Timing {
  readonly wall: number
  readonly cpu: number
}

/** Wall and CPU milliseconds of `calls` calls. */
const timeMs = <E, R>(effect: Effect.Effect<void, E, R>, calls: number = CALLS): Effect.Effect<Timing, never, R> =>
  Effect.gen(function* () {
    const cpu = process.cpuUsage()
    const start = performance.now()
    yield* Effect.repeatN(Effect.orDie(effect), calls - 1)
    const wall = performance.now() - start
    const used = process.cpuUsage(cpu)
    return { wall, cpu: (used.user + used.system) / 1000 }
  })

/**
 * Warms `effect` up: batches of CALLS calls until WARM_MS of CPU time has gone into them (JIT, module state,
 * stores filling), then the timing of one more batch, warm.
 */
const warmUp = <E, R>(effect: Effect.Effect<void, E, R>): Effect.Effect<Timing, never, R> =>
  Effect.gen(function* () {
    let spent = 0
    while (spent < WARM_MS) spent += (yield* timeMs(effect)).cpu
    return yield* timeMs(effect)
  })

/** Calls per round: the faster side's CPU time at least ROUND_MS, from timings of CALLS warm calls each (within CALLS..MAX_CALLS). */
const roundCalls = (warm: Timing, warmBase: Timing): number =>
  Math.min(MAX_CALLS, Math.max(CALLS, Math.ceil((CALLS * ROUND_MS) / Math.max(0.001, Math.min(warm.cpu, warmBase.cpu)))))

/** The figures of one comparison, before they become a row. */
export interface Comparison {
  readonly name: string
  readonly ratio: number
  readonly ratios: ReadonlyArray<number>
  readonly oursCpuUs: number
  readonly oursWallUs: number
  readonly baseCpuUs: number
  readonly baseWallUs: number
  /** Calls per side per round. */
  readonly calls: number
  /** Undefined for a reference row (a baseline that is not the same work: no goal against it). */
  readonly goal: number | undefined
}

const compare = <R>(
  name: string,
  goal: number | undefined,
  ours: Effect.Effect<void, unknown, R>,
  base: Effect.Effect<void, unknown, R>,
  between: Effect.Effect<void> = Effect.void
): Effect.Effect<Comparison, never, R> =>
  Effect.gen(function* () {
    // warm both sides up (JIT, module state), then time them warm: the round's size is worked out from warm calls
    // (from the first CALLS calls, still being compiled, a round came out some ten times shorter than ROUND_MS)
    const warm = yield* warmUp(ours)
    const warmBase = yield* warmUp(base)
    yield* between
    // a round long enough that a collection more or less does not decide it: both sides' CPU time at least
    // ROUND_MS (CALLS calls at least), so a fast row runs more calls per round than a slow one
    const calls = roundCalls(warm, warmBase)
    const ratios: Array<number> = []
    const o: Array<Timing> = []
    const b: Array<Timing> = []
    for (let round = 0; round < ROUNDS; round++) {
      const first = round % 2 === 0
      const x = yield* timeMs(first ? ours : base, calls)
      const y = yield* timeMs(first ? base : ours, calls)
      yield* between
      const [ot, bt] = first ? [x, y] : [y, x]
      o.push(ot)
      b.push(bt)
      ratios.push(ot.cpu / bt.cpu)
    }
    const us = (xs: ReadonlyArray<Timing>, k: keyof Timing) => (median(xs.map((t) => t[k])) / calls) * 1000
    return {
      name,
      ratio: median(ratios),
      ratios,
      oursCpuUs: us(o, "cpu"),
      oursWallUs: us(o, "wall"),
      baseCpuUs: us(b, "cpu"),
      baseWallUs: us(b, "wall"),
      calls,
      goal
    }
  })

export const rowOf = (c: Comparison): Row => ({
  name: c.name,
  ours: `${c.oursCpuUs.toFixed(0)} us CPU (wall ${c.oursWallUs.toFixed(0)} us)`,
  baseline: `${c.baseCpuUs.toFixed(0)} us CPU (wall ${c.baseWallUs.toFixed(0)} us)`,
  ratio: c.ratio,
  spread: `${quantile(c.ratios, 0.25).toFixed(2)}-${quantile(c.ratios, 0.75).toFixed(2)}`,
  goal: c.goal === undefined ? "(reference)" : `<= ${c.goal}`,
  met: c.goal === undefined || c.ratio <= c.goal
})

const tools = Registry.layer([add])
/** What `agentTurn` runs on: the tool engine and a registry with `add`. */
export const agentServices = Layer.merge(toolEngine, tools)
const withConstraint = <A, E, R>(engine: Layer.Layer<Engine>) => (effect: Effect.Effect<A, E, R>) =>
  Effect.provide(effect, Layer.merge(engine, JsonConstraint.layer))

const withTelemetry = Effect.gen(function* () {
  const spans = yield* Telemetry.InMemorySpans
  return yield* compare(
    `AgentLoop turn with Telemetry.layerInMemory vs plain-Effect loop`,
    3.0,
    agentTurn,
    plainTurn,
    spans.reset
  )
}).pipe(Effect.provide(Layer.mergeAll(toolEngine, tools, Telemetry.layerInMemory())))

/** One call of each of our sides on services built once: what bench/profile.ts profiles. */
export const ourCalls: Readonly<Record<string, Effect.Effect<Effect.Effect<void, unknown>, never, Scope.Scope>>> = {
  facadeEquivalent: Effect.suspend(() => ourCalls.facade!),
  planEquivalent: Effect.suspend(() => ourCalls.plan!),
  agent: Effect.map(Layer.build(agentServices), (c) => Effect.provide(agentTurn, c)),
  agentVercelAi: Effect.suspend(() => ourCalls.agent!),
  telemetry: Effect.map(Layer.build(Layer.mergeAll(toolEngine, tools, Telemetry.layerInMemory())), (c) => Effect.provide(agentTurn, c)),
  structured: Effect.map(Layer.build(Layer.merge(jsonEngine, JsonConstraint.layer)), (c) => Effect.provide(structuredCall, c)),
  redundant: Effect.map(Layer.build(Layer.merge(jsonEngine, JsonConstraint.layer)), (c) => Effect.provide(redundantCall, c)),
  // as the row runs it: the executor made where no Scope is, the engine in the context of each call
  plan: Effect.flatMap(Layer.build(textEngine), (c) =>
    Effect.map(
      Effect.mapInputContext(Effect.provide(PlanExecutor.make({ handlers: [PlanExecutor.infer()] }), c), Context.omit(Scope.Scope)),
      (executor) => Effect.provide(planCall(executor), c)
    )),
  facade: Effect.flatMap(Layer.build(Layer.merge(textEngine, JsonConstraint.layer)), (c) =>
    Effect.map(Effect.provide(Facade.make(), c), (system) => Effect.provide(facadeCall(system), c)))
}

/** The same calls' plain-Effect baselines, on the same services (to profile or count a baseline as ours). */
export const baseCalls: Readonly<Record<string, Effect.Effect<Effect.Effect<void, unknown>, never, Scope.Scope>>> = {
  agent: Effect.map(Layer.build(agentServices), (c) => Effect.provide(plainTurn, c)),
  agentVercelAi: Effect.succeed(vercelAiTurn),
  telemetry: Effect.map(Layer.build(agentServices), (c) => Effect.provide(plainTurn, c)),
  structured: Effect.map(Layer.build(jsonEngine), (c) => Effect.provide(plainStructuredCall, c)),
  redundant: Effect.map(Layer.build(jsonEngine), (c) => Effect.provide(plainRedundant, c)),
  plan: Effect.map(Layer.build(textEngine), (c) => Effect.provide(plainPlan, c)),
  planEquivalent: Effect.map(Layer.build(textEngine), (c) => Effect.provide(plainPlanEquivalent, c)),
  facade: Effect.map(Layer.build(textEngine), (c) => Effect.provide(plainChat, c)),
  facadeEquivalent: Effect.flatMap(Layer.build(textEngine), (c) =>
    Effect.map(Effect.provide(PlainFacade.make, c), (endpoint) => plainFacadeCall(endpoint)))
}

/** Profiles per side in a GC row, alternating, and calls per profile. */
const GC_PROFILES = 3
const GC_CALLS = 10_000

/**
 * The GC share of a row's CPU time (V8's sampling profile of GC_CALLS calls, after
 * 300 warm-up calls; the median of GC_PROFILES profiles, alternating with the
 * plain-Effect baseline's), against a goal on our share alone: bench/Gc.ts.
 */
const gcRow = (key: string, name: string, goal: number | undefined): Effect.Effect<Row> =>
  Effect.scoped(Effect.gen(function* () {
    const ours = yield* ourCalls[key]!
    const base = yield* baseCalls[key]!
    const shares: Array<number> = []
    const baseShares: Array<number> = []
    const busy: Array<number> = []
    for (let i = 0; i < GC_PROFILES; i++) {
      const o = summarize((yield* Effect.orDie(profiled(ours, GC_CALLS))).profile)
      const b = summarize((yield* Effect.orDie(profiled(base, GC_CALLS))).profile)
      shares.push(o.gcShare)
      busy.push(o.busyMs)
      baseShares.push(b.gcShare)
    }
    const share = median(shares)
    const pct = (x: number) => `${(100 * x).toFixed(1)}%`
    return {
      name,
      ours: `GC ${pct(share)} of ${(median(busy) / GC_CALLS * 1000).toFixed(0)} us CPU`,
      baseline: `plain Effect: GC ${pct(median(baseShares))}`,
      ratio: share,
      spread: `${pct(Math.min(...shares))}-${pct(Math.max(...shares))}`,
      goal: goal === undefined ? "(reference)" : `< ${goal}`,
      met: goal === undefined || share < goal
    } satisfies Row
  }))

/** The GC rows: the AgentLoop turn's (the goal, GC under 10%) and the facade request's, for reference. */
const gcRows: ReadonlyArray<readonly [string, Effect.Effect<Row>]> = [
  ["gcAgent", gcRow("agent", "GC share of an AgentLoop turn's CPU time (sampling profile)", 0.1)],
  ["gcFacade", gcRow("facade", "GC share of a Facade chat request's CPU time (sampling profile)", undefined)]
]

const only = process.env.HOTPATH_BENCH_ONLY ?? ""

const comparisons: ReadonlyArray<readonly [string, Effect.Effect<Comparison>]> = [
  [
    "agent",
    compare(`AgentLoop turn (tool call + tool + answer) vs plain-Effect loop`, 2.0, agentTurn, plainTurn).pipe(
      Effect.provide(Layer.merge(toolEngine, tools))
    )
  ],
  [
    "agentVercelAi",
    compare(`AgentLoop turn vs the same turn through the Vercel AI SDK (generateText, bench/vercelAi.ts)`, 0.25, agentTurn, vercelAiTurn).pipe(
      Effect.provide(Layer.merge(toolEngine, tools))
    )
  ],
  [
    "structured",
    compare(`Structured.run (valid JSON first time) vs infer + decode`, 2.0, structuredCall, plainStructuredCall).pipe(
      withConstraint(jsonEngine)
    )
  ],
  [
    "redundant",
    compare(`RedundantLoop N=5 vs 5 concurrent infer + decode + vote`, 2.0, redundantCall, plainRedundant).pipe(
      withConstraint(jsonEngine)
    )
  ],
  [
    "plan",
    Effect.flatMap(PlanExecutor.make({ handlers: [PlanExecutor.infer()] }), (executor) =>
      compare(`PlanExecutor, 3 chained infer steps vs 3 infers in sequence`, 2.0, planCall(executor), plainPlan)).pipe(
        Effect.provide(textEngine)
      )
  ],
  [
    "planEquivalent",
    Effect.flatMap(PlanExecutor.make({ handlers: [PlanExecutor.infer()] }), (executor) =>
      compare(
        `PlanExecutor, 3 chained infer steps vs the same plan run in plain Effect (bench/plainPlan.ts)`,
        2.0,
        planCall(executor),
        plainPlanEquivalent
      )).pipe(Effect.provide(textEngine))
  ],
  [
    "facade",
    Effect.flatMap(Facade.make(), (system) =>
      // for reference: the goal for the facade is against its plain-Effect equivalent (the next row); a bare
      // infer and an object draw no id, keep no session, cannot be cancelled and track no lifecycle
      compare<Engine | Constraint>(`Facade chat request vs infer + response object`, undefined, facadeCall(system), plainChat)).pipe(
        withConstraint(textEngine)
      )
  ],
  [
    "facadeEquivalent",
    Effect.flatMap(Effect.zip(Facade.make(), PlainFacade.make), ([system, endpoint]) =>
      compare<Engine | Constraint>(
        `Facade chat request vs the same request in plain Effect (bench/plainFacade.ts)`,
        2.0,
        facadeCall(system),
        plainFacadeCall(endpoint)
      )).pipe(withConstraint(textEngine))
  ],
  // last: once OpenTelemetry's SDK spans have run in a process, code measured after them there runs slower, though
  // its layer is released and no context manager stays
  ["telemetry", withTelemetry]
]

/** The comparisons (HOTPATH_BENCH_ONLY=<part of a key or name> picks some). */
export const comparisonsRun: Effect.Effect<ReadonlyArray<Comparison>> = Effect.forEach(
  comparisons.filter(([key]) => only === "" || only.split(",").some((o) => key.includes(o))),
  ([, c]) => c
)

/** The GC rows picked (HOTPATH_BENCH_ONLY, as the comparisons), measured first: in a process that ran nothing else yet. */
const gcRowsRun: Effect.Effect<ReadonlyArray<Row>> = Effect.forEach(
  gcRows.filter(([key]) => only === "" || only.split(",").some((o) => key.includes(o))),
  ([, r]) => r
)

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.zipWith(gcRowsRun, comparisonsRun, (gc, cs) => [...cs.map(rowOf), ...gc])

/**
 * The rows measured in a process of their own (this file run by node, as compiled,
 * or through tsx when it runs as TypeScript; rows as JSON on stdout): what ran before in the caller's process (other
 * benchmarks, OpenTelemetry's SDK) slows later code by up to 1.8x here.
 */
export const runIsolated: Effect.Effect<ReadonlyArray<Row>> = Effect.sync(() => {
  const file = fileURLToPath(import.meta.url)
  // compiled (`npm run bench`), the file runs as it is; its TypeScript source through tsx
  const out = execFileSync(process.execPath, file.endsWith(".ts") ? ["--import", "tsx", file] : [file], {
    env: { ...process.env, HOTPATH_BENCH_JSON: "1" },
    encoding: "utf8",
    maxBuffer: 16 * 1024 * 1024,
    timeout: 1_800_000
  })
  const line = out.split("\n").find((l) => l.startsWith("HOTPATH_ROWS "))
  if (line === undefined) throw new Error(`bench/hotpath.bench.ts printed no rows: ${out.slice(-500)}`)
  return JSON.parse(line.slice("HOTPATH_ROWS ".length)) as ReadonlyArray<Row>
})

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1] && process.env.HOTPATH_BENCH_JSON === "1") {
  NodeRuntime.runMain(Effect.flatMap(run, (rows) => Console.log(`HOTPATH_ROWS ${JSON.stringify(rows)}`)))
} else if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(2)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`))
    )
  )
}
