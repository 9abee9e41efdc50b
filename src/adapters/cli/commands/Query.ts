/**
 * `pagantic query q.json`: an `infer.query.v1` query from a file, run by its
 * pattern on the configured engine, and its committed answer (the KNOW) printed.
 *
 * Every llm responder the query names is served by the one engine the command
 * loads (the bundled model unless `--model` says otherwise): a `~alias` and a
 * plain model name each become an llm responder of that name, so a query written
 * for several models runs here on one. Pattern, system and actor responders need
 * an application that registers them (the library's ResponderRegistry); here they
 * find no candidate and the query says so.
 *
 * Without a store the query runs in memory for this command. With one (`--state
 * FILE`, `--state-url URL`, or PAGANTIC_STATE / PAGANTIC_STATE_URL: see
 * RunsState) it is a durable run of that store: its CALLs and DOs are journaled,
 * the run id is printed, and `pagantic runs show` reads it back. A query that
 * asks a human is refused either way, before anything is recorded: this command
 * registers no human responders, and nobody could answer its slot.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { ConfigurationFailure } from "../../../domain/Failure.js"
import type { SystemResponse } from "../../../domain/System.js"
import { PaganticSystem } from "../../../programs/Facade.js"
import { Engine } from "../../../services/Engine.js"
import * as Live from "../../Live.js"
import { fail } from "../CliFailure.js"
import * as CommandRuns from "../CommandRuns.js"
import { asksHuman, llmModelsOf } from "../CommandRuns.js"
import { globalOptions, jsonOption } from "../Flags.js"
import { decodeRequest, readJsonFile } from "../Input.js"
import { confidence, json, print, respond } from "../Output.js"
import { chosenStore, commandRunner, definitionsOf, loadDurable, runsFailure, stateOption } from "../RunsState.js"
import { withEngineTracked } from "../Wiring.js"

/** The largest query file read. */
const maxQueryBytes = 1024 * 1024


const printAnswer = (response: SystemResponse) =>
  Effect.gen(function* () {
    const query = response.query
    if (query?.runId !== undefined) yield* print(`run: ${query.runId} (${query.status})`)
    if (query === undefined || query.know === undefined) return
    const body = query.know.body
    yield* print(`answer: ${response.content}`)
    if (response.structuredOutput !== undefined && json(response.structuredOutput) !== JSON.stringify(response.content)) {
      yield* print(`  ${json(response.structuredOutput)}`)
    }
    yield* print(`confidence: ${confidence(response)} (${body._fold.function}, ${body._fold.valid} of ${body._fold.total} valid)`)
    if (body._rationale !== undefined) yield* print(`rationale: ${body._rationale}`)
    yield* print(`pattern: ${query.pattern} (${body._orchestration.status}), ${query.calls ?? 0} calls, ${query.tokens ?? 0} tokens`)
    if (body.audit !== undefined) yield* print(`audit: ${body.audit.approved ? "approved" : "rejected"}: ${body.audit.rationale}`)
  })

export const query = Command.make(
  "query",
  {
    ...globalOptions,
    json: jsonOption,
    state: stateOption,
    file: Args.text({ name: "q.json" }).pipe(Args.withDescription("an infer.query.v1 query (JSON file)"))
  },
  (args) =>
    Effect.gen(function* () {
      const wire = yield* readJsonFile(args.file, "query file", maxQueryBytes)
      const request = yield* decodeRequest({ mode: "query", messages: [], query: wire })
      const models = llmModelsOf(wire)
      const store = yield* chosenStore(args.state)
      if (Option.isSome(store) && asksHuman(wire)) {
        // in memory the facade refuses it, naming the field; a durable run would wait for an answer nobody can send
        return yield* fail(
          "the query asks a human (an actor responder): pagantic query registers no humans and could hand the slot to nobody; run it from an application that registers its responders"
        )
      }
      yield* withEngineTracked(args, "query", (engine) =>
        Effect.gen(function* () {
          const service = yield* Effect.provide(Engine, engine)
          const registry = CommandRuns.registryOf(CommandRuns.respondersOf(models, service), CommandRuns.aliasesOf(models))
          if (Option.isNone(store)) {
            const system = Live.layer({ engine, tools: [], responders: registry }).pipe(Layer.orDie)
            return yield* respond(request, args.json, printAnswer).pipe(Effect.provide(system))
          }
          // a durable run of the store, beside every other run the CLI makes
          const durable = yield* loadDurable
          const runner = yield* commandRunner(durable, store.value)
          const commandRuns = yield* CommandRuns.make(yield* definitionsOf(durable), service)
          const runs = durable.layerWith(store.value, commandRuns.definitions, runner)
          const system = yield* Layer.build(
            Live.layer({ engine, tools: [], responders: registry, runs, facade: { queries: { definition: commandRuns.queries } } })
          ).pipe(
            Effect.mapError((error) =>
              error._tag === "OrchestrationFailure" || error._tag === "ConfigurationFailure"
                ? runsFailure(error)
                : runsFailure(ConfigurationFailure.invalidRequest(String(error)))
            )
          )
          // a request run re-driven on this store is answered by this facade
          yield* commandRuns.requests.bindLazily(Effect.succeed(Context.get(system, PaganticSystem)))
          return yield* respond(request, args.json, printAnswer).pipe(Effect.provide(system))
        }))
    })
).pipe(Command.withDescription("run an infer.query.v1 query (JSON file) on the engine and print its answer; with --state or --state-url a durable run"))
