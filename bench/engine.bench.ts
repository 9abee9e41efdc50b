/**
 * Engine benchmarks on the bundled model, each a ratio measured side by side in
 * one process, one thread, same model and settings. Every ratio is the median of
 * per-round ratios (a round runs both sides back to back, order alternating), with
 * the interquartile range beside it, because other processes on a shared machine
 * move single figures a lot.
 *
 * - pass-through: tokens/s (wall, and per CPU-second) through LlamaEngine versus
 *   node-llama-cpp's LlamaChat called directly; goal >= 0.95 (256 tokens: >= 0.97
 *   wall). Short answers (at most 16 tokens) show the engine's per-call work
 *   (prompt rendering, tokenizing, sequence choice) most.
 * - parallel sequences: five concurrent infers versus the same five one after
 *   another, each phase on prompts of its own; goal <= 0.45 of the sequential wall
 *   time. Also through RedundantLoop N=5 (concurrency 5 vs 1), and the same
 *   measurement on node-llama-cpp directly as a reference for what the machine and
 *   the library allow, and llama.cpp's own batching gain (one batch of 5 tokens vs
 *   5 batches of 1), the ceiling of any parallel speedup on this machine. On a long
 *   prompt, with prompt sharing on and off.
 * - multi-turn: prompt tokens evaluated at turn 20 versus turn 1 of one session;
 *   goal <= 1.5, beside what re-evaluating the whole history would cost.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaChat, LlamaGrammar } from "node-llama-cpp"
import type { ChatHistoryItem, LLamaChatGenerateResponseOptions } from "node-llama-cpp"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { PaganticChatWrapper } from "../src/layers/llama/PaganticChatWrapper.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"
import { reviewPrompt, SENTIMENT } from "./Reviews.js"


export const SEQUENCES = 6
/**
 * Pairs of short answers (~10 ms each): their ratio moves by +-0.1 from pair to
 * pair on a shared machine, so the median needs many of them to tell 0.92 from 0.95.
 */
const SHORT_ROUNDS = 200
/**
 * Pairs of the 256-token and chat-answer rows: a pair's ratio moves by a few percent on a shared machine, and the
 * median's spread shrinks only with the square root of the pairs.
 */
const LONG_ROUNDS = 60
const THREADS = 1
const SYSTEM = "You are a helpful assistant."
/** No accepting end: every run generates exactly maxTokens tokens. */
const ENDLESS = "root ::= [a-z ] root"

const now = Effect.sync(() => performance.now())
const iqr = (xs: ReadonlyArray<number>): string => `${quantile(xs, 0.25).toFixed(2)}-${quantile(xs, 0.75).toFixed(2)}`
const fmt = (n: number, digits = 0) => n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })

/** Wall time and the process's CPU time (all threads) of an effect, in milliseconds. */
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const cpu = yield* Effect.sync(() => process.cpuUsage())
    const start = yield* now
    const value = yield* effect
    const ms = (yield* now) - start
    const used = yield* Effect.sync(() => process.cpuUsage(cpu))
    return { value, ms, cpuMs: (used.user + used.system) / 1000 }
  })

// ---------------------------------------------------------------------------
// node-llama-cpp called directly, with the engine's settings
// ---------------------------------------------------------------------------

/** The bundled model and a context of `sequences` on node-llama-cpp alone, released with the scope. */
const loadDirect = (sequences: number, contextSize?: number) =>
  Effect.gen(function*() {
    const modelPath = LlamaEngine.bundledModelPath()
    const llama = yield* Effect.acquireRelease(
      Effect.promise(() => getLlama({ gpu: false, build: "never", maxThreads: THREADS })),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const model = yield* Effect.acquireRelease(
      Effect.promise(() => llama.loadModel({ modelPath, gpuLayers: 0 })),
      (model) => Effect.promise(() => model.dispose())
    )
    const context = yield* Effect.acquireRelease(
      Effect.promise(() =>
        model.createContext({
          sequences,
          contextSize: contextSize ?? Math.min(model.trainContextSize, LlamaEngine.DEFAULT_MAX_CONTEXT_SIZE),
          threads: THREADS
        })
      ),
      (context) => Effect.promise(() => context.dispose())
    )
    return { llama, model, context }
  })

const direct = Effect.gen(function*() {
  const { context, llama } = yield* loadDirect(SEQUENCES)
  const chat = new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: new PaganticChatWrapper() })
  const endless = new LlamaGrammar(llama, { grammar: ENDLESS })
  const generate = (prompt: string, maxTokens: number, grammar: boolean) =>
    Effect.promise(async () => {
      const history: Array<ChatHistoryItem> = [
        { type: "system", text: SYSTEM },
        { type: "user", text: prompt },
        { type: "model", response: [] }
      ]
      const options: LLamaChatGenerateResponseOptions = grammar ? { maxTokens, grammar: endless } : { maxTokens }
      const before = chat.sequence.tokenMeter.getState()
      const response = await chat.generateResponse(history, options)
      return { text: response.response, outputTokens: chat.sequence.tokenMeter.diff(before).usedOutputTokens }
    })
  // Five more chats on their own sequences, for the parallel reference.
  const replicas = Array.from(
    { length: 5 },
    () => new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: new PaganticChatWrapper() })
  )
  const sample = (replica: number, prompt: string, maxTokens: number, seed: number) =>
    Effect.promise(() =>
      replicas[replica]!.generateResponse([
        { type: "system", text: SYSTEM },
        { type: "user", text: prompt },
        { type: "model", response: [] }
      ], { maxTokens, temperature: 0.8, seed })
    )
  return { generate, sample }
})

// ---------------------------------------------------------------------------
// The three measurements
// ---------------------------------------------------------------------------

const ask = (prompt: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({ messages: [Message.system(SYSTEM), Message.user(prompt)], ...fields })



const PROMPTS = [
  "What is the weather like today?",
  "Tell me something about cats.",
  "How do I bake bread?",
  "What is 12 plus 7?",
  "The movie was not bad at all.",
  "Write a short greeting.",
  "Why is the sky blue?",
  "Describe a quiet morning."
]

/** A prompt that no other phase of the benchmarks has evaluated. */
const chatPrompt = (key: number) => `${PROMPTS[key % PROMPTS.length]!} (#${key})`

const passThrough = (label: string, maxTokens: number, grammar: boolean, rounds: number, goal = 0.95) =>
  Effect.gen(function*() {
    const engine = yield* Engine
    const baseline = yield* direct
    const ours: Array<number> = []
    const theirs: Array<number> = []
    const ratios: Array<number> = []
    const oursCpu: Array<number> = []
    const theirsCpu: Array<number> = []
    const cpuRatios: Array<number> = []
    for (let i = 0; i < rounds + 2; i++) {
      const prompt = PROMPTS[i % PROMPTS.length]!
      const request = ask(prompt, grammar ? { maxTokens, grammar: ENDLESS } : { maxTokens })
      // Alternate which side goes first so that neither profits from a warm cache.
      const runOurs = timed(engine.infer(request)).pipe(
        Effect.map(({ cpuMs, ms, value }) => ({ ms, cpuMs, tokens: value.usage.outputTokens }))
      )
      const runTheirs = timed(baseline.generate(prompt, maxTokens, grammar)).pipe(
        Effect.map(({ cpuMs, ms, value }) => ({ ms, cpuMs, tokens: value.outputTokens }))
      )
      const [a, b] = i % 2 === 0
        ? yield* Effect.all([runOurs, runTheirs])
        : yield* Effect.all([runTheirs, runOurs]).pipe(Effect.map(([t, o]) => [o, t] as const))
      if (i < 2) continue // warm-up
      ours.push(a.tokens / (a.ms / 1000))
      theirs.push(b.tokens / (b.ms / 1000))
      ratios.push(ours.at(-1)! / theirs.at(-1)!)
      oursCpu.push(a.tokens / (a.cpuMs / 1000))
      theirsCpu.push(b.tokens / (b.cpuMs / 1000))
      cpuRatios.push(oursCpu.at(-1)! / theirsCpu.at(-1)!)
    }
    // The median of the per-pair ratios: a pair runs back to back, so load that
    // drifts during the run (other processes on the machine) cancels out.
    const ratio = median(ratios)
    const cpuRatio = median(cpuRatios)
    return [
      {
        name: `pass-through tokens/s (wall), ${label}`,
        ours: `${fmt(median(ours))} tok/s`,
        baseline: `${fmt(median(theirs))} tok/s (node-llama-cpp direct)`,
        ratio,
        spread: iqr(ratios),
        goal: `>= ${goal}`,
        met: ratio >= goal
      },
      {
        name: `pass-through tokens per CPU-second, ${label}`,
        ours: `${fmt(median(oursCpu))} tok/cpu-s`,
        baseline: `${fmt(median(theirsCpu))} tok/cpu-s (node-llama-cpp direct)`,
        ratio: cpuRatio,
        spread: iqr(cpuRatios),
        goal: ">= 0.95",
        met: cpuRatio >= 0.95
      }
    ] satisfies ReadonlyArray<Row>
  }).pipe(Effect.scoped)

/**
 * Times `rounds` pairs of a sequential and a concurrent run, alternating which goes
 * first, and makes the table row: median times and the median per-round ratio.
 */
const concurrencyRow = <E, R>(
  name: string,
  goal: string,
  rounds: number,
  run: (round: number) => {
    readonly sequential: Effect.Effect<unknown, E, R>
    readonly concurrent: Effect.Effect<unknown, E, R>
  }
) =>
  Effect.gen(function*() {
    const sequential: Array<number> = []
    const concurrent: Array<number> = []
    const ratios: Array<number> = []
    for (let round = 0; round < rounds; round++) {
      const { concurrent: runConcurrent, sequential: runSequential } = run(round)
      if (round % 2 === 0) {
        sequential.push((yield* timed(runSequential)).ms)
        concurrent.push((yield* timed(runConcurrent)).ms)
      } else {
        concurrent.push((yield* timed(runConcurrent)).ms)
        sequential.push((yield* timed(runSequential)).ms)
      }
      ratios.push(concurrent.at(-1)! / sequential.at(-1)!)
    }
    const ratio = median(ratios)
    return {
      name,
      ours: `${fmt(median(concurrent))} ms concurrent`,
      baseline: `${fmt(median(sequential))} ms one after another`,
      ratio,
      spread: iqr(ratios),
      goal,
      met: ratio <= 0.45
    } satisfies Row
  })

/**
 * Every phase (sequential, concurrent, warm-up) gets prompts of its own (`key`), so
 * that neither finds the other's prompt already evaluated; the order alternates.
 */
const parallel = (label: string, make: (replica: number, key: number) => InferenceRequest, rounds: number) =>
  Effect.gen(function*() {
    const engine = yield* Engine
    const five = (key: number) => Array.from({ length: 5 }, (_, i) => engine.infer(make(i, key)))
    yield* Effect.all(five(2 * rounds), { concurrency: "unbounded" }) // warm-up
    return yield* concurrencyRow(`N=5 parallel sequences vs sequential, ${label}`, "<= 0.45", rounds, (round) => ({
      sequential: Effect.all(five(2 * round), { concurrency: 1 }),
      concurrent: Effect.all(five(2 * round + 1), { concurrency: "unbounded" })
    }))
  })

/** A review of about 370 tokens, new in every phase (the key comes first): the prompt dominates the cost. */
const longReviewPrompt = (key: number) =>
  `(#${key}) Classify the sentiment of the review:` +
  " The food was cold and the waiter was rude, but the view over the harbour was lovely and the dessert arrived quickly."
    .repeat(8) +
  " I would not come back."

/** RedundantLoop N=5 with all replicas at once versus concurrency 1, through the real program. */
const redundant = (rounds: number, label = "sentiment vote", prompt: (key: number) => string = reviewPrompt) =>
  Effect.gen(function*() {
    const vote = (review: string, concurrency: number) =>
      RedundantLoop.run(review, {
        schema: SENTIMENT,
        systemPrompt: "Classify the sentiment of the review.",
        n: 5,
        concurrency,
        temperature: 0.8,
        maxTokens: 24
      })
    yield* vote(prompt(2 * rounds), 5) // warm-up
    return yield* concurrencyRow(`RedundantLoop N=5 (${label}), concurrency 5 vs 1`, "<= 0.45", rounds, (round) => ({
      sequential: vote(prompt(2 * round), 1),
      concurrent: vote(prompt(2 * round + 1), 5)
    }))
  }).pipe(Effect.provide(ConstraintLive.layer))

/**
 * What batching can buy on this machine at all: llama.cpp decoding one token on
 * each of 5 sequences in one batch, versus the same 5 tokens in 5 batches of one.
 * No sampling, no chat logic: the ceiling for any parallel-sequence speedup here.
 */
const batchCeiling = (steps: number) =>
  Effect.gen(function*() {
    const { context, model } = yield* loadDirect(5, 1024)
    const sequences = Array.from({ length: 5 }, () => context.getSequence())
    const start = model.tokenize("Classify the sentiment of the review: the food was cold.")
    yield* Effect.promise(() => Promise.all(sequences.map((s) => s.evaluateWithoutGeneratingNewTokens(start))))
    const token = start[start.length - 1]!
    const one = (i: number) => Effect.promise(() => sequences[i]!.evaluateWithoutGeneratingNewTokens([token]))
    const row = yield* concurrencyRow(
      "reference: llama.cpp decoding 1 token on each of 5 sequences, one batch vs 5 batches",
      "(reference)",
      steps,
      () => ({
        sequential: Effect.forEach([0, 1, 2, 3, 4], one, { discard: true }),
        concurrent: Effect.forEach([0, 1, 2, 3, 4], one, { discard: true, concurrency: "unbounded" })
      })
    )
    return row
  }).pipe(Effect.scoped)

/** The same five sampled chat replicas through node-llama-cpp directly: the ceiling of the machine and library. */
const parallelDirect = (rounds: number) =>
  Effect.gen(function*() {
    const baseline = yield* direct
    const five = (key: number) =>
      Array.from({ length: 5 }, (_, i) => baseline.sample(i, chatPrompt(key), 64, 1000 * key + i))
    yield* Effect.all(five(2 * rounds), { concurrency: "unbounded" })
    return yield* concurrencyRow("reference: node-llama-cpp direct, 5 sampled chat replicas on 5 sequences", "(reference)", rounds, (round) => ({
      sequential: Effect.all(five(2 * round), { concurrency: 1 }),
      concurrent: Effect.all(five(2 * round + 1), { concurrency: "unbounded" })
    }))
  }).pipe(Effect.scoped)

const multiTurn = (turns: number) =>
  Effect.gen(function*() {
    const engine = yield* Engine
    // A system prompt no earlier benchmark evaluated, so that turn 1 pays for its whole prompt.
    const messages: Array<Message.Message> = [Message.system(`${SYSTEM} Answer briefly.`)]
    let first = 0
    let last = 0
    let fullHistory = 0
    const between: Array<number> = []
    for (let turn = 1; turn <= turns; turn++) {
      messages.push(Message.user(`Question ${turn} of this chat: what is ${turn} plus ${turn + 2}?`))
      const result = yield* engine.infer(new InferenceRequest({ messages, maxTokens: 24, sessionKey: "bench-session" }))
      messages.push(Message.assistant(result.content))
      if (turn === 1) first = result.usage.promptTokens
      else between.push(result.usage.promptTokens)
      if (turn === turns) {
        last = result.usage.promptTokens
        fullHistory = result.usage.contextTokens - result.usage.outputTokens
      }
    }
    const ratio = last / first
    return {
      name: `multi-turn prompt tokens evaluated, turn ${turns} vs 1`,
      ours: `${last} tokens at turn ${turns} (${first} at turn 1, median ${median(between)} over turns 2-${turns})`,
      baseline: `${fullHistory} tokens to re-evaluate the whole history (${fmt(fullHistory / first, 1)}x)`,
      ratio,
      spread: "(exact count)",
      goal: "<= 1.5",
      met: ratio <= 1.5
    } satisfies Row
  })

/** The pass-through rows alone (`npx tsx bench/engine.bench.ts passthrough`). */
export const runPassThrough = Effect.gen(function*() {
  const rows: Array<Row> = []
  rows.push(...yield* passThrough("256 tokens (grammar, no early stop)", 256, true, LONG_ROUNDS, 0.97))
  rows.push(...yield* passThrough("short answers (<= 16 tokens, greedy)", 16, false, SHORT_ROUNDS))
  return rows
}).pipe(Effect.provide(Layer.fresh(LlamaEngine.layer({ sequences: SEQUENCES, threads: THREADS }))))

/** Runs every measurement against one engine on the bundled model. */
export const run = Effect.gen(function*() {
  const rows: Array<Row> = []
  rows.push(...yield* passThrough("256 tokens (grammar, no early stop)", 256, true, LONG_ROUNDS, 0.97))
  rows.push(...yield* passThrough("chat answers (greedy, natural stop)", 64, false, LONG_ROUNDS))
  rows.push(...yield* passThrough("short answers (<= 16 tokens, greedy)", 16, false, SHORT_ROUNDS))
  rows.push(
    yield* parallel(
      "5 sampled replicas of a sentiment prompt, JSON schema (temperature 0.8)",
      (i, key) =>
        ask(reviewPrompt(key), { schema: SENTIMENT, maxTokens: 24, temperature: 0.8, seed: 1000 * key + i }),
      9
    )
  )
  rows.push(
    yield* parallel(
      "5 sampled chat replicas, free text up to 64 tokens (temperature 0.8)",
      (i, key) => ask(chatPrompt(key), { maxTokens: 64, temperature: 0.8, seed: 1000 * key + i }),
      9
    )
  )
  rows.push(yield* parallelDirect(9))
  rows.push(
    yield* parallel(
      "5 different prompts, 128 tokens each under a grammar",
      (i, key) => ask(`${PROMPTS[i]!} (#${key})`, { maxTokens: 128, grammar: ENDLESS }),
      5
    )
  )
  rows.push(yield* batchCeiling(200))
  rows.push(yield* redundant(9))
  rows.push(yield* redundant(9, "sentiment vote on a 370-token review, prompt sharing", longReviewPrompt))
  rows.push(
    yield* redundant(5, "the same, prompt sharing off", longReviewPrompt).pipe(
      Effect.provide(Layer.fresh(LlamaEngine.layer({ sequences: SEQUENCES, threads: THREADS, shareMinTokens: 0 })))
    )
  )
  rows.push(yield* multiTurn(20))
  return rows
}).pipe(Effect.provide(Layer.fresh(LlamaEngine.layer({ sequences: SEQUENCES, threads: THREADS }))))

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1] && process.argv[2] === "passthrough") {
  NodeRuntime.runMain(
    Effect.flatMap(runPassThrough, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      ))
  )
}
