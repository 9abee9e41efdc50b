/**
 * `pagantic task`: task mode. The analyzer breaks the text into tasks (as JSON,
 * or XML with --xml), the orchestrator runs them by phase; prints the analysis,
 * the phases, then each task with its output, its failure or why it was skipped.
 * On the bundled model the processors are `sentiment` and `calculator`
 * (BundledTasks); on another model, the facade's default `infer`.
 *
 * With a store (`--state FILE`, `--state-url URL`, or PAGANTIC_STATE /
 * PAGANTIC_STATE_URL: see RunsState) the request is a durable run of that store
 * (RequestRun's definition): its id is printed first, and `pagantic runs show`
 * reads its response back. The whole request is one journaled step: a crash
 * re-runs it at most once more, a recorded response is never asked again.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import { SystemResponse } from "../../../domain/System.js"
import { Runs } from "../../../services/Runs.js"
import { isBundledModelName } from "../../../layers/llama/PaganticChatWrapper.js"
import { Engine } from "../../../services/Engine.js"
import * as BundledTasks from "../../BundledTasks.js"
import * as Live from "../../Live.js"
import { globalOptions, integerIn, jsonOption, maxTokensOption } from "../Flags.js"
import { decodeRequest, hints, messages, messageText } from "../Input.js"
import { fail } from "../CliFailure.js"
import * as CommandRuns from "../CommandRuns.js"
import { formatUsage, json, print, respond } from "../Output.js"
import { chosenStore, commandRunner, definitionsOf, loadDurable, runsFailure, stateOption, type Store } from "../RunsState.js"
import { withEngineTracked } from "../Wiring.js"

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

/** A task response with failed tasks: the command fails (exit 1) naming them, after they were printed. */
const failOnFailedTasks = (response: SystemResponse) => {
  const result = response.orchestration
  if (result === undefined || result.failed.length === 0) return Effect.void
  const total = result.completed.length + result.failed.length + result.skipped.length
  return fail(`${result.failed.length} of ${total} task(s) failed: ${result.failed.map((t) => t.id).slice(0, 10).join(", ")}`)
}

/**
 * The request as a durable run of `store` (the request-run definition: the facade
 * answers it in one journaled step, so a crash re-runs it at most once more and a
 * recorded response is never asked again); prints the run id, then the tasks.
 */
const durableTask = (
  store: Store,
  wire: unknown,
  engine: Layer.Layer<Engine>,
  asJson: boolean
) =>
  Effect.gen(function* () {
    const durable = yield* loadDurable
    const runner = yield* commandRunner(durable, store)
    const commandRuns = yield* CommandRuns.make(yield* definitionsOf(durable), yield* Effect.provide(Engine, engine))
    const { requests } = commandRuns
    // the runs first (their definitions need only the engine and the query runs' responders), then the facade on them
    const runs = yield* Layer.build(
      durable.layer(store, commandRuns.definitions, Layer.merge(engine, CommandRuns.responders), runner)
    ).pipe(Effect.mapError(runsFailure))
    const service = Context.get(runs, Runs)
    // the facade answering the request: on the bundled model with what it was taught, as in memory
    yield* CommandRuns.bindRequests(commandRuns, engine, runs)
    const runId = yield* service.start(requests.definition, wire).pipe(Effect.mapError(runsFailure))
    if (!asJson) yield* print(`run: ${runId}`)
    const info = yield* service.await(runId).pipe(Effect.mapError(runsFailure))
    if (info.status !== "completed") {
      return yield* fail(`run ${runId} ${info.status}${info.error === undefined ? "" : `: ${info.error.code}: ${info.error.message}`}`)
    }
    // the run's result is the facade's response, encoded: it decodes back
    const response = yield* Effect.orDie(Schema.decodeUnknown(SystemResponse)(info.result))
    if (asJson) yield* print(JSON.stringify(info.result, null, 2))
    else yield* printTasks(response)
    yield* failOnFailedTasks(response)
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
    state: stateOption,
    text: Args.text({ name: "text" }).pipe(Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      const wire = {
        mode: "task",
        messages: messages(text, Option.none()),
        hints: hints({ maxTokens: args.maxTokens }),
        task: {
          parser: args.xml ? "xml" : "json",
          scheduling: args.phases ? "phases" : "dataflow",
          failurePolicy: args.keepGoing ? "continue" : "fail-fast",
          ...(Option.isSome(args.maxConcurrent) ? { maxConcurrent: args.maxConcurrent.value } : {})
        }
      }
      const request = yield* decodeRequest(wire)
      const store = yield* chosenStore(args.state)
      // on the bundled model: the analyzer configuration it was taught and its two
      // processors (sentiment, calculator); on any other model the facade's defaults
      yield* withEngineTracked(args, "task", (engine) =>
        Effect.gen(function* () {
          if (Option.isSome(store)) return yield* durableTask(store.value, wire, engine, args.json)
          const info = yield* Effect.flatMap(Engine, (e) => e.modelInfo).pipe(Effect.provide(engine))
          const facade = isBundledModelName(info.name)
            ? { taskProcessors: BundledTasks.processors(engine), taskAnalyzer: BundledTasks.analyzer }
            : {}
          const response = yield* respond(request, args.json, printTasks).pipe(
            Effect.provide(Layer.orDie(Live.layer({ engine, tools: [], facade })))
          )
          return yield* failOnFailedTasks(response)
        }))
    })
).pipe(Command.withDescription("task mode: the request broken into tasks by the model, run by phase"))
