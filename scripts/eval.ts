/**
 * `npm run eval`: what the bundled model does on held-out sets the training never
 * saw, measured through the library itself (the real llama.cpp engine, the real
 * loops), not through node-llama-cpp directly:
 *
 *   sentiment   Structured (ChatStructured) with the JSON-schema grammar, greedy, on
 *               four sets: the synthetic held-out set (the older templates), the
 *               unseen-word set (only words of the lexicon's held-out split, see
 *               training/lexicon.ts), 72 everyday reviews written by hand outside the
 *               generator, and the older 33 hand-written reviews
 *   calculator  AgentLoop with the calculator tool: the final answer must be right
 *   decomposition  requests of the one family the bundled model was taught
 *               ("classify these reviews and add up these numbers") held out in
 *               training/eval/decomposition.jsonl, asked with the orchestrator's
 *               analyzer prompt (Analyzer.renderInstruction/renderRequest, default
 *               config, JSON parser) through Structured and the orchestrator's
 *               TaskList schema (Task.taskListFor(["sentiment", "calculator"])), greedy,
 *               twice: as the bundled analyzer asks (BUNDLED_ANALYZER.quoted: a
 *               sentiment task's description held by the grammar to one of the
 *               reviews the request quotes) and with the plain schema (the model
 *               copies each review itself): right tasks (processor, review or
 *               expression) and dependencies;
 *               and the same requests sampled (temperature 0.8, seed = index)
 *               straight through the Engine: does the TaskList decode?
 *   voting      at a sampling temperature (default 2, top-p 1: where the bundled
 *               model's replicas disagree now and then), one structured call versus a
 *               RedundantLoop of N=5 with majority voting, on the same reviews
 *   patterns    single_shot (3 llm responders at different sampling), waterfall and
 *               verify as infer.query.v1 queries through the facade, on the synthetic
 *               and unseen-word sets: accuracy, mean CALLs per query and how the
 *               queries ended (scripts/evalPatterns.ts); the responders asked in the
 *               bundled model's trained form (default) or with the library's query
 *               prompt (--prompt query, or both; --warm T, --hot T)
 *
 *               Votes are drawn both ways unless `--sampling tree|independent`
 *               picks one: "tree" (replicas started together, one prefix-tree
 *               sampleMany) and "independent" (each replica its own infer).
 * Usage: npm run eval [-- --model path.gguf --limit 100 --temperature 2 --top-p 1 --n 5 --sampling tree --only sentiment,decomposition,patterns --verbose --provisional]
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as JsonConstraint from "../src/layers/JsonConstraint.js"
import * as Constraint from "../src/services/Constraint.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { BUNDLED_ANALYZER, BUNDLED_SENTIMENT_SCHEMA } from "../src/layers/llama/PaganticChatWrapper.js"
import * as ToolRegistry from "../src/layers/InProcessToolRegistry.js"
import { calculator } from "../src/layers/tools/Calculator.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"
import * as Structured from "../src/programs/Structured.js"
import * as Message from "../src/domain/Message.js"
import * as Task from "../src/domain/Task.js"
import * as Analyzer from "../src/programs/orchestrator/Analyzer.js"
import * as TaskParser from "../src/programs/orchestrator/TaskParser.js"
import type { JsonSchema } from "../src/domain/JsonSchema.js"
import * as EvalPatterns from "./evalPatterns.js"
import { Reporter } from "../src/adapters/cli/Progress.js"

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? process.argv[i + 1] : undefined
}
const limit = Number(arg("limit") ?? Infinity)
const temperature = Number(arg("temperature") ?? 2)
const votes = Number(arg("n") ?? 5)
// llama.cpp's default nucleus (0.95) cuts a confident model's tail before temperature
// can matter; sampling from the whole distribution is what makes replicas disagree
const topP = Number(arg("top-p") ?? 1)
const modelPath = arg("model")
/** `--sampling tree|independent`: how the votes' replicas are drawn (default: both, one line each). */
const samplings: ReadonlyArray<"tree" | "independent"> = arg("sampling") === "tree"
  ? ["tree"]
  : arg("sampling") === "independent"
  ? ["independent"]
  : ["tree", "independent"]
/** `--only sentiment,decomposition` runs only those parts (sentiment, calculator, decomposition, voting, patterns). */
const only = arg("only")?.split(",")
const runs = (part: string): boolean => only === undefined || only.includes(part)

const root = path.resolve(import.meta.dirname, "..")
const readJsonl = <A>(file: string): ReadonlyArray<A> =>
  fs
    .readFileSync(path.join(root, "training", "eval", file), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as A)
    .slice(0, limit)

interface Review {
  readonly review: string
  readonly label: string
}
interface Question {
  readonly question: string
  readonly expression: string
  readonly result: string
  readonly answer: string
}

const schema = BUNDLED_SENTIMENT_SCHEMA as unknown as JsonSchema
const system = [Message.system("Classify the sentiment of the review.")]
const labelOf = (value: unknown) => (value as { sentiment?: string }).sentiment

/** A progress line on standard error (live on a terminal, plain lines otherwise); `tick` advances it. */
const progress = (label: string, total: number, unit: string) => {
  const reporter = new Reporter(label, total, unit)
  return { tick: Effect.sync(() => reporter.advance()), end: Effect.sync(() => reporter.end()) }
}

const pct = (k: number, n: number) => `${k}/${n} (${n === 0 ? "-" : ((100 * k) / n).toFixed(1)}%)`

const sentiment = (file: string) =>
  Effect.gen(function* () {
    const reviews = readJsonl<Review>(file)
    const bar = progress(`sentiment ${file}`, reviews.length, "reviews")
    const outcomes = yield* Effect.forEach(
      reviews,
      (r) =>
        Structured.run([...system, Message.user(r.review)], {
          schema,
          temperature: 0,
          maxTokens: 24,
          retry: RetryPolicy.none
        }).pipe(
          Effect.map((res) => labelOf(res.value) === r.label),
          Effect.orElseSucceed(() => false),
          Effect.zipLeft(bar.tick)
        ),
      { concurrency: 4 }
    )
    yield* bar.end
    const labels = Array.from(new Set(reviews.map((r) => r.label))).sort()
    const byLabel = labels.map((label) => {
      const of = reviews.map((r, i) => [r, outcomes[i]] as const).filter(([r]) => r.label === label)
      return `${label} ${of.filter(([, right]) => right).length}/${of.length}`
    })
    return { correct: outcomes.filter(Boolean).length, total: reviews.length, byLabel: byLabel.join(", ") }
  })

const tools = Effect.gen(function* () {
  const questions = readJsonl<Question>("calculator.jsonl")
  const bar = progress("calculator", questions.length, "questions")
  let called = 0
  let rightArgs = 0
  let rightAnswer = 0
  for (const q of questions) {
    yield* bar.tick
    const agent = yield* AgentLoop.make({ maxToolIterations: 3, temperature: 0, maxTokens: 48 })
    const turn = yield* Effect.either(agent.chat(q.question))
    if (turn._tag === "Left") continue
    const call = turn.right.toolCalls[0]
    if (call !== undefined && call.name === "calculator") called++
    if (call !== undefined && String(call.arguments.expression).replace(/\s+/g, "") === q.expression.replace(/\s+/g, "")) {
      rightArgs++
    }
    if (turn.right.content.trim() === q.answer || turn.right.content.includes(q.result)) rightAnswer++
  }
  yield* bar.end
  return { called, rightArgs, rightAnswer, total: questions.length }
})

/** The engine without its own sampleMany: replicas started together each make their own infer. */
const independentEngine = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Engine, (engine) =>
    Effect.provideService(effect, Engine, { infer: engine.infer, stream: engine.stream, modelInfo: engine.modelInfo }))

const voting = (sampling: "tree" | "independent") => Effect.gen(function* () {
  const reviews = readJsonl<Review>("sentiment.jsonl")
  const single = yield* Effect.forEach(
    reviews,
    (r) =>
      Structured.run([...system, Message.user(r.review)], {
        schema,
        temperature,
        topP,
        maxTokens: 24,
        retry: RetryPolicy.none
      }).pipe(
        Effect.map((res) => labelOf(res.value) === r.label),
        Effect.orElseSucceed(() => false)
      ),
    { concurrency: 2 }
  )
  const bar = progress(`vote N=${votes} (${sampling})`, reviews.length, "reviews")
  const voted = yield* Effect.forEach(
    reviews,
    (r) =>
      RedundantLoop.run(r.review, {
        schema,
        systemPrompt: "Classify the sentiment of the review.",
        n: votes,
        temperature,
        topP,
        maxTokens: 24
      }).pipe(
        sampling === "independent" ? independentEngine : (effect) => effect,
        Effect.map((res) => labelOf(res.value) === r.label),
        Effect.orElseSucceed(() => false),
        Effect.zipLeft(bar.tick)
      ),
    { concurrency: 1 }
  )
  yield* bar.end
  return { single: single.filter(Boolean).length, voted: voted.filter(Boolean).length, total: reviews.length }
})

/** What training/run.sh recorded about the model it trained (training/model-info.json), if present. */
const trainingInfo = (file: string): string => {
  const infoPath = path.join(root, "training", "model-info.json")
  if (!fs.existsSync(infoPath)) return "training time unknown (no training/model-info.json)"
  const info = JSON.parse(fs.readFileSync(infoPath, "utf8")) as {
    readonly sha256?: string
    readonly minutes?: number
    readonly steps?: number
    readonly parameters?: number
    readonly shape?: string
    readonly pipeline?: string
  }
  const sha = crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex")
  const same = info.sha256 === sha ? "" : " (recorded for another file: this one was not trained by the recorded run)"
  const how = info.pipeline === undefined ? "" : ` (${info.pipeline})`
  return `${info.shape ?? "?"}, ${(info.parameters ?? 0).toLocaleString("en")} parameters, trained ${info.minutes ?? "?"} minutes, ${(info.steps ?? 0).toLocaleString("en")} steps${how}${same}`
}

// ---------------------------------------------------------------------------
// Task decomposition
// ---------------------------------------------------------------------------

interface DraftTask {
  readonly id: string
  readonly type: string
  readonly processor: string
  readonly priority: number
  readonly dependencies: ReadonlyArray<string>
  readonly description: string
  readonly metadata: Readonly<Record<string, string>>
}
interface Decomposition {
  readonly request: string
  readonly list: { readonly analysis: string; readonly tasks: ReadonlyArray<DraftTask> }
}

/** The orchestrator's TaskList schema with the two processors the bundled model knows. */
const taskListSchema = Task.taskListFor(["sentiment", "calculator"])
const verbose = process.argv.includes("--verbose")
const processors = ["sentiment", "calculator"] as const
/**
 * The analyzer's messages for a request: the orchestrator's own rendering with the
 * JSON parser and the bundled model's AnalyzerConfig (BUNDLED_ANALYZER), with
 * --default-analyzer the orchestrator's default AnalyzerConfig, or with
 * --provisional the prompt of an earlier training stage.
 */
const analyzerMessages = (request: string): ReadonlyArray<Message.Message> =>
  process.argv.includes("--provisional")
    ? [Message.system("Break the request into tasks. Answer with a JSON task list."), Message.user(request)]
    : [
      Message.system(
        Analyzer.renderInstruction(process.argv.includes("--default-analyzer") ? {} : BUNDLED_ANALYZER, TaskParser.json())
      ),
      Message.user(Analyzer.renderRequest(request, {}, processors))
    ]

const sameTasks = (want: ReadonlyArray<DraftTask>, got: ReadonlyArray<DraftTask>): boolean => {
  if (want.length !== got.length) return false
  const norm = (s: string | undefined) => (s ?? "").replace(/\s+/g, "")
  const byId = new Map(got.map((t) => [t.id, t]))
  return want.every((w) => {
    const g = byId.get(w.id)
    if (g === undefined || g.processor !== w.processor) return false
    const content =
      w.processor === "calculator" ? norm(g.metadata?.expression) === norm(w.metadata.expression) : g.description === w.description
    const deps = [...g.dependencies].sort().join(",") === [...w.dependencies].sort().join(",")
    return content && deps
  })
}

/**
 * One greedy pass over the held-out requests. `grounded`: as the bundled analyzer
 * asks (`BUNDLED_ANALYZER.quoted`: a sentiment task's description is one of the
 * reviews the request quotes, held to that by the grammar); otherwise the plain
 * TaskList schema, the model copying every review by itself.
 */
const decompositionPass = (items: ReadonlyArray<Decomposition>, grounded: boolean) =>
  Effect.gen(function* () {
    let decoded = 0
    let right = 0
    let exact = 0
    const bar = progress(grounded ? "decomposition (grounded)" : "decomposition", items.length, "requests")
    for (const d of items) {
      yield* bar.tick
      const grounding = grounded ? Analyzer.groundingFor(d.request, BUNDLED_ANALYZER) : undefined
      const res = yield* Effect.either(
        Structured.run(analyzerMessages(d.request), {
          schema: Task.taskListFor(processors, grounding),
          temperature: 0,
          maxTokens: 768,
          retry: RetryPolicy.none
        })
      )
      if (res._tag === "Left") {
        if (verbose) console.log(`  decomposition failed: ${d.request}: ${res.left.message}`)
        continue
      }
      decoded++
      const got = res.right.value
      if (verbose && !sameTasks(d.list.tasks, got.tasks)) console.log(`  decomposition miss${grounded ? " (grounded)" : ""}: ${d.request}\n    got  ${Task.toJson(got)}`)
      if (sameTasks(d.list.tasks, got.tasks)) right++
      if (Task.toJson(got) === JSON.stringify(d.list)) exact++
    }
    yield* bar.end
    return { decoded, right, exact }
  })

const decomposition = Effect.gen(function* () {
  const items = readJsonl<Decomposition>("decomposition.jsonl")
  const engine = yield* Engine
  const constraint = yield* Constraint.Constraint
  const validate = Schema.decodeUnknownEither(taskListSchema)
  const jsonSchema = constraint.toJsonSchema(taskListSchema)
  const alone = yield* decompositionPass(items, false)
  const grounded = yield* decompositionPass(items, true)
  let sampledDecoded = 0
  const sampledBar = progress("decomposition sampled", items.length, "requests")
  for (const [i, d] of items.entries()) {
    yield* sampledBar.tick
    const res = yield* Effect.either(
      engine.infer(
        new InferenceRequest({
          messages: analyzerMessages(d.request),
          schema: jsonSchema,
          temperature: 0.8,
          seed: i + 1,
          maxTokens: 768
        })
      )
    )
    if (res._tag === "Left") continue
    const parsed = Either.try(() => JSON.parse(res.right.content) as unknown)
    if (Either.isRight(parsed) && Either.isRight(validate(parsed.right))) sampledDecoded++
  }
  yield* sampledBar.end
  return { alone, grounded, sampledDecoded, total: items.length }
})

const program = Effect.gen(function* () {
  const started = Date.now()
  const file = path.resolve(modelPath ?? path.join(root, "models", "pagantic-tiny.gguf"))
  console.log(`file: ${path.relative(root, file)}, ${(fs.statSync(file).size / 1e6).toFixed(2)} MB; ${trainingInfo(file)}`)
  const model = yield* Effect.flatMap(Engine, (engine) => engine.modelInfo)
  console.log(`model: ${model.name} (context ${model.contextWindow}), greedy unless noted\n`)
  if (runs("sentiment")) {
    const s1 = yield* sentiment("sentiment.jsonl")
    console.log(`sentiment, held-out synthetic:    ${pct(s1.correct, s1.total)}   goal >= 95%`)
    console.log(`                                  by label: ${s1.byLabel}`)
    const s3 = yield* sentiment("sentiment-unseen.jsonl")
    console.log(`sentiment, unseen-word held-out:  ${pct(s3.correct, s3.total)}   goal >= 90%`)
    console.log(`                                  by label: ${s3.byLabel}`)
    const s2 = yield* sentiment("sentiment-handwritten.jsonl")
    console.log(`sentiment, hand-written everyday: ${pct(s2.correct, s2.total)}   goal >= 90%`)
    console.log(`                                  by label: ${s2.byLabel}`)
    const s4 = yield* sentiment("sentiment-handwritten-lexicon.jsonl")
    console.log(`sentiment, older hand-written:    ${pct(s4.correct, s4.total)}`)
    console.log(`                                  by label: ${s4.byLabel}`)
  }
  if (runs("calculator")) {
    const t = yield* tools
    console.log(`calculator via AgentLoop:         called ${pct(t.called, t.total)}, right arguments ${pct(t.rightArgs, t.total)}`)
    console.log(`                                  right final answer ${pct(t.rightAnswer, t.total)}   goal >= 90%`)
  }
  if (runs("decomposition")) {
    const d = yield* decomposition
    console.log(`task decomposition (held-out), as the bundled analyzer asks (reviews copied by the grammar):`)
    console.log(`                                  decodes ${pct(d.grounded.decoded, d.total)}, right tasks and dependencies ${pct(d.grounded.right, d.total)}   goal >= 90%`)
    console.log(`                                  exact TaskList ${pct(d.grounded.exact, d.total)}`)
    console.log(`task decomposition, the model alone (copying the reviews itself):`)
    console.log(`                                  decodes ${pct(d.alone.decoded, d.total)}, right tasks and dependencies ${pct(d.alone.right, d.total)}, exact TaskList ${pct(d.alone.exact, d.total)}`)
    console.log(`                                  sampled at 0.8 (seed = index) decodes ${pct(d.sampledDecoded, d.total)}   goal 100/100`)
  }
  if (runs("voting")) {
    for (const sampling of samplings) {
      const v = yield* voting(sampling)
      console.log(`sentiment at temperature ${temperature}, top-p ${topP}: single-shot ${pct(v.single, v.total)} (${sampling} votes)`)
      console.log(`                                  RedundantLoop N=${votes} majority ${pct(v.voted, v.total)}, ${sampling} sampling`)
    }
  }
  if (runs("patterns")) {
    // the query prompt's rows take about four times as long (the model writes past the label): asked for
    const prompts = arg("prompt") === "both"
      ? (["trained", "query"] as const)
      : [arg("prompt") === "query" ? "query" as const : "trained" as const]
    for (const prompt of prompts) {
      const options = {
        warm: arg("warm") === undefined ? undefined : Number(arg("warm")),
        hot: arg("hot") === undefined ? undefined : Number(arg("hot")),
        prompt,
        verbose
      }
      console.log(`orchestration patterns (mode query; llm responders greedy, warm at ${options.warm ?? 1}, hot at ${options.hot ?? 2}; ${prompt} prompt):`)
      for (const [set, file] of [["held-out synthetic", "sentiment.jsonl"], ["unseen-word", "sentiment-unseen.jsonl"]] as const) {
        const patternStarted = Date.now()
        const rows = yield* EvalPatterns.run(readJsonl<EvalPatterns.Review>(file), options)
        for (const row of rows) {
          const statuses = Object.entries(row.statuses).map(([s, n]) => `${s} ${n}`).join(", ")
          console.log(
            `  ${set}, ${row.pattern.padEnd(11)} ${pct(row.correct, row.total)}, ${(row.calls / Math.max(1, row.completed)).toFixed(2)} CALLs/query` +
              ` (${row.calls} CALLs over the ${row.completed} completed; ${statuses})`
          )
        }
        console.log(`  (${set}: ${((Date.now() - patternStarted) / 1000).toFixed(1)} s)`)
      }
    }
  }
  console.log(`\n(${((Date.now() - started) / 1000).toFixed(1)} s)`)
})

const Live = Layer.mergeAll(
  LlamaEngine.layer(modelPath === undefined ? {} : { modelPath }),
  JsonConstraint.layer,
  ToolRegistry.layer([calculator])
)

Effect.runPromise(program.pipe(Effect.provide(Live))).catch((error) => {
  console.error(error)
  process.exit(1)
})
