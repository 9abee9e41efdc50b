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
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as path from "node:path"
import { ExecutionPlan } from "../../../domain/Plan.js"
import * as LlamaEngine from "../../../layers/LlamaEngine.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../../layers/llama/PaganticChatWrapper.js"
import { Engine } from "../../../services/Engine.js"
import type { ThreadRecord } from "../../../services/Runs.js"
import * as BundledTasks from "../../BundledTasks.js"
import * as Live from "../../Live.js"
import { fail } from "../CliFailure.js"
import { globalOptions } from "../Flags.js"
import { messages } from "../Input.js"
import { CliIo } from "../Io.js"
import { confidence, json, print, seconds, streamProgress } from "../Output.js"
import { openRuns } from "../RunsState.js"
import { type EngineSettings, onSystem, settingsOf, toolsFor, withEngine } from "../Wiring.js"
import {
  DEMO_QUESTION,
  DEMO_REVIEW,
  DEMO_TASK,
  DEMO_TEMPERATURE,
  DEMO_VOTE_REVIEW,
  demoPlan,
  SENTIMENT_SYSTEM
} from "./DemoData.js"
import { demoPart, heading, timed } from "./DemoPart.js"
import { escalatePart, waterfallPart } from "./DemoPatterns.js"
import { printPlan } from "./Plan.js"
import { printTasks } from "./Task.js"

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
