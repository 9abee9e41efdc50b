/**
 * The runs every command that opens a store registers, so that each command can
 * cancel, resume, answer, export and import every run the CLI made: the demo's
 * and the application's (`RunsState.definitionsOf`), the queries of `pagantic
 * query --state` (and of `serve`'s `/v1/queries`), and the requests of `pagantic
 * task --state` (and of `serve`'s async `/v1/run`).
 *
 * A query run finds its llm responders here as `pagantic query` gives them: each
 * model the query names (a `~alias` or a plain name) is a responder of that name
 * on the command's one engine, registered when the run starts or resumes. A
 * request run is answered by a facade on the same runs, built the first time a
 * run asks for it (a command that only lists runs never builds it, nor loads the
 * model).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Json from "../../domain/Json.js"
import * as InMemoryResponders from "../../layers/InMemoryResponders.js"
import * as LexicalReranker from "../../layers/LexicalReranker.js"
import { PaganticSystem } from "../../programs/Facade.js"
import * as RequestRun from "../../programs/facade/RequestRun.js"
import * as Orchestration from "../../programs/Orchestration.js"
import type { Engine } from "../../services/Engine.js"
import type { Reranker } from "../../services/Reranker.js"
import { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Runs from "../../services/Runs.js"
import * as Live from "../Live.js"

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

/** Whether a query as written names a human (`kind: "actor"`) responder; bounded, without recursion. */
export const asksHuman = (wire: unknown): boolean => {
  const stack: Array<unknown> = [wire]
  for (let seen = 0; stack.length > 0 && seen < maxWalk; seen++) {
    const value = stack.pop()
    if (Array.isArray(value)) {
      stack.push(...value)
      continue
    }
    if (!Json.isObject(value)) continue
    if (value.kind === "actor") return true
    for (const [key, child] of Object.entries(value)) if (key !== "schema") stack.push(child)
  }
  return false
}

/** The `~aliases` of the models a query names: each its own name. */
export const aliasesOf = (models: ReadonlyArray<string>): Readonly<Record<string, string>> =>
  Object.fromEntries(models.map((model) => [model, model]))

/** The llm responders of `models` on `engine`, as `pagantic query` registers them. */
export const respondersOf = (models: ReadonlyArray<string>, engine: Engine["Type"]) =>
  models.map((model) => ({ id: model, kind: "llm" as const, model, engine }))

/** Registers `responder` unless one of its id is there already (another run of the same model registered it). */
const ensure = (responder: ReturnType<typeof respondersOf>[number]) =>
  Effect.flatMap(ResponderRegistry, (registry) =>
    Effect.flatMap(registry.get(responder.id), (found) =>
      Option.isSome(found)
        ? Effect.void
        : registry.register(responder).pipe(
          // two runs may race to register the same model: the loser finds it there
          Effect.catchAll((failure) =>
            Effect.flatMap(registry.get(responder.id), (now) => (Option.isSome(now) ? Effect.void : Effect.fail(failure)))
          )
        )))

/**
 * The query definition of the CLI: the definition `Orchestration.definition`
 * makes, each run first registering the llm responders its query names on `engine`.
 */
export const queries = (engine: Engine["Type"]): Orchestration.QueryDefinition => {
  const base = Orchestration.definition()
  return Runs.define({
    ...base,
    program: (query) => {
      const models = llmModelsOf(query)
      return Effect.zipRight(
        Effect.forEach(respondersOf(models, engine), ensure, { discard: true }),
        Orchestration.run(query, { aliases: aliasesOf(models) })
      )
    }
  })
}

/** `responders` under `aliases` in a registry, ranked by the lexical reranker; well formed and distinct, so registering cannot fail. */
export const registryOf = (
  responders: ReturnType<typeof respondersOf>,
  aliases: Readonly<Record<string, string>>
): Layer.Layer<ResponderRegistry | Reranker> =>
  Layer.merge(Layer.orDie(InMemoryResponders.layer({ responders, aliases })), LexicalReranker.layer())

/** The responders a command's runs start from: none registered (query runs add theirs), and the lexical reranker. */
export const responders: Layer.Layer<ResponderRegistry | Reranker> = registryOf([], {})

/** What a command registers with the runs it opens, and what it binds after. */
export interface CommandRuns {
  readonly definitions: ReadonlyArray<Runs.AnyDefinition>
  readonly queries: Orchestration.QueryDefinition
  readonly requests: RequestRun.Unbound
}

/** The definitions of `own` (the demo's and the application's) with the CLI's queries and requests on `engine`. */
export const make = (own: ReadonlyArray<Runs.AnyDefinition>, engine: Engine["Type"]): Effect.Effect<CommandRuns> =>
  Effect.map(RequestRun.make, (requests) => {
    const query = queries(engine)
    return { definitions: [...own, query, requests.definition], queries: query, requests }
  })

/**
 * Binds to the request runs a facade on `runs` and `engine` (mode task on the
 * bundled model with what it was taught, as `pagantic task` runs it), built in
 * the current scope when a request run first asks for it.
 */
export const bindRequests = (
  commandRuns: CommandRuns,
  engine: Layer.Layer<Engine>,
  runs: Context.Context<Runs.Runs>
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) =>
    commandRuns.requests.bindLazily(
      Layer.buildWithScope(
        Live.layer({
          engine,
          tools: [],
          responders,
          runs: Layer.succeedContext(runs),
          bundledTasks: true,
          facade: { queries: { definition: commandRuns.queries } }
        }),
        scope
      ).pipe(
        Effect.map(Context.get(PaganticSystem)),
        // the engine is built lazily and the runs are open: what is left of the facade cannot fail to build
        Effect.orDie
      )
    ))
