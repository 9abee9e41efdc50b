/**
 * What a user feels on the bundled model: the same short chat answer asked three
 * ways on one engine, one thread, alternating the order round by round:
 *
 * - the Engine called directly (`engine.infer`), the baseline;
 * - the facade (`PaganticSystem.run`, mode chat), as an application calls it;
 * - `pagantic serve`'s chat completions (the real HTTP server on loopback, with
 *   the same facade and engine), as an OpenAI client calls it.
 *
 * Every path asks every prompt once (greedy: the same text on every path), path p
 * of round r asking prompt r - p, so no two paths ask one prompt back to back; the
 * context has one sequence, so no path finds another's prompt kept in a sequence
 * and each evaluates it from the shared system prompt on. A row's ratio is the
 * median over prompts of the wall time on the path against the engine's; the CPU
 * time per call (this process: server and client) is beside it. Goals: facade
 * <= 1.05x, HTTP <= 1.15x.
 *
 *   npx tsx bench/model.bench.ts          (alone; MODEL_BENCH_ROUNDS, default 60)
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as http from "node:http"
import { fileURLToPath } from "node:url"
import * as Http from "../src/adapters/Http.js"
import * as Live from "../src/adapters/Live.js"
import * as Message from "../src/domain/Message.js"
import { ExecutionHints, SystemRequest } from "../src/domain/System.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { PaganticSystem } from "../src/programs/Facade.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"

const ROUNDS = Number(process.env.MODEL_BENCH_ROUNDS ?? 60)
const WARMUP = 3
const MAX_TOKENS = 64
const SYSTEM = "You are a helpful assistant."
const PROMPTS = [
  "What is the weather like today?",
  "Tell me something about cats.",
  "How do I bake bread?",
  "Name a good book to read."
]
/** Prompt j: one of a few questions, made new by its number. */
const prompt = (j: number) => `${PROMPTS[j % PROMPTS.length]!} (#${j})`

interface Call {
  readonly ms: number
  readonly cpuMs: number
  readonly tokens: number
}

const timed = <E, R>(effect: Effect.Effect<number, E, R>): Effect.Effect<Call, E, R> =>
  Effect.gen(function* () {
    const cpu = process.cpuUsage()
    const start = performance.now()
    const tokens = yield* effect
    const ms = performance.now() - start
    const used = process.cpuUsage(cpu)
    return { ms, cpuMs: (used.user + used.system) / 1000, tokens }
  })

const messages = (text: string) => [Message.system(SYSTEM), Message.user(text)]

const postJson = (agent: http.Agent, port: number, body: string) =>
  Effect.async<string, Error>((resume) => {
    const req = http.request(
      { host: "127.0.0.1", port, path: "/v1/chat/completions", method: "POST", agent, headers: { "content-type": "application/json" } },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          resume(res.statusCode === 200 ? Effect.succeed(text) : Effect.fail(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`)))
        })
      }
    )
    req.on("error", (e) => resume(Effect.fail(e)))
    req.end(body)
    return Effect.sync(() => req.destroy())
  })

const Completion = Schema.parseJson(Schema.Struct({ usage: Schema.Struct({ completion_tokens: Schema.Number }) }))

const ratioRow = (name: string, ours: ReadonlyArray<Call>, base: ReadonlyArray<Call>, goal: number): Row => {
  const ratios = ours.map((o, j) => o.ms / base[j]!.ms)
  const differ = ours.filter((o, j) => o.tokens !== base[j]!.tokens).length
  const ratio = median(ratios)
  const perCall = (calls: ReadonlyArray<Call>) =>
    `${median(calls.map((c) => c.ms)).toFixed(1)} ms, ${median(calls.map((c) => c.cpuMs)).toFixed(1)} ms CPU, ${median(calls.map((c) => c.tokens))} tok`
  return {
    name,
    ours: perCall(ours),
    baseline: `${perCall(base)} (engine direct${differ === 0 ? "" : `; ${differ} of ${ours.length} answers of another length`})`,
    ratio,
    spread: `${quantile(ratios, 0.25).toFixed(2)}-${quantile(ratios, 0.75).toFixed(2)}`,
    goal: `<= ${goal}`,
    met: ratio <= goal
  }
}

/** The three paths, ROUNDS rounds, one engine. */
export const run = Effect.gen(function* () {
  const engine = yield* Engine
  const system = yield* PaganticSystem
  const address = (yield* HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.die("expected a TCP address")
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))

  const direct = (text: string) =>
    Effect.map(engine.infer(new InferenceRequest({ messages: messages(text), maxTokens: MAX_TOKENS })), (r) => r.usage.outputTokens)
  const facade = (text: string) =>
    Effect.flatMap(
      system.run(SystemRequest.make({ mode: "chat", messages: messages(text), hints: new ExecutionHints({ maxTokens: MAX_TOKENS }) })),
      (r) => (r.error === undefined ? Effect.succeed(r.tokenUsage.outputTokens) : Effect.fail(new Error(r.error.message)))
    )
  const overHttp = (text: string) =>
    postJson(
      agent,
      address.port,
      JSON.stringify({ model: "pagantic", max_tokens: MAX_TOKENS, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: text }] })
    ).pipe(Effect.flatMap(Schema.decode(Completion)), Effect.map((c) => c.usage.completion_tokens))
  const paths = [direct, facade, overHttp] as const

  // calls[path][j]: prompt j asked on that path
  const calls: [Array<Call>, Array<Call>, Array<Call>] = [[], [], []]
  for (let round = 0; round < ROUNDS + WARMUP + 2; round++) {
    // Rotate which path goes first, so that none always follows another.
    for (let k = 0; k < 3; k++) {
      const path = (round + k) % 3
      const j = round - path
      if (j < 0 || j >= ROUNDS + WARMUP) continue
      calls[path]![j] = yield* timed(paths[path]!(prompt(j)))
    }
  }
  for (const c of calls) c.splice(0, WARMUP)
  return [
    ratioRow("bundled model, short chat answer: facade chat vs the engine called directly", calls[1], calls[0], 1.05),
    ratioRow("bundled model, short chat answer: HTTP chat completions vs the engine called directly", calls[2], calls[0], 1.15)
  ] satisfies ReadonlyArray<Row>
}).pipe(
  Effect.scoped,
  Effect.provide(
    Http.layer({ port: 0 }).pipe(
      Layer.provideMerge(Live.layer({ engine: LlamaEngine.layer({ threads: 1, sequences: 1 }), tools: [] }))
    )
  )
)

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      ))
  )
}
