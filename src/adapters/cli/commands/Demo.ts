/**
 * `pagantic demo`: each loop on real inference, one model load: a chat with the
 * calculator (AgentLoop), an extraction (SpecializedLoop), a vote of five
 * replicas (RedundantLoop) and a plan (PlanExecutor). Each part is timed and
 * reported; a part that fails makes the demo fail after the others ran.
 */
import * as Command from "@effect/cli/Command"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as path from "node:path"
import { ExecutionPlan } from "../../../domain/Plan.js"
import type { SystemResponse } from "../../../domain/System.js"
import * as LlamaEngine from "../../../layers/LlamaEngine.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../../layers/llama/PaganticChatWrapper.js"
import type * as Facade from "../../../programs/Facade.js"
import { Engine } from "../../../services/Engine.js"
import { fail } from "../CliFailure.js"
import { globalOptions } from "../Flags.js"
import { decodeRequest, messages } from "../Input.js"
import { CliIo } from "../Io.js"
import { confidence, formatUsage, json, print, seconds, streamProgress } from "../Output.js"
import { type EngineSettings, onSystem, runRequest, settingsOf, toolsFor, withEngine } from "../Wiring.js"
import {
  DEMO_QUESTION,
  DEMO_REVIEW,
  DEMO_TEMPERATURE,
  DEMO_VOTE_REVIEW,
  demoPlan,
  SENTIMENT_SYSTEM
} from "./DemoData.js"
import { printPlan } from "./Plan.js"

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
        return chatOk && structuredOk && voteOk && planOk
      }))
    yield* print(`\ndone in ${seconds((yield* Clock.currentTimeMillis) - started)}, model load included`)
    if (!ok) return yield* fail("a part of the demo failed (see above)")
  })
).pipe(Command.withDescription("each loop on real inference: a tool-using chat, an extraction, a vote, a plan"))
