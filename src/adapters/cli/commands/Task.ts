/**
 * `pagantic task`: task mode. The analyzer breaks the text into tasks (as JSON,
 * or XML with --xml), the orchestrator runs them by phase; prints the analysis,
 * the phases, then each task with its output, its failure or why it was skipped.
 * On the bundled model the processors are `sentiment` and `calculator`
 * (BundledTasks); on another model, the facade's default `infer`.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { SystemResponse } from "../../../domain/System.js"
import { isBundledModelName } from "../../../layers/llama/PaganticChatWrapper.js"
import { Engine } from "../../../services/Engine.js"
import * as BundledTasks from "../../BundledTasks.js"
import * as Live from "../../Live.js"
import { globalOptions, integerIn, jsonOption, maxTokensOption } from "../Flags.js"
import { decodeRequest, hints, messages, messageText } from "../Input.js"
import { formatUsage, json, print, respond } from "../Output.js"
import { withEngine } from "../Wiring.js"

/** The orchestration of a task response, task by task. */
export const printTasks = (response: SystemResponse, options: { readonly usage?: boolean } = {}) =>
  Effect.gen(function* () {
    const result = response.orchestration
    if (result === undefined) return
    if (result.analysis !== "") yield* print(`analysis: ${result.analysis}`)
    yield* print(`phases: ${result.metadata.phases.map((p) => `[${p.join(", ")}]`).join(" -> ")}`)
    for (const t of result.completed) yield* print(`  ${t.id} (${t.processor}): ${json(t.output)}`)
    for (const t of result.failed) yield* print(`  ${t.id} (${t.processor}): failed: ${t.error.code}: ${t.error.message}`)
    for (const t of result.skipped) yield* print(`  ${t.id} (${t.processor}): skipped (${t.reason}): ${t.message}`)
    if (options.usage !== false) yield* print(`usage: ${formatUsage(response.tokenUsage)}`)
  })

export const task = Command.make(
  "task",
  {
    ...globalOptions,
    xml: Options.boolean("xml").pipe(Options.withDescription("ask the analyzer for XML instead of JSON")),
    phases: Options.boolean("phases").pipe(
      Options.withDescription("a barrier between phases (default: a task starts when its dependencies are done)")
    ),
    keepGoing: Options.boolean("continue").pipe(
      Options.withDescription("let independent tasks go on after a failure (default: stop at the first)")
    ),
    maxConcurrent: integerIn("max-concurrent", 1, 32).pipe(Options.withDescription("tasks at once"), Options.optional),
    maxTokens: maxTokensOption,
    json: jsonOption,
    text: Args.text({ name: "text" }).pipe(Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      const request = yield* decodeRequest({
        mode: "task",
        messages: messages(text, Option.none()),
        hints: hints({ maxTokens: args.maxTokens }),
        task: {
          parser: args.xml ? "xml" : "json",
          scheduling: args.phases ? "phases" : "dataflow",
          failurePolicy: args.keepGoing ? "continue" : "fail-fast",
          ...(Option.isSome(args.maxConcurrent) ? { maxConcurrent: args.maxConcurrent.value } : {})
        }
      })
      // on the bundled model: the analyzer configuration it was taught and its two
      // processors (sentiment, calculator); on any other model the facade's defaults
      yield* withEngine(args, (engine) =>
        Effect.gen(function* () {
          const info = yield* Effect.flatMap(Engine, (e) => e.modelInfo).pipe(Effect.provide(engine))
          const facade = isBundledModelName(info.name)
            ? { taskProcessors: BundledTasks.processors(engine), taskAnalyzer: BundledTasks.analyzer }
            : {}
          return yield* respond(request, args.json, printTasks).pipe(
            Effect.provide(Layer.orDie(Live.layer({ engine, tools: [], facade })))
          )
        }))
    })
).pipe(Command.withDescription("task mode: the request broken into tasks by the model, run by phase"))
