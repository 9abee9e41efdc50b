/**
 * `pagantic demo`: each loop on real inference, one model load: a chat with the
 * calculator (AgentLoop), an extraction (SpecializedLoop), a vote of five
 * replicas (RedundantLoop), a plan (PlanExecutor), and a durable run on the
 * state file (PAGANTIC_STATE, else `.pagantic/state.db`): two journaled steps,
 * then its thread; two queries (`infer.query.v1`) of the model at several
 * samplings: a waterfall (in memory: two responders that must agree, else a
 * vote of three sampled ones) and an escalation whose last tier is a human (a
 * durable run on the state file: the demo prints the `pagantic respond` command
 * the human would type, runs it as a child process, and shows the KNOW the run
 * committed). Each part is timed and reported; a part that fails makes the demo
 * fail after the others ran. A state file that another process holds (a server)
 * is said and the durable parts are skipped: the demo does not fail for it.
 */
import * as Command from "@effect/cli/Command"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as childProcess from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Redacted from "effect/Redacted"
import { ExecutionPlan } from "../../../domain/Plan.js"
import * as Text from "../../../domain/Text.js"
import * as Records from "../../../domain/Records.js"
import type { SystemResponse } from "../../../domain/System.js"
import * as LlamaEngine from "../../../layers/LlamaEngine.js"
import * as InMemoryResponders from "../../../layers/InMemoryResponders.js"
import * as LexicalReranker from "../../../layers/LexicalReranker.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../../layers/llama/PaganticChatWrapper.js"
import type * as Facade from "../../../programs/Facade.js"
import * as Orchestration from "../../../programs/Orchestration.js"
import * as QueryCheck from "../../../programs/query/Check.js"
import { Engine } from "../../../services/Engine.js"
import type { Responder } from "../../../services/ResponderRegistry.js"
import type { ThreadRecord } from "../../../services/Runs.js"
import { Runs } from "../../../services/Runs.js"
import * as BundledTasks from "../../BundledTasks.js"
import * as Live from "../../Live.js"
import { fail } from "../CliFailure.js"
import { globalOptions } from "../Flags.js"
import { decodeRequest, messages } from "../Input.js"
import { CliIo } from "../Io.js"
import { confidence, formatUsage, json, print, seconds, streamProgress } from "../Output.js"
import { commandRunner, definitionsOf, loadDurable, openRuns, runsFailure, storeOf, where } from "../RunsState.js"
import { type EngineSettings, onSystem, runRequest, settingsOf, toolsFor, withEngine } from "../Wiring.js"
import {
  DEMO_ESCALATE_REVIEW,
  DEMO_HUMAN_ANSWER,
  DEMO_LABELS,
  DEMO_QUESTION,
  DEMO_REVIEW,
  DEMO_TASK,
  DEMO_TEMPERATURE,
  DEMO_VOTE_REVIEW,
  DEMO_WATERFALL_REVIEW,
  demoPlan,
  SENTIMENT_SYSTEM
} from "./DemoData.js"
import * as DemoQuery from "./DemoQuery.js"
import { printPlan } from "./Plan.js"
import { printTasks } from "./Task.js"

const timed = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    const a = yield* self
    return [a, (yield* Clock.currentTimeMillis) - start] as const
  })

const heading = (title: string) => print(`\n== ${title}`)

/** Runs one part of the demo: its request on the facade, timed; prints what happened. */
const demoPart = (
  title: string,
  intro: string,
  request: unknown,
  show: (response: SystemResponse) => Effect.Effect<void, never, CliIo>,
  options?: Facade.RunOptions
) =>
  Effect.gen(function* () {
    yield* heading(title)
    yield* print(intro)
    const decoded = yield* decodeRequest(request)
    const [response, ms] = yield* timed(runRequest(decoded, options))
    if (response.error === undefined) yield* show(response)
    yield* print(
      `  ${formatUsage(response.tokenUsage)}; ${seconds(ms)}` +
        (response.error === undefined ? "" : `\n  failed: ${response.error.code}: ${response.error.message}`)
    )
    return response.error === undefined
  })

/** The model loaded, where from, its context window, its threads, and how long the load took. */
const showModel = (settings: EngineSettings, engine: Layer.Layer<Engine>, started: number) =>
  Effect.gen(function* () {
    const loaded = yield* Clock.currentTimeMillis
    const info = yield* Effect.flatMap(Engine, (e) => e.modelInfo).pipe(Effect.provide(engine))
    // what the engine was given: the flags, else the environment's configuration, else the defaults
    const config = yield* Effect.orElseSucceed(LlamaEngine.config, (): LlamaEngine.Options => ({}))
    const modelPath = settings.model ?? config.modelPath ?? LlamaEngine.bundledModelPath()
    yield* print(
      `model: ${info.name} (${path.relative(process.cwd(), path.resolve(modelPath))}), context ${info.contextWindow} tokens, ` +
        `${settings.threads ?? config.threads ?? 1} thread(s); loaded in ${seconds(loaded - started)}`
    )
  })

const chatPart = (engine: Layer.Layer<Engine>) =>
  Effect.flatMap(CliIo, (io) =>
    demoPart(
      "chat with the calculator tool (AgentLoop)",
      `> ${DEMO_QUESTION}`,
      { mode: "chat", messages: [{ role: "user", content: DEMO_QUESTION }], hints: { temperature: 0 } },
      (response) =>
        print(`\n  stop: ${response.stopReason ?? "-"}; tool calls: ${response.toolCallsMade.map((c) => `${c.name}(${json(c.arguments)}) -> ${c.result}`).join(", ") || "none"}`),
      streamProgress(io)
    ).pipe(onSystem(engine, toolsFor.chat)))

const structuredPart = (engine: Layer.Layer<Engine>) =>
  demoPart(
    "structured extraction (SpecializedLoop: JSON-schema grammar, then validation)",
    `  review: ${DEMO_REVIEW}`,
    {
      mode: "structured",
      messages: messages(DEMO_REVIEW, Option.some(SENTIMENT_SYSTEM)),
      output: { schema: BUNDLED_SENTIMENT_SCHEMA },
      hints: { temperature: 0 }
    },
    (response) => print(`  output: ${json(response.structuredOutput)}`)
  ).pipe(onSystem(engine, toolsFor.structured))

/** The vote, with each replica's answer (the engine's outputs since this part began). */
const votePart = (engine: Layer.Layer<Engine>, outputs: Ref.Ref<ReadonlyArray<string>>) =>
  Effect.zipRight(
    Ref.set(outputs, []),
    demoPart(
      `vote: 5 replicas at temperature ${DEMO_TEMPERATURE}, majority (RedundantLoop)`,
      `  review: ${DEMO_VOTE_REVIEW}`,
      {
        mode: "redundant",
        messages: messages(DEMO_VOTE_REVIEW, Option.some(SENTIMENT_SYSTEM)),
        output: { schema: BUNDLED_SENTIMENT_SCHEMA },
        hints: { temperature: DEMO_TEMPERATURE },
        redundancy: { n: 5, voting: "majority" }
      },
      (response) =>
        Effect.gen(function* () {
          const candidates = yield* Ref.get(outputs)
          yield* Effect.forEach(candidates, (c, i) => print(`  replica ${i + 1}: ${c}`))
          yield* print(`  winner: ${json(response.structuredOutput)}, confidence ${confidence(response)}`)
        })
    ).pipe(onSystem(engine, toolsFor.structured))
  )

const planPart = (engine: Layer.Layer<Engine>) =>
  Effect.gen(function* () {
    // the demo's own plan (examples/plan.json, tested): a failure here is a bug
    const plan = yield* Effect.orDie(Schema.decodeUnknown(ExecutionPlan)(demoPlan))
    return yield* demoPart(
      "plan: a tool step, then an inference step (PlanExecutor)",
      `  steps: ${demoPlan.steps.map((s) => `${s.name} (${s.type})`).join(" -> ")}`,
      { mode: "plan", messages: [], plan: demoPlan },
      (response) => printPlan(plan, response)
    ).pipe(onSystem(engine, toolsFor.plan))
  })

/**
 * The request broken into tasks by the model (the analyzer's TaskList under its
 * JSON schema), then run by phase: reviews by the model, sums by the calculator.
 */
const taskPart = (engine: Layer.Layer<Engine>) =>
  demoPart(
    "tasks: the model breaks the request into tasks, run by phase (Orchestrator on PlanExecutor)",
    `> ${DEMO_TASK}`,
    { mode: "task", messages: [{ role: "user", content: DEMO_TASK }], hints: { temperature: 0 } },
    (response) => printTasks(response, { usage: false })
  ).pipe(
    Effect.provide(
      Layer.orDie(Live.layer({
        engine,
        tools: [],
        facade: { taskProcessors: BundledTasks.processors(engine), taskAnalyzer: BundledTasks.analyzer }
      }))
    )
  )

/** What a DO (its value) or the KNOW (the result) says, after its key. */
const recordBody = (record: ThreadRecord): string => {
  if (record.kind === "KNOW") return `: ${json(record.body)}`
  if (record.kind !== "DO") return ""
  const body = record.body
  const value = typeof body === "object" && body !== null && "value" in body ? body.value : body
  return `: ${typeof value === "string" ? value : json(value)}`
}

/**
 * One durable run on the state file: the calculator sums, the model classifies a
 * review, each step journaled; then the run's thread and how many runs the file
 * holds. A file held by another process is said and skipped (the part does not fail).
 */
const durablePart = (engine: Layer.Layer<Engine>, settings: EngineSettings) =>
  Effect.gen(function* () {
    yield* heading("a durable run (Runs on SQLite: each step journaled, a restart resumes where it stopped)")
    const [opened, openMs] = yield* timed(Effect.either(openRuns(Option.none(), settings, engine)))
    if (opened._tag === "Left") {
      yield* print(`  skipped: ${opened.left.message}`)
      return true
    }
    const { durable, file, runs } = opened.right
    const [info, ms] = yield* timed(
      Effect.flatMap(runs.start(durable.demoRun, durable.demoPayload), (id) => runs.await(id))
    )
    yield* print(`  run ${info.id} on ${file}: ${info.status}; ${seconds(ms)} (the state file opened in ${seconds(openMs)})`)
    const thread = yield* runs.exportThread(info.id)
    for (const record of thread.records) yield* print(`  ${record.kind} ${record.key}${recordBody(record)}`)
    if (info.error !== undefined) yield* print(`  failed: ${info.error.code}: ${info.error.message}`)
    const all = yield* runs.list({ limit: 10_000 })
    yield* print(`  ${all.length} run(s) in ${file}: pagantic runs list, pagantic runs show ${info.id}`)
    return info.status === "completed"
  }).pipe(
    Effect.scoped,
    Effect.catchAll((error) => Effect.as(print(`  failed: ${error.code}: ${error.message}`), false))
  )

// ---------------------------------------------------------------------------
// Queries: a waterfall in memory, an escalation to a human on the state file
// ---------------------------------------------------------------------------

const llm = (alias: string) => ({ kind: "llm", model: `~${alias}` })

/** A classification query of `review` by `orchestration`, folded by `fold`. */
const demoQuery = (review: string, fold: string, orchestration: Record<string, unknown>) => ({
  kind: "infer.query.v1",
  input: { inline: review },
  fold: { function: fold },
  answer_shape: { kind: "core.classification.v1", labels: DEMO_LABELS },
  top_k: 3,
  orchestration
})

/** The waterfall: stage 1 two responders that must agree, else stage 2 a vote of three sampled ones; a stage is accepted when more than half of it agrees. */
export const waterfallQuery = demoQuery(DEMO_WATERFALL_REVIEW, "consensus", {
  pattern: "waterfall",
  stages: [{ responders: [llm("greedy"), llm("warm")] }, { responders: [llm("hot")] }],
  accept_expression: "fold.answer.confidence > 0.5"
})

/**
 * The escalation: the greedy model first; its answers carry no confidence of
 * their own, so best_of credits them an llm's default (0.6), below the
 * expression's 0.8: the question goes on to the human.
 */
export const escalateQuery = demoQuery(DEMO_ESCALATE_REVIEW, "best_of", {
  pattern: "escalate",
  tiers: [{ responders: [llm("greedy")] }, { responders: [{ kind: "actor", did: DemoQuery.DEMO_HUMAN }] }],
  escalation_expression: "fold.answer.confidence < 0.8"
})

/** The label a responder's reply carries, or the reply itself cut short. */
const labelOf = (content: string): string => {
  const parsed = Either.try(() => JSON.parse(content) as { readonly category?: unknown })
  return Either.isRight(parsed) && typeof parsed.right.category === "string" ? parsed.right.category : Text.excerpt(content, 40)
}

/** The demo's responders, each llm one telling `heard` what it answered. */
const heardBy = (engine: Engine["Type"], heard: Ref.Ref<ReadonlyArray<readonly [string, string]>>): ReadonlyArray<Responder> =>
  DemoQuery.responders(engine).map((r) =>
    r.kind !== "llm" ? r : {
      ...r,
      engine: { ...r.engine, infer: (request) => Effect.tap(r.engine.infer(request), (res) => Ref.update(heard, (h) => [...h, [r.id, res.content] as const])) }
    }
  )

/** How a KNOW stands: its answer, confidence, fold, pattern, stage and CALLs. */
const printKnow = (know: Records.Know) => {
  const body = know.body
  const o = body._orchestration
  return print(
    `  answer: ${json(body._fold.answer)}, confidence ${body._confidence.toFixed(2)} (${body._fold.function}, ${body._fold.valid} of ${body._fold.total} valid); ` +
      `${o.pattern} ${o.status}${o.stage === undefined ? "" : `, from ${o.pattern === "escalate" ? "tier" : "stage"} ${o.stage + 1}`}, ${o.calls} CALLs` +
      (body._rationale === undefined ? "" : `\n  rationale: ${body._rationale}`)
  )
}

/**
 * A waterfall of the model's responders, in memory: stage 1 greedy and warm,
 * accepted when they agree; else stage 2, three samples at temperature 2, by
 * majority. Prints each stage's answers and the committed answer.
 */
const waterfallPart = (engine: Layer.Layer<Engine>) =>
  Effect.gen(function* () {
    const service = yield* Effect.provide(Engine, engine)
    const heard = yield* Ref.make<ReadonlyArray<readonly [string, string]>>([])
    const registry = Layer.merge(
      Layer.orDie(InMemoryResponders.layer({ responders: heardBy(service, heard), aliases: DemoQuery.aliases })),
      LexicalReranker.layer()
    )
    return yield* demoPart(
      "query, waterfall: two responders that must agree, else a vote of three sampled ones (patterns on the model)",
      `  review: ${DEMO_WATERFALL_REVIEW}\n  accept_expression: ${waterfallQuery.orchestration.accept_expression}`,
      { mode: "query", messages: [], query: waterfallQuery },
      (response) =>
        Effect.gen(function* () {
          const answers = yield* Ref.get(heard)
          const stage = (ids: ReadonlyArray<string>) => answers.filter(([id]) => ids.includes(id)).map(([id, c]) => `${id} ${labelOf(c)}`).join(", ")
          const first = stage(["greedy", "warm"])
          const second = stage(["hot-1", "hot-2", "hot-3"])
          yield* print(`  stage 1 (greedy, warm): ${first}${second === "" ? "" : " -> not accepted"}`)
          if (second !== "") yield* print(`  stage 2 (hot x3, temperature 2): ${second}`)
          yield* print(`  stages tried: ${second === "" ? 1 : 2} of 2`)
          if (response.query?.know !== undefined) yield* printKnow(response.query.know)
        })
    ).pipe(Effect.provide(Layer.orDie(Live.layer({ engine, tools: [], responders: registry }))))
  })

/** The `pagantic` command of this checkout or package (bin/pagantic.js). */
const launcher = fileURLToPath(new URL("../../../../bin/pagantic.js", import.meta.url))

/** Runs `pagantic args` as a child process: its exit code and output, within `timeoutMs`. */
const runChild = (args: ReadonlyArray<string>, timeoutMs: number) =>
  Effect.async<{ readonly code: number | null; readonly out: string }>((resume) => {
    const child = childProcess.spawn(process.execPath, [launcher, ...args], {
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      timeout: timeoutMs
    })
    let out = ""
    child.stdout.on("data", (chunk: Buffer) => void (out += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => void (out += chunk.toString()))
    child.on("error", (error) => resume(Effect.succeed({ code: null, out: `${out}${error.message}` })))
    child.on("close", (code) => resume(Effect.succeed({ code, out })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** A shell word: quoted unless it is plain. */
const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`)

/**
 * An escalation whose last tier is a human, a durable run on the state file: the
 * model answers first; the expression sends the question on to the human, whose
 * slot the run opens (it suspends). The demo prints the run, the slot and the
 * `pagantic respond` command, releases the state file and runs that command as
 * a child process (the child carries the run on to its KNOW), then reads the
 * KNOW back. A state file held by another process is said and the part skipped.
 */
const escalatePart = (engine: Layer.Layer<Engine>, settings: EngineSettings) =>
  Effect.gen(function* () {
    yield* heading("query, escalate: the model, then a human (a durable run; the human answers with pagantic respond)")
    yield* print(`  review: ${DEMO_ESCALATE_REVIEW}\n  escalation_expression: ${escalateQuery.orchestration.escalation_expression}`)
    const started = yield* Clock.currentTimeMillis
    const store = yield* storeOf(Option.none())
    const durable = yield* loadDurable
    const notice = yield* Ref.make(Option.none<Orchestration.Notice>())
    const queries = DemoQuery.definition((n) => Ref.set(notice, Option.some(n)))
    const others = (yield* definitionsOf(durable)).filter((d) => d.name !== DemoQuery.name)
    const runner = yield* commandRunner(durable, store)
    const checked = QueryCheck.check(escalateQuery, { aliases: DemoQuery.aliases })
    // the demo's own query: a failure to check it is a bug
    if (Either.isLeft(checked)) return yield* Effect.dieMessage(checked.left.message)
    // the run starts here and waits for its human; the state file is released before the human answers
    const opened = yield* Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(durable.layer(store, [...others, queries], engine, runner))
        const runs = Context.get(context, Runs)
        const id = yield* runs.start(queries, checked.right.query)
        const info = yield* runs.await(id, { untilSuspended: true })
        return { id, info }
      })
    ).pipe(Effect.either)
    if (Either.isLeft(opened)) {
      const error = opened.left
      const held = error.code === "ORCHESTRATION_STATE_UNAVAILABLE"
      yield* print(`  ${held ? "skipped" : "failed"}: ${error.code}: ${error.message}`)
      return held
    }
    const { id, info } = opened.right
    if (info.status !== "suspended" || info.waitingOn === undefined) {
      yield* print(`  run ${id}: ${info.status}, not waiting for the human${info.error === undefined ? "" : `: ${info.error.code}: ${info.error.message}`}`)
      return false
    }
    const notified = yield* Ref.get(notice)
    if (Option.isNone(notified)) {
      yield* print(`  failed: run ${id} waits on slot ${info.waitingOn}, but its human was not notified`)
      return false
    }
    const told = notified.value
    const slot = info.waitingOn
    yield* print(`  the model's tier was not enough: run ${id} waits for the human ${DemoQuery.DEMO_HUMAN} on slot ${slot}`)
    const args = [
      "respond", id, slot,
      "--secret", Redacted.value(told.slot.secret),
      "--submit", JSON.stringify(DEMO_HUMAN_ANSWER),
      ...(store._tag === "Sqlite" ? ["--state", store.file] : [])
    ]
    yield* print(`  the human answers:\n  $ pagantic ${args.map(shellWord).join(" ")}`)
    const child = yield* runChild(args, 120_000)
    for (const line of child.out.trimEnd().split("\n")) yield* print(`  | ${Text.excerpt(line, 160)}`)
    if (child.code !== 0) {
      yield* print(`  failed: pagantic respond exited with ${child.code ?? "a signal"}`)
      return false
    }
    const ended = yield* Effect.scoped(
      Effect.gen(function* () {
        const { runs } = yield* openRuns(Option.none(), settings, engine)
        const info = yield* Effect.mapError(runs.poll(id), runsFailure)
        const records = yield* Effect.mapError(Orchestration.thread(runs, id), runsFailure)
        return { result: info.result, status: info.status, error: info.error, records }
      })
    )
    const know = Schema.decodeUnknownOption(Records.Know)(ended.result)
    yield* print(`  run ${id} on ${where(store)}: ${ended.status}; ${seconds((yield* Clock.currentTimeMillis) - started)}, the human's child process included`)
    for (const record of ended.records) {
      const key = record.id.startsWith(`${id}/`) ? record.id.slice(id.length + 1) : record.id
      // the correlation id repeats the record's key: left out
      const { correlation_id: _, ...body } = record.body as Record<string, unknown>
      yield* print(`  ${record.kind} ${key}${record.kind === "KNOW" ? "" : `: ${Text.excerpt(json(body), 120)}`}`)
    }
    if (Option.isNone(know)) {
      yield* print(`  failed: the run ended ${ended.status} without a KNOW${ended.error === undefined ? "" : `: ${ended.error.code}: ${ended.error.message}`}`)
      return false
    }
    yield* printKnow(know.value)
    return true
  }).pipe(Effect.catchAll((error) => Effect.as(print(`  failed: ${error.message}`), false)))

export const demo = Command.make("demo", globalOptions, (args) =>
  Effect.gen(function* () {
    const settings = yield* settingsOf(args)
    const started = yield* Clock.currentTimeMillis
    const ok = yield* withEngine(args, (engine, outputs) =>
      Effect.gen(function* () {
        yield* showModel(settings, engine, started)
        const chatOk = yield* chatPart(engine)
        const structuredOk = yield* structuredPart(engine)
        const voteOk = yield* votePart(engine, outputs)
        const planOk = yield* planPart(engine)
        const taskOk = yield* taskPart(engine)
        const durableOk = yield* durablePart(engine, settings)
        const waterfallOk = yield* waterfallPart(engine)
        const escalateOk = yield* escalatePart(engine, settings)
        return chatOk && structuredOk && voteOk && planOk && taskOk && durableOk && waterfallOk && escalateOk
      }))
    yield* print(`\ndone in ${seconds((yield* Clock.currentTimeMillis) - started)}, model load included`)
    if (!ok) return yield* fail("a part of the demo failed (see above)")
  })
).pipe(Command.withDescription("each loop on real inference: a tool-using chat, an extraction, a vote, a plan, tasks, a durable run, a waterfall query, an escalation to a human"))
