/**
 * Mode query: an `infer.query.v1` query run by its pattern, answered with its
 * committed answer (the KNOW).
 *
 * INIT checks the query once (decoded, every CEL expression compiled for its
 * place, `~aliases` resolved through the ResponderRegistry and the facade's
 * options): a wrong query is CONFIG_INVALID_REQUEST naming each field, a CEL
 * problem its position too. It needs a ResponderRegistry (absent:
 * CONFIG_NO_ENGINE: nobody could answer); a Reranker ranks the candidates when
 * one is provided, else they keep their registration order.
 *
 * Where it runs:
 * - durable, when the facade has a query definition (`Options.queries.definition`)
 *   and a Runs layer registered it: the query is a run; the response carries its
 *   id, so its records and events can be read through the Runs API. The request
 *   waits for the KNOW within its timeout (a request that ends first, by timeout
 *   or cancel, cancels the run: nothing goes on that nobody waits for), unless it
 *   is detached (`RunOptions.detach`) or asks a human: then it answers as soon as
 *   the run is started, status `running` or `suspended`.
 * - in memory otherwise: for this request only, so a human responder is refused
 *   at INIT (nobody could answer once the request ends).
 *
 * A run that fails answers with its failure (NO_CONSENSUS naming what was
 * missing, EXPRESSION_FAILED naming the expression...), its details carrying the
 * run id when it was durable.
 *
 * The response's `tokenUsage` is what the query's llm responders spent, as every
 * mode reports it. In memory, each responder's engine is watched, so it is the
 * exact usage (prompt and output apart, tokens/s). A durable run journals its
 * CALLs' tokens as one total (prompt and output together), the KNOW's
 * `_orchestration.tokens`: its `tokenUsage` carries that total as output tokens,
 * its prompt tokens 0, and the run's CALLs as its calls.
 *
 * In memory, the responders' engines follow the request (`Engine.inRequest`): the
 * request's hints reach their inferences, and a failed query reports what they
 * spent. A durable run is not the request: it runs in the runs' own fibers, maybe
 * in another process, and its inferences take the query's own settings, not the
 * request's hints.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import type { Failure } from "../../domain/Failure.js"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import * as Json from "../../domain/Json.js"
import type * as QueryWire from "../../domain/Query.js"
import * as Records from "../../domain/Records.js"
import type { SystemRequest } from "../../domain/System.js"
import { QueryResult } from "../../domain/System.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import { Durable } from "../../services/Durable.js"
import * as Engine from "../../services/Engine.js"
import type { RerankInput } from "../../services/Reranker.js"
import { Reranker } from "../../services/Reranker.js"
import type { Responder } from "../../services/ResponderRegistry.js"
import { ResponderRegistry } from "../../services/ResponderRegistry.js"
import { Runs } from "../../services/Runs.js"
import type * as Lifecycle from "../Lifecycle.js"
import * as Orchestration from "../Orchestration.js"
import * as Ephemeral from "../query/Ephemeral.js"
import * as QueryCheck from "../query/Check.js"
import type { Environment } from "./Environment.js"
import type { Outcome, RunOptions } from "./Types.js"

/** Where a checked query runs. */
export type Placement =
  | { readonly _tag: "Durable"; readonly runs: Runs["Type"]; readonly definition: Orchestration.QueryDefinition }
  | { readonly _tag: "InMemory" }

/** A query request that passed INIT. */
export interface Checked {
  readonly mode: "query"
  readonly request: SystemRequest
  readonly query: QueryCheck.Checked
  readonly placement: Placement
  /** The fields of the query's human (actor) predicates. */
  readonly humans: ReadonlyArray<string>
  readonly context: Context.Context<ResponderRegistry | Reranker>
}

/** Candidates in the order they come: used when no Reranker is provided. */
const inOrder: Reranker["Type"] = {
  rerank: (input: RerankInput) => Effect.succeed(input.candidates)
}

/** Every responder predicate of a checked query, with its field. */
export const predicatesOf = (checked: QueryCheck.Checked): ReadonlyArray<QueryCheck.Responder> => {
  const o = checked.orchestration
  switch (o.pattern) {
    case "single_shot":
    case "retry_on_low_confidence":
      return checked.responders
    case "verify":
      return [...o.primary, o.verifier, o.tiebreaker]
    case "waterfall":
      return o.stages.flat()
    case "escalate":
      return o.tiers.flat()
    case "ensemble_with_audit":
      return [...o.primary, o.auditor]
  }
}

const placementOf = (env: Environment): Placement => {
  const runs = Context.getOption(env.context as Context.Context<unknown>, Runs)
  const definition = env.options.queries?.definition
  return Option.isSome(runs) && definition !== undefined
    ? { _tag: "Durable", runs: runs.value, definition }
    : { _tag: "InMemory" }
}

/** INIT for mode query. */
export const check = (env: Environment, request: SystemRequest): Effect.Effect<Either.Either<Checked, Failure>> =>
  Effect.gen(function* () {
    const context = env.context as Context.Context<unknown>
    const registry = Context.getOption(context, ResponderRegistry)
    if (Option.isNone(registry)) {
      return Either.left(
        ConfigurationFailure.noEngine(
          "Mode query needs responders: provide a ResponderRegistry layer (e.g. InMemoryResponders.layer)",
          { details: { mode: "query" } }
        )
      )
    }
    if (request.query === undefined) {
      return Either.left(
        ConfigurationFailure.invalidRequest(`query: mode "query" needs the infer.query.v1 query under query`, {
          details: { field: "query" }
        })
      )
    }
    const own = env.options.queries?.orchestration
    const aliases = { ...(yield* registry.value.aliases), ...own?.aliases }
    const checked = QueryCheck.check(request.query, { aliases, semantic: own?.semantic })
    if (Either.isLeft(checked)) return Either.left(checked.left)
    const placement = placementOf(env)
    const humans = predicatesOf(checked.right).filter((r) => r.predicate.kind === "actor").map((r) => r.field)
    if (placement._tag === "InMemory" && humans.length > 0) {
      const issues = humans.map((field) => `${field}: ${Ephemeral.noHumans}`)
      return Either.left(ConfigurationFailure.invalidRequest(`invalid query: ${issues.join("; ")}`, { details: { issues } }))
    }
    const reranker = Context.getOption(context, Reranker)
    return Either.right({
      mode: "query",
      request,
      query: checked.right,
      placement,
      humans,
      context: Context.make(ResponderRegistry, registry.value).pipe(
        Context.add(Reranker, Option.getOrElse(reranker, () => inOrder))
      )
    } satisfies Checked)
  })

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/** The text of an answer: its main field for the built-in kinds, JSON otherwise. */
export const contentOf = (kind: QueryWire.AnswerKind, answer: unknown): string => {
  if (Json.isObject(answer)) {
    const main = kind === "core.classification.v1"
      ? answer.category
      : kind === "core.summary.v1"
      ? answer.summary
      : kind === "core.text.v1"
      ? answer.text
      : undefined
    if (typeof main === "string") return main
  }
  return typeof answer === "string" ? answer : JSON.stringify(answer) ?? "null"
}

/** What a KNOW says was spent, as a usage: its total tokens as output tokens (a durable run journals no split). */
export const usageOfKnow = (know: Records.Know): TokenUsage.TokenUsage => {
  const spent = know.body._orchestration
  return new TokenUsage.TokenUsage({
    ...TokenUsage.empty,
    outputTokens: Math.max(0, Math.round(spent.tokens)),
    calls: Math.max(0, Math.round(spent.calls))
  })
}

/** The outcome of a committed answer; `usage`: what its responders spent, when it was watched (else the KNOW's total). */
export const outcomeOf = (know: Records.Know, runId: string | undefined, usage?: TokenUsage.TokenUsage | undefined): Outcome => {
  const body = know.body
  const answer = body._fold.answer
  const spent = body._orchestration
  return {
    content: contentOf(body.kind, answer),
    structuredOutput: answer,
    confidence: body._confidence,
    confidenceSource: "fold",
    usage: usage ?? usageOfKnow(know),
    stopReason: spent.status,
    query: new QueryResult({
      ...(runId === undefined ? {} : { runId }),
      status: "completed",
      pattern: spent.pattern,
      calls: spent.calls,
      tokens: spent.tokens,
      know
    })
  }
}

const started = (checked: Checked, runId: string, status: "running" | "suspended"): Outcome => ({
  content: "",
  usage: TokenUsage.empty,
  stopReason: status,
  query: new QueryResult({ runId, status, pattern: checked.query.orchestration.pattern })
})

/** The failure of a run, its details naming the run. */
const withRunId = (failure: Failure, runId: string): Failure => {
  const Class = failure.constructor as new(fields: object) => Failure
  const { _tag: _, ...fields } = failure as Failure & { readonly _tag: string }
  return new Class({ ...fields, message: failure.message, details: { ...failure.details, runId } })
}

const decodeKnow = Schema.decodeUnknown(Records.Know)

const runDurable = (
  checked: Checked,
  placement: Extract<Placement, { _tag: "Durable" }>,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
): Effect.Effect<Outcome, Failure> =>
  Effect.gen(function* () {
    const { runs, definition } = placement
    const runId = yield* runs.start(definition, checked.query.query, { owner: runOptions.owner })
    if (runOptions.detach === true || checked.humans.length > 0) {
      yield* tracker.transition("EXECUTE", `run ${runId} started`)
      const info = yield* runs.poll(runId)
      return started(checked, runId, info.status === "suspended" ? "suspended" : "running")
    }
    yield* tracker.transition("EXECUTE", `run ${runId}`)
    const info = yield* runs.await(runId).pipe(Effect.onInterrupt(() => Effect.ignore(runs.cancel(runId))))
    if (info.status === "completed") {
      const know = yield* decodeKnow(info.result).pipe(
        Effect.mapError((e) =>
          OrchestrationFailure.replayDiverged(`run ${runId}: its result is not a KNOW this code reads: ${e.message}`, {
            details: { runId }
          })
        )
      )
      yield* tracker.transition("VALIDATE", `${know.body._orchestration.pattern}: ${know.body._orchestration.status}`)
      return outcomeOf(know, runId)
    }
    return yield* Effect.fail(
      withRunId(
        info.error ?? OrchestrationFailure.defect(`run ${runId} ended ${info.status} without a failure recorded`),
        runId
      )
    )
  })

/**
 * `registry`, its llm responders' engines following the request (its hints on
 * every inference, its spending: `Engine.inRequest`) and adding the usage of
 * every inference they answer to `usage`.
 */
const watched = (registry: ResponderRegistry["Type"], usage: Ref.Ref<TokenUsage.TokenUsage>): ResponderRegistry["Type"] => {
  const used = (result: Engine.InferenceResult) => Ref.update(usage, (u) => TokenUsage.combine(u, result.usage))
  const watch = (responder: Responder): Responder => {
    if (responder.kind !== "llm") return responder
    const engine = Engine.inRequest(responder.engine)
    return {
      ...responder,
      engine: {
        ...engine,
        infer: (request) => Effect.tap(engine.infer(request), used),
        stream: (request) =>
          Engine.tapParts(engine.stream(request), (part) => (part._tag === "Finish" ? used(part.result) : undefined))
      }
    }
  }
  return {
    ...registry,
    responders: Effect.map(registry.responders, (all) => all.map(watch)),
    get: (id) => Effect.map(registry.get(id), Option.map(watch))
  }
}

const runInMemory = (env: Environment, checked: Checked, tracker: Lifecycle.Tracker): Effect.Effect<Outcome, Failure> =>
  Effect.gen(function* () {
    const runId = yield* env.nextId("query")
    const durable = yield* Ephemeral.make(runId)
    const usage = yield* Ref.make(TokenUsage.empty)
    const registry = watched(Context.get(checked.context, ResponderRegistry), usage)
    yield* tracker.transition("EXECUTE", `${checked.query.orchestration.pattern} in memory`)
    const own = env.options.queries?.orchestration
    const know = yield* Orchestration.run(checked.query.query, {
      ...own,
      aliases: { ...(yield* registry.aliases), ...own?.aliases }
    }).pipe(Effect.provideService(Durable, durable), Effect.provideService(ResponderRegistry, registry))
    yield* tracker.transition("VALIDATE", `${know.body._orchestration.pattern}: ${know.body._orchestration.status}`)
    return outcomeOf(know, undefined, yield* Ref.get(usage))
  }).pipe(Effect.provide(checked.context))

/** Runs a checked query (PREPARE, EXECUTE, VALIDATE). */
export const run = (
  env: Environment,
  checked: Checked,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
): Effect.Effect<Outcome, Failure> =>
  Effect.gen(function* () {
    const { placement } = checked
    yield* tracker.transition("PREPARE", `query ${checked.query.orchestration.pattern}, ${placement._tag === "Durable" ? "durable" : "in memory"}`)
    return placement._tag === "Durable"
      ? yield* runDurable(checked, placement, tracker, runOptions)
      : yield* runInMemory(env, checked, tracker)
  })
