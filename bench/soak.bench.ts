/**
 * A soak of the HTTP adapter under faults: 1,000 requests from concurrent
 * keep-alive clients against the real server (`Http.layer`) whose engine fails
 * 30% of its calls, each failure kind of InferenceFailure in turn, and whose tools
 * hang (past their timeout) or throw.
 *
 * The engine knows which request each call belongs to (a `soak-<n>` tag in the
 * first user message, which may ask for a tool: `use hang`) and records what it
 * did, so every answer is checked against
 * what the taxonomy says should happen to it:
 *
 *   - a request whose last engine call answered: recovered (200), whatever failed
 *     before it (a retryable failure retried);
 *   - a request whose last call failed: that failure's code, with its status
 *     (the error taxonomy, `http/Status.ts`): INFERENCE_ENGINE_ERROR and
 *     INFERENCE_MALFORMED_RESPONSE 502 after their retries, INFERENCE_MODEL_UNAVAILABLE
 *     503 and INFERENCE_CONTEXT_EXCEEDED 422 at once (never retried);
 *   - a chat turn whose tool hangs or throws: the failure fed back to the model
 *     (AgentLoop recovers ToolFailure), answered 200 with the error in toolCallsMade;
 *   - a plan whose tool step hangs: TOOL_TIMEOUT 504; throws: TOOL_EXECUTION_FAILED
 *     422 (not retryable: the call as made cannot succeed).
 *
 * Nothing may be lost: every request gets an answer before the deadline. The heap
 * after a full GC is compared before and after (sessions the server keeps by
 * design cleared; the event log at a small bound that the warm-up fills).
 *
 *   npm run bench                     (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/soak.bench.ts       (alone)
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as HashSet from "effect/HashSet"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as http from "node:http"
import { fileURLToPath } from "node:url"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { ToolCall } from "../src/domain/Message.js"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import type { InferenceRequest } from "../src/services/Engine.js"
import { Engine, InferenceResult, StreamPart } from "../src/services/Engine.js"
import { ConversationStore } from "../src/services/ConversationStore.js"
import * as Tool from "../src/services/ToolRegistry.js"
import type { Row } from "./Table.js"
import { mb } from "./Table.js"

export const REQUESTS = Number(process.env.SOAK_REQUESTS ?? 1_000)
export const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 16)
/** Share of engine calls that fail. */
export const FAILURE_RATE = 0.3
const WARM_UP = 400
const DEADLINE_MS = 180_000
/** Heap after the soak may exceed heap before by this factor and still count as flat. */
const FLAT = 1.1
const TOOL_TIMEOUT = "300 millis"

// ---------------------------------------------------------------------------
// The faulty engine
// ---------------------------------------------------------------------------

type Kind = "engine error" | "model unavailable" | "context exceeded" | "malformed response"
const kinds: ReadonlyArray<Kind> = ["engine error", "model unavailable", "context exceeded", "malformed response"]

const failureOf = (kind: Kind): InferenceFailure => {
  switch (kind) {
    case "engine error":
      return InferenceFailure.engineError("soak: the engine failed")
    case "model unavailable":
      return InferenceFailure.modelUnavailable("soak: the model is not loaded")
    case "context exceeded":
      return InferenceFailure.contextExceeded("soak: the prompt does not fit")
    case "malformed response":
      return InferenceFailure.malformed("soak: the reply could not be parsed")
  }
}

/** What the taxonomy says a failure that ends a request is answered with. */
const expected: Readonly<Record<Kind, { readonly code: string; readonly status: number; readonly retryable: boolean }>> = {
  "engine error": { code: "INFERENCE_ENGINE_ERROR", status: 502, retryable: true },
  "malformed response": { code: "INFERENCE_MALFORMED_RESPONSE", status: 502, retryable: true },
  "model unavailable": { code: "INFERENCE_MODEL_UNAVAILABLE", status: 503, retryable: false },
  "context exceeded": { code: "INFERENCE_CONTEXT_EXCEEDED", status: 422, retryable: false }
}

type Outcome = "ok" | Kind

/** The calls the engine answered, per request tag, in order. */
interface Ledger {
  readonly calls: Map<number, Array<Outcome>>
  failures: number
  total: number
}

const usage = TokenUsage.make({ promptTokens: 20, outputTokens: 4, contextWindow: 4096 })

/**
 * An engine that fails `FAILURE_RATE` of its calls (a seeded sequence, each kind in
 * turn) and otherwise answers: with a call to the tool the first user message asks
 * for (`use hang`) until a tool has answered, else with text.
 */
const faultyEngine = (ledger: Ledger): Layer.Layer<Engine> => {
  let state = 0x5eed
  let nextKind = 0
  const random = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0
    return (state >>> 8) / 0x1000000
  }
  const answer = (request: InferenceRequest): Effect.Effect<InferenceResult, InferenceFailure> =>
    Effect.suspend(() => {
      const first = request.messages.find((m) => m.role === "user")?.content ?? ""
      const tag = Number(/soak-(\d+)/.exec(first)?.[1] ?? -1)
      const calls = ledger.calls.get(tag) ?? []
      ledger.calls.set(tag, calls)
      ledger.total++
      if (random() < FAILURE_RATE) {
        const kind = kinds[nextKind++ % kinds.length]!
        calls.push(kind)
        ledger.failures++
        return Effect.fail(failureOf(kind))
      }
      calls.push("ok")
      const toolAnswered = request.messages.some((m) => m.role === "tool")
      const tool = /use (\w+)/.exec(first)?.[1]
      if (tool !== undefined && !toolAnswered) {
        return Effect.succeed(
          new InferenceResult({
            content: "",
            toolCalls: [new ToolCall({ id: `call_${tag}`, name: tool, arguments: {} })],
            usage,
            finishReason: "tool_calls"
          })
        )
      }
      return Effect.succeed(
        new InferenceResult({ content: `answer ${tag}`, toolCalls: [], usage, finishReason: "stop" })
      )
    })
  return Layer.succeed(Engine, {
    infer: answer,
    stream: (request) =>
      Stream.unwrap(
        Effect.map(answer(request), (result) =>
          Stream.fromIterable<StreamPart>([
            StreamPart.textDelta(result.content),
            ...result.toolCalls.map(StreamPart.toolCall),
            StreamPart.finish(result)
          ]))
      ),
    modelInfo: Effect.succeed(new ModelInfo({ name: "faulty", contextWindow: 4096, supportsGrammar: false, supportsTools: true }))
  })
}

const hang = Tool.make({
  name: "hang",
  description: "Never returns",
  parameters: Schema.Struct({}),
  timeout: TOOL_TIMEOUT,
  handler: () => Effect.never
})

const boom = Tool.make({
  name: "boom",
  description: "Throws",
  parameters: Schema.Struct({}),
  handler: () =>
    Effect.sync((): string => {
      throw new Error("boom")
    })
})

// ---------------------------------------------------------------------------
// Requests and what their answers must be
// ---------------------------------------------------------------------------

type Shape = "run chat" | "chat completions" | "chat, hanging tool" | "chat, throwing tool" | "plan, hanging tool" | "plan, throwing tool"

const shapeOf = (n: number): Shape => {
  const r = n % 20
  return r < 11
    ? "run chat"
    : r < 15
    ? "chat completions"
    : r < 17
    ? "chat, hanging tool"
    : r === 17
    ? "chat, throwing tool"
    : r === 18
    ? "plan, hanging tool"
    : "plan, throwing tool"
}

const requestOf = (n: number): { readonly path: string; readonly body: unknown } => {
  const messages = [{ role: "user", content: `soak-${n}: answer please` }]
  switch (shapeOf(n)) {
    case "run chat":
      return { path: "/v1/run", body: { mode: "chat", messages } }
    case "chat completions":
      return { path: "/v1/chat/completions", body: { messages } }
    case "chat, hanging tool":
      return { path: "/v1/run", body: { mode: "chat", messages: [{ role: "user", content: `soak-${n}: use hang` }], tools: ["hang"] } }
    case "chat, throwing tool":
      return { path: "/v1/run", body: { mode: "chat", messages: [{ role: "user", content: `soak-${n}: use boom` }], tools: ["boom"] } }
    case "plan, hanging tool":
      return { path: "/v1/run", body: { mode: "plan", messages: [], plan: { steps: [{ name: "s", type: "tool", input: { name: "hang" } }] } } }
    case "plan, throwing tool":
      return { path: "/v1/run", body: { mode: "plan", messages: [], plan: { steps: [{ name: "s", type: "tool", input: { name: "boom" } }] } } }
  }
}

interface Answer {
  readonly status: number
  readonly body: any
}

/** Why an answer is not what the taxonomy says (undefined when it is), and how it ended. */
const judge = (
  n: number,
  answer: Answer,
  calls: ReadonlyArray<Outcome>
): { readonly verdict: "recovered" | "answered" | "reported"; readonly problem?: string } => {
  const shape = shapeOf(n)
  const code: string | undefined = answer.body?.error?.code
  const problem = (message: string) => ({ verdict: "reported" as const, problem: `request ${n} (${shape}): ${message}` })
  if (shape.startsWith("plan")) {
    const want = shape === "plan, hanging tool"
      ? { code: "TOOL_TIMEOUT", status: 504 }
      : { code: "TOOL_EXECUTION_FAILED", status: 422 }
    return answer.status === want.status && code === want.code
      ? { verdict: "reported" }
      : problem(`expected ${want.status} ${want.code}, got ${answer.status} ${code}`)
  }
  // the calls must follow the retry rules: a non-retryable failure ends the request,
  // a retryable one is retried (at most twice in a row)
  for (const [i, outcome] of calls.entries()) {
    if (outcome !== "ok" && !expected[outcome].retryable && i !== calls.length - 1) {
      return problem(`a ${outcome} was followed by another call: ${calls.join(", ")}`)
    }
  }
  let run = 0
  for (const outcome of calls) {
    run = outcome !== "ok" && expected[outcome].retryable ? run + 1 : 0
    if (run > 3) return problem(`more than 2 retries in a row: ${calls.join(", ")}`)
  }
  const last = calls.at(-1)
  if (last === undefined) return problem("the engine was never called")
  if (last === "ok") {
    if (answer.status !== 200) return problem(`the engine answered (${calls.join(", ")}), got ${answer.status} ${code}`)
    if (shape === "chat, hanging tool" || shape === "chat, throwing tool") {
      const record = answer.body?.toolCallsMade?.[0]
      const want = shape === "chat, hanging tool" ? "TOOL_TIMEOUT" : "TOOL_EXECUTION_FAILED"
      if (record?.isError !== true || !String(record?.result).includes(want)) {
        return problem(`expected the tool's ${want} fed back in toolCallsMade, got ${JSON.stringify(record)?.slice(0, 200)}`)
      }
    }
    return { verdict: calls.length > 1 || shape.includes("tool") ? "recovered" : "answered" }
  }
  const want = expected[last]
  if (last === "engine error" || last === "malformed response") {
    const tail = calls.slice(-3)
    if (tail.length < 3 || tail.some((o) => o === "ok" || !expected[o].retryable)) {
      return problem(`a retryable ${last} ended the request before 2 retries: ${calls.join(", ")}`)
    }
  }
  return answer.status === want.status && code === want.code
    ? { verdict: "reported" }
    : problem(`the last call failed with ${last}: expected ${want.status} ${want.code}, got ${answer.status} ${code}`)
}

// ---------------------------------------------------------------------------
// Driving it
// ---------------------------------------------------------------------------

const gc: () => void = (() => {
  const exposed = (globalThis as { gc?: () => void }).gc
  if (exposed !== undefined) return exposed
  v8.setFlagsFromString("--expose-gc")
  return vm.runInNewContext("gc") as () => void
})()

const heapAfterGc = async (): Promise<number> => {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  return process.memoryUsage().heapUsed
}


/** One POST; resolves with the status and parsed body, or undefined when no answer came. */
const post = (agent: http.Agent, port: number, path: string, body: unknown): Promise<Answer | undefined> =>
  new Promise((resolve) => {
    const payload = JSON.stringify(body)
    const req = http.request(
      {
        agent,
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
        timeout: 30_000
      },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on("end", () => {
          let parsed: unknown = undefined
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"))
          } catch {
            parsed = undefined
          }
          resolve({ status: res.statusCode ?? 0, body: parsed })
        })
        res.on("error", () => resolve(undefined))
      }
    )
    req.on("timeout", () => req.destroy(new Error("no answer in time")))
    req.on("error", () => resolve(undefined))
    req.end(payload)
  })

export interface Result {
  readonly requests: number
  readonly answered: number
  readonly lost: number
  readonly seconds: number
  readonly engineCalls: number
  readonly engineFailures: number
  /** Answered 200 after a failure (an engine failure retried, a tool failure fed back). */
  readonly recovered: number
  /** Answered 200 with nothing to recover from. */
  readonly answeredFirstTime: number
  /** Failed with the code and status the taxonomy says. */
  readonly reported: number
  readonly byStatus: ReadonlyMap<string, number>
  readonly problems: ReadonlyArray<string>
  /** Answers with a 5xx status, and the errors the server logged (each 5xx is logged). */
  readonly serverErrors: ReadonlyArray<number>
  readonly errorsLogged: number
  readonly heapBefore: number
  readonly heapAfter: number
}

// the server logs every 5xx: counted (to check that each was), not printed
const logged = { errors: 0 }
const countingLogger = Logger.make(({ logLevel }) => {
  if (logLevel._tag === "Error") logged.errors++
})

/** The soak; never longer than its deadline. */
export const soak: Effect.Effect<Result> = Effect.scoped(
  Effect.gen(function* () {
    const ledger: Ledger = { calls: new Map(), failures: 0, total: 0 }

    const context = yield* Layer.build(
      Http.layer({ port: 0 }).pipe(
        Layer.provideMerge(
          Live.layer({
            engine: faultyEngine(ledger),
            tools: [hang, boom],
            observe: Layer.merge(Observe.eventLogBounded({ maxEvents: 1_000 }), Observe.metricsBounded({ maxSamples: 64 }))
          })
        ),
        Layer.provide(Layer.locallyScoped(FiberRef.currentLoggers, HashSet.make<Array<Logger.Logger<unknown, any>>>(countingLogger)))
      )
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.die("expected a TCP address")
    const port = address.port
    const store = Context.get(context, ConversationStore)
    const clearSessions = () =>
      Effect.runPromise(Effect.flatMap(store.sessions, (ids) => Effect.forEach(ids, store.clear, { discard: true })))
    const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })
    yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))

    return yield* Effect.promise(async (): Promise<Result> => {
      const deadline = Date.now() + DEADLINE_MS
      const drive = async (from: number, count: number, onAnswer: (n: number, answer: Answer | undefined) => void) => {
        let next = from
        const client = async () => {
          while (next < from + count && Date.now() < deadline) {
            const n = next++
            const { body, path } = requestOf(n)
            onAnswer(n, await post(agent, port, path, body))
          }
        }
        await Promise.all(Array.from({ length: CONCURRENCY }, client))
      }
      // warm up (the JIT's code for every path, a few MB; connections; the event log to its bound), then measure
      await drive(1_000_000, WARM_UP, () => undefined)
      await clearSessions()
      const heapBefore = await heapAfterGc()
      ledger.calls.clear()
      ledger.failures = 0
      ledger.total = 0
      logged.errors = 0

      const started = performance.now()
      const answers = new Map<number, Answer | undefined>()
      await drive(0, REQUESTS, (n, answer) => answers.set(n, answer))
      const seconds = (performance.now() - started) / 1000

      const problems: Array<string> = []
      const byStatus = new Map<string, number>()
      let recovered = 0
      let answeredFirstTime = 0
      let reported = 0
      for (let n = 0; n < REQUESTS; n++) {
        const answer = answers.get(n)
        if (answer === undefined) {
          problems.push(`request ${n} (${shapeOf(n)}): ${answers.has(n) ? "no answer" : "never sent (deadline)"}`)
          continue
        }
        const key = `${answer.status}${answer.body?.error?.code === undefined ? "" : ` ${answer.body.error.code}`}`
        byStatus.set(key, (byStatus.get(key) ?? 0) + 1)
        const judged = judge(n, answer, ledger.calls.get(n) ?? [])
        if (judged.problem !== undefined) problems.push(judged.problem)
        else if (judged.verdict === "recovered") recovered++
        else if (judged.verdict === "answered") answeredFirstTime++
        else reported++
      }
      const answered = [...answers.values()].filter((a) => a !== undefined).length
      const answers5xx = [...answers.values()].flatMap((a) => (a !== undefined && a.status >= 500 ? [a.status] : []))
      answers.clear()
      await clearSessions()
      const heapAfter = await heapAfterGc()
      return {
        requests: REQUESTS,
        answered,
        lost: REQUESTS - answered,
        seconds,
        engineCalls: ledger.total,
        engineFailures: ledger.failures,
        recovered,
        answeredFirstTime,
        reported,
        byStatus,
        problems,
        serverErrors: [...answers5xx],
        errorsLogged: logged.errors,
        heapBefore,
        heapAfter
      }
    })
  })
).pipe(Effect.orDie)

/** The soak as rows of bench/index.ts's table. */
export const rowsOf = (r: Result): ReadonlyArray<Row> => [
  {
    name: `soak: ${r.requests} requests, ${CONCURRENCY} clients, answered (0 lost)`,
    ours: `${r.answered} in ${r.seconds.toFixed(1)} s`,
    baseline: `${r.requests}`,
    ratio: r.answered / r.requests,
    spread: "-",
    goal: "1.000 (all)",
    met: r.lost === 0
  },
  {
    name: "soak: engine calls that failed (each kind in turn)",
    ours: `${r.engineFailures}`,
    baseline: `${r.engineCalls} calls`,
    ratio: r.engineFailures / Math.max(1, r.engineCalls),
    spread: "-",
    goal: `~${FAILURE_RATE}`,
    met: Math.abs(r.engineFailures / Math.max(1, r.engineCalls) - FAILURE_RATE) < 0.05
  },
  {
    name: "soak: recovered (retried or fed back, 200) + reported (taxonomy code and status)",
    ours: `${r.recovered} + ${r.reported}`,
    baseline: `${r.recovered + r.reported + r.answeredFirstTime} (${r.answeredFirstTime} ok at once)`,
    ratio: (r.recovered + r.reported + r.answeredFirstTime) / r.requests,
    spread: "-",
    goal: "1.000, 0 wrong",
    met: r.problems.length === 0 && r.lost === 0
  },
  {
    name: "soak: 5xx answers logged by the server",
    ours: `${r.errorsLogged}`,
    baseline: `${r.serverErrors.length} 5xx`,
    ratio: r.errorsLogged / Math.max(1, r.serverErrors.length),
    spread: "-",
    goal: ">= 1 (each)",
    met: r.errorsLogged >= r.serverErrors.length
  },
  {
    name: "soak: heap after vs before (full GC; sessions cleared)",
    ours: mb(r.heapAfter),
    baseline: mb(r.heapBefore),
    ratio: r.heapAfter / r.heapBefore,
    spread: "-",
    goal: `<= ${FLAT} (flat)`,
    met: r.heapAfter / r.heapBefore <= FLAT
  }
]

/** The answers by status and code, one line each. */
export const breakdown = (r: Result): string =>
  [...r.byStatus.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, count]) => `  ${key.padEnd(36)} ${String(count).padStart(5)}`)
    .join("\n")

export const run: Effect.Effect<{ readonly rows: ReadonlyArray<Row>; readonly result: Result }> = Effect.map(
  soak,
  (result) => ({ rows: rowsOf(result), result })
)

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(soak, (r) =>
      Console.log(
        [
          ...rowsOf(r).map((row) => `${row.met ? "ok  " : "FAIL"} ${row.name}: ${row.ours} / ${row.baseline} (${row.ratio.toFixed(3)}, goal ${row.goal})`),
          "answers by status and code:",
          breakdown(r),
          ...r.problems.slice(0, 20).map((p) => `problem: ${p}`)
        ].join("\n")
      ))
  )
}
