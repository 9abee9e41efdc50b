/**
 * `pagantic query q.json`: an `infer.query.v1` query from a file, run by its
 * pattern on the configured engine, and its committed answer (the KNOW) printed.
 *
 * Every llm responder the query names is served by the one engine the command
 * loads (the bundled model unless `--model` says otherwise): a `~alias` and a
 * plain model name each become an llm responder of that name, so a query written
 * for several models runs here on one. Pattern, system and actor responders need
 * an application that registers them (the library's ResponderRegistry); here they
 * find no candidate and the query says so. The query runs in memory for this
 * command: a query that asks a human is refused (it needs durable runs).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Json from "../../../domain/Json.js"
import type { SystemResponse } from "../../../domain/System.js"
import * as InMemoryResponders from "../../../layers/InMemoryResponders.js"
import * as LexicalReranker from "../../../layers/LexicalReranker.js"
import { Engine } from "../../../services/Engine.js"
import type { Responder } from "../../../services/ResponderRegistry.js"
import * as Live from "../../Live.js"
import { globalOptions, jsonOption } from "../Flags.js"
import { decodeRequest, readJsonFile } from "../Input.js"
import { confidence, json, print, respond } from "../Output.js"
import { withEngine } from "../Wiring.js"

/** The largest query file read. */
const maxQueryBytes = 1024 * 1024

/** Where to stop looking for llm predicates (the query's own decoding bounds it further). */
const maxWalk = 10_000

/**
 * The model names of every llm predicate in a query as written (`~aliases`
 * without the tilde), in order of first appearance; bounded, without recursion.
 */
export const llmModelsOf = (wire: unknown): ReadonlyArray<string> => {
  const found = new Set<string>()
  const stack: Array<unknown> = [wire]
  for (let seen = 0; stack.length > 0 && seen < maxWalk; seen++) {
    const value = stack.pop()
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push(value[i])
      continue
    }
    if (!Json.isObject(value)) continue
    if (value.kind === "llm" && typeof value.model === "string") {
      const name = value.model.startsWith("~") ? value.model.slice(1) : value.model
      if (name.length > 0) found.add(name)
    }
    // an inline answer schema holds no responders
    for (const [key, child] of Object.entries(value).reverse()) if (key !== "schema") stack.push(child)
  }
  return Array.from(found)
}

const printAnswer = (response: SystemResponse) =>
  Effect.gen(function* () {
    const query = response.query
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
    file: Args.text({ name: "q.json" }).pipe(Args.withDescription("an infer.query.v1 query (JSON file)"))
  },
  (args) =>
    Effect.gen(function* () {
      const wire = yield* readJsonFile(args.file, "query file", maxQueryBytes)
      const request = yield* decodeRequest({ mode: "query", messages: [], query: wire })
      const models = llmModelsOf(wire)
      yield* withEngine(args, (engine) =>
        Effect.gen(function* () {
          const service = yield* Effect.provide(Engine, engine)
          const responders = models.map((model): Responder => ({ id: model, kind: "llm", model, engine: service }))
          const registry = Layer.merge(
            // the model names are distinct and the descriptors well formed: registering cannot fail
            InMemoryResponders.layer({ responders, aliases: Object.fromEntries(models.map((m) => [m, m])) }).pipe(Layer.orDie),
            LexicalReranker.layer()
          )
          const system = Live.layer({ engine, tools: [], responders: registry }).pipe(Layer.orDie)
          yield* respond(request, args.json, printAnswer).pipe(Effect.provide(system))
        }))
    })
).pipe(Command.withDescription("run an infer.query.v1 query (JSON file) on the engine and print its answer"))
