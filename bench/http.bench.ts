/**
 * Load on the HTTP adapter: concurrent keep-alive clients on loopback against the
 * real server (`Http.layer`) with a scripted engine that answers at once, so what
 * is measured is the adapter, the facade and the loops, not inference.
 *
 * Per scenario: requests per second, the process's CPU time per request (server
 * and clients; less skewed by other processes than req/s), p50/p99 latency, and
 * heap used after a full GC after 1,000 requests against after 10,000 (goal: flat). Bounded in count and
 * in time; observability is the no-op layer so the event log does not grow.
 *
 *   npm run bench                     (with the engine benchmarks, bench/index.ts)
 *   npx tsx bench/http.bench.ts       (alone)
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as http from "node:http"
import { fileURLToPath } from "node:url"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import { Engine, InferenceResult, streamFrom, StreamPart } from "../src/services/Engine.js"
import type { Row } from "./Table.js"
import { mb, median, quantile } from "./Table.js"


export const CONCURRENCY = Number(process.env.HTTP_BENCH_CONCURRENCY ?? 16)
export const FIRST = Number(process.env.HTTP_BENCH_FIRST ?? 1_000)
export const TOTAL = Number(process.env.HTTP_BENCH_TOTAL ?? 10_000)
/** Heap after 10k may exceed heap after 1k by this factor and still count as flat. */
const FLAT = 1.25
const DEADLINE_MS = 300_000

const gc: () => void = (() => {
  const exposed = (globalThis as { gc?: () => void }).gc
  if (exposed !== undefined) return exposed
  v8.setFlagsFromString("--expose-gc")
  return vm.runInNewContext("gc") as () => void
})()

const heapAfterGc = (): number => {
  gc()
  gc()
  return process.memoryUsage().heapUsed
}


interface Scenario {
  readonly name: string
  /**
   * "scripted": ScriptedEngine (repeat-last), which keeps every request it was
   * sent for its test control, so the engine itself grows with the count;
   * "plain": the same canned answer from an engine that keeps nothing, so what
   * grows is the adapter and the facade.
   */
  readonly engine: "scripted" | "plain"
  readonly path: string
  /** GET when absent. */
  readonly body?: unknown
  readonly reply: string
  /** Structured requests carry no tools, so they make one inference each. */
  readonly tools?: boolean
  /** The status every answer must have. Default 200. */
  readonly status?: number
}

export const scenarios: ReadonlyArray<Scenario> = [
  // the adapter alone: routing, HttpApi encoding, the engine's model info
  { name: "health", engine: "plain", path: "/health", reply: "" },
  {
    name: "chat completions (ScriptedEngine)",
    engine: "scripted",
    path: "/v1/chat/completions",
    body: { messages: [{ role: "user", content: "ping" }], max_tokens: 16 },
    reply: "pong"
  },
  {
    name: "chat completions (plain engine)",
    engine: "plain",
    path: "/v1/chat/completions",
    body: { messages: [{ role: "user", content: "ping" }], max_tokens: 16 },
    reply: "pong"
  },
  {
    name: "run structured (plain engine)",
    engine: "plain",
    path: "/v1/run",
    body: {
      mode: "structured",
      messages: [{ role: "user", content: "ping" }],
      output: { schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] } }
    },
    reply: '{"ok": true}',
    tools: false
  },
  // refusals: the endpoints' typed errors, encoded by HttpApi with their status
  {
    name: "run refused by the facade (400)",
    engine: "plain",
    path: "/v1/run",
    body: { mode: "telepathy", messages: [{ role: "user", content: "ping" }] },
    reply: "",
    status: 400
  },
  {
    name: "chat completions refused by the handler (400)",
    engine: "plain",
    path: "/v1/chat/completions",
    body: { messages: [{ role: "wizard", content: "ping" }] },
    reply: "",
    status: 400
  }
]

/** A canned answer from an engine that records nothing. */
export const plainEngine = (content: string): Layer.Layer<Engine> => {
  const result = new InferenceResult({
    content,
    toolCalls: [],
    usage: TokenUsage.make({ promptTokens: 10, outputTokens: 1, contextWindow: 4096 }),
    finishReason: "stop"
  })
  return Layer.succeed(Engine, {
    infer: () => Effect.succeed(result),
    // by callback (Engine.streamFrom), as the library's own engines stream
    stream: () => streamFrom((emit) => Effect.zipRight(emit(StreamPart.textDelta(content)), emit(StreamPart.finish(result)))),
    modelInfo: Effect.succeed(
      new ModelInfo({ name: "plain", contextWindow: 4096, supportsGrammar: false, supportsTools: true })
    )
  })
}

/** One POST on a keep-alive agent; resolves with the latency in ms, rejects on any other status than `status`. */
const request = (agent: http.Agent, port: number, path: string, payload: string | undefined, status: number): Promise<number> =>
  new Promise((resolve, reject) => {
    const started = performance.now()
    const req = http.request(
      {
        agent,
        host: "127.0.0.1",
        port,
        path,
        method: payload === undefined ? "GET" : "POST",
        headers:
          payload === undefined
            ? {}
            : { "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
        timeout: 10_000
      },
      (res) => {
        res.resume()
        res.on("end", () =>
          res.statusCode === status ? resolve(performance.now() - started) : reject(new Error(`status ${res.statusCode}`))
        )
      }
    )
    req.on("timeout", () => req.destroy(new Error("request timed out")))
    req.on("error", reject)
    req.end(payload)
  })

/** `count` requests from CONCURRENCY clients; the latencies in ms. */
const drive = async (agent: http.Agent, port: number, scenario: Scenario, count: number, deadline: number) => {
  const payload = scenario.body === undefined ? undefined : JSON.stringify(scenario.body)
  const latencies: Array<number> = []
  let issued = 0
  const client = async () => {
    while (issued < count) {
      if (Date.now() > deadline) throw new Error("bench deadline exceeded")
      issued++
      latencies.push(await request(agent, port, scenario.path, payload, scenario.status ?? 200))
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, client))
  return latencies
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

export interface Result {
  readonly scenario: string
  readonly requestsPerSecond: number
  /**
   * CPU time of this process (server and clients) per request, in ms: less
   * skewed than req/s by other processes on a shared machine.
   */
  readonly cpuMsPerRequest: number
  readonly p50: number
  readonly p99: number
  readonly heapAt1k: number
  readonly heapAt10k: number
  readonly rssAt1k: number
  readonly rssAt10k: number
}

const measure = (scenario: Scenario): Effect.Effect<Result> =>
  Effect.scoped(
    Effect.gen(function* () {
      const engine =
        scenario.engine === "scripted"
          ? ScriptedEngine.layer([ScriptedEngine.reply(scenario.reply)], { whenExhausted: "repeat-last" })
          : plainEngine(scenario.reply)
      const context = yield* Layer.build(
        Http.layer({ port: 0 }).pipe(
          Layer.provideMerge(
            Live.layer({
              engine,
              observe: Layer.merge(Observe.eventLogNoop, Observe.metricsNoop),
              ...(scenario.tools === false ? { tools: [] } : {})
            })
          )
        )
      )
      const address = Context.get(context, HttpServer.HttpServer).address
      if (address._tag !== "TcpAddress") return yield* Effect.die("expected a TCP address")
      const port = address.port
      const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })
      yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))
      return yield* Effect.promise(async () => {
        const deadline = Date.now() + DEADLINE_MS
        await drive(agent, port, scenario, 200, deadline) // warm-up (JIT, connections)
        const first = await drive(agent, port, scenario, FIRST, deadline)
        const heapAt1k = heapAfterGc()
        const rssAt1k = process.memoryUsage().rss
        const restStarted = performance.now()
        const cpuStarted = process.cpuUsage()
        const rest = await drive(agent, port, scenario, TOTAL - FIRST, deadline)
        const restMs = performance.now() - restStarted
        const cpu = process.cpuUsage(cpuStarted)
        const heapAt10k = heapAfterGc()
        const rssAt10k = process.memoryUsage().rss
        const sorted = [...first, ...rest].sort((a, b) => a - b)
        return {
          scenario: scenario.name,
          requestsPerSecond: (rest.length / restMs) * 1000,
          cpuMsPerRequest: (cpu.user + cpu.system) / 1000 / rest.length,
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
          heapAt1k,
          heapAt10k,
          rssAt1k,
          rssAt10k
        }
      })
    })
  ).pipe(Effect.orDie)

const rowsOf = (r: Result): ReadonlyArray<Row> => [
  {
    name: `http ${r.scenario}: heap after ${TOTAL / 1000}k vs ${FIRST / 1000}k requests`,
    ours: mb(r.heapAt10k),
    baseline: mb(r.heapAt1k),
    ratio: r.heapAt10k / r.heapAt1k,
    spread: "-",
    goal: `<= ${FLAT} (flat)`,
    met: r.heapAt10k / r.heapAt1k <= FLAT
  },
  {
    name: `http ${r.scenario}: ${CONCURRENCY} clients, req/s; p50 / p99 latency`,
    ours: `${r.requestsPerSecond.toFixed(0)} req/s, ${r.cpuMsPerRequest.toFixed(2)} ms CPU/req`,
    baseline: `${r.p50.toFixed(1)} / ${r.p99.toFixed(1)} ms`,
    ratio: r.p99 / r.p50,
    spread: "-",
    goal: "p99 < 100 ms",
    met: r.p99 < 100
  }
]

// ---------------------------------------------------------------------------
// Against a bare @effect/platform route
// ---------------------------------------------------------------------------

const BARE_ROUNDS = Number(process.env.HTTP_BENCH_BARE_ROUNDS ?? 5)
const BARE_REQUESTS = Number(process.env.HTTP_BENCH_BARE_REQUESTS ?? 1_000)
/** Goal of the issue: at least twice the req/s measured before; p99 bounded. */
const BARE_P99_MS = 50

/**
 * The same JSON from a bare HttpServer route (HttpRouter, the body read and
 * parsed, the canned answer written) on a Node server of its own: what the
 * platform costs, without the adapter, the facade and the loops.
 */
const bareServer = (body: string) =>
  HttpRouter.empty.pipe(
    HttpRouter.post(
      "/v1/chat/completions",
      Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => request.json).pipe(
        Effect.as(HttpServerResponse.text(body, { contentType: "application/json" })),
        Effect.orElseSucceed(() => HttpServerResponse.empty({ status: 400 }))
      )
    ),
    HttpServer.serve(),
    Layer.provideMerge(NodeHttpServer.layer(http.createServer, { port: 0, host: "127.0.0.1" }))
  )

const portOf = (context: Context.Context<HttpServer.HttpServer>) =>
  Effect.gen(function* () {
    const address = Context.get(context, HttpServer.HttpServer).address
    return address._tag === "TcpAddress" ? address.port : yield* Effect.die("expected a TCP address")
  })

/** One POST's body, to serve the same bytes from the bare route. */
const bodyOf = (port: number, payload: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => (text += chunk))
        res.on("end", () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`status ${res.statusCode}: ${text}`))))
      }
    )
    req.on("error", reject)
    req.end(payload)
  })

export interface VersusBare {
  /** Our req/s over the bare route's, median of per-round ratios. */
  readonly ratio: number
  readonly ratios: ReadonlyArray<number>
  readonly oursRps: number
  readonly bareRps: number
  readonly oursP50: number
  readonly oursP99: number
  readonly bareP99: number
}

/**
 * `/v1/chat/completions` (plain engine, no-op observability) against the bare
 * route, CONCURRENCY keep-alive clients each, BARE_ROUNDS rounds of
 * BARE_REQUESTS requests per side, the order alternating.
 */
export const versusBare: Effect.Effect<VersusBare> = Effect.scoped(
  Effect.gen(function* () {
    const ours = yield* Layer.build(
      Http.layer({ port: 0 }).pipe(
        Layer.provideMerge(
          Live.layer({ engine: plainEngine("pong"), observe: Layer.merge(Observe.eventLogNoop, Observe.metricsNoop) })
        )
      )
    )
    const oursPort = yield* portOf(ours)
    const scenario = scenarios.find((s) => s.name === "chat completions (plain engine)")!
    const payload = JSON.stringify(scenario.body)
    const body = yield* Effect.promise(() => bodyOf(oursPort, payload))
    const barePort = yield* portOf(yield* Layer.build(bareServer(body)))
    const agents = [new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY }), new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })] as const
    yield* Effect.addFinalizer(() => Effect.sync(() => agents.forEach((a) => a.destroy())))
    return yield* Effect.promise(async () => {
      const deadline = Date.now() + DEADLINE_MS
      const side = async (which: 0 | 1, count: number) => {
        const started = performance.now()
        const latencies = await drive(agents[which], which === 0 ? oursPort : barePort, scenario, count, deadline)
        return { rps: (count / (performance.now() - started)) * 1000, latencies }
      }
      await side(0, 300) // warm-up (JIT, connections)
      await side(1, 300)
      const ratios: Array<number> = []
      const oursRps: Array<number> = []
      const bareRps: Array<number> = []
      const oursLatencies: Array<number> = []
      const bareLatencies: Array<number> = []
      for (let round = 0; round < BARE_ROUNDS; round++) {
        const [o, b] = round % 2 === 0
          ? [await side(0, BARE_REQUESTS), await side(1, BARE_REQUESTS)]
          : await side(1, BARE_REQUESTS).then(async (b) => [await side(0, BARE_REQUESTS), b] as const)
        ratios.push(o.rps / b.rps)
        oursRps.push(o.rps)
        bareRps.push(b.rps)
        oursLatencies.push(...o.latencies)
        bareLatencies.push(...b.latencies)
      }
      const sortedOurs = oursLatencies.sort((x, y) => x - y)
      return {
        ratio: median(ratios),
        ratios,
        oursRps: median(oursRps),
        bareRps: median(bareRps),
        oursP50: percentile(sortedOurs, 50),
        oursP99: percentile(sortedOurs, 99),
        bareP99: percentile(bareLatencies.sort((x, y) => x - y), 99)
      } satisfies VersusBare
    })
  })
).pipe(Effect.orDie)

export const versusBareRow = (v: VersusBare): Row => ({
  name: `http /v1/chat/completions vs a bare HttpServer route, ${CONCURRENCY} keep-alive clients: req/s ratio; p99`,
  ours: `${v.oursRps.toFixed(0)} req/s, p50 ${v.oursP50.toFixed(1)} / p99 ${v.oursP99.toFixed(1)} ms`,
  baseline: `${v.bareRps.toFixed(0)} req/s, p99 ${v.bareP99.toFixed(1)} ms (bare route)`,
  ratio: v.ratio,
  spread: `${quantile(v.ratios, 0.25).toFixed(2)}-${quantile(v.ratios, 0.75).toFixed(2)}`,
  goal: `p99 <= ${BARE_P99_MS} ms (req/s ratio reported)`,
  met: v.oursP99 <= BARE_P99_MS
})

/** Every scenario, as rows for bench/index.ts's table (ratio = heap 10k / 1k; p99 / p50). */
export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.map(
  Effect.forEach(scenarios, measure),
  (results) => results.flatMap(rowsOf)
)

/** The raw results, for running this file alone (HTTP_BENCH_ONLY=<part of a name> picks scenarios). */
export const results: Effect.Effect<ReadonlyArray<Result>> = Effect.forEach(
  scenarios.filter((s) => s.name.includes(process.env.HTTP_BENCH_ONLY ?? "")),
  measure
)

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1] && process.env.HTTP_BENCH_ONLY === "bare") {
  NodeRuntime.runMain(Effect.flatMap(versusBare, (v) => {
    const r = versusBareRow(v)
    return Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
  }))
} else if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(results, (rs) =>
      Effect.forEach(rs, (r) =>
        Console.log(
          `${r.scenario}: ${r.requestsPerSecond.toFixed(0)} req/s, ${r.cpuMsPerRequest.toFixed(2)} ms CPU/request, p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms, ` +
            `heap ${mb(r.heapAt1k)} -> ${mb(r.heapAt10k)} (x${(r.heapAt10k / r.heapAt1k).toFixed(2)}), ` +
            `rss ${mb(r.rssAt1k)} -> ${mb(r.rssAt10k)}`
        )
      )
    )
  )
}
