/**
 * Nested queries: a query's answer (its KNOW) as another query's input.
 *
 * A trigger watches a query run: when the run commits a KNOW of the trigger's
 * body kind and the trigger's condition (a CEL decision over the KNOW's fold,
 * e.g. `fold.answer.value.category == "research"`) holds, it starts a child query
 * whose `input.record_id` is the KNOW's id. The child's run id is derived from
 * the parent's and the trigger's name, and starting an id that exists changes
 * nothing, so a trigger fires exactly once per parent KNOW however often it is
 * followed (a restart between the parent's KNOW and the child's start follows
 * it again).
 *
 * A record input reads as the parent query's own input, then the parent's answer;
 * `recordText` gives the query definition that reading, through the Runs handle.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import type { Failure } from "../../domain/Failure.js"
import { canonicalJson } from "../../domain/Json.js"
import * as Query from "../../domain/Query.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Runs from "../../services/Runs.js"
import * as Cel from "../Cel.js"

/** The run definition of queries (see Orchestration.definition). */
export type QueryDefinition = Runs.Definition<
  Query.Query,
  typeof Query.Query.Encoded,
  Records.Know,
  typeof Records.Know.Encoded,
  ResponderRegistry | Reranker
>

/** Starts a child query on a parent's KNOW. */
export interface Trigger {
  /** Unique among the triggers followed on one run; part of the child's run id. */
  readonly name: string
  /** The KNOW body kind it fires on, e.g. `core.classification.v1`. */
  readonly kind: Records.AnswerKind
  /** A CEL bool over `fold` (the KNOW's fold); absent: always. */
  readonly condition?: string | undefined
  /** The child query (its `input` is replaced by `{ record_id: <the KNOW's id> }`). */
  readonly query: Omit<Query.Query, "input">
}

/** A trigger with its condition compiled. */
export interface CheckedTrigger {
  readonly trigger: Trigger
  readonly condition?: Cel.Compiled<"decision"> | undefined
}

/** Compiles a trigger's condition once (a bad one is CONFIG_INVALID_REQUEST naming the trigger and the position). */
export const checkTrigger = (trigger: Trigger): Either.Either<CheckedTrigger, ConfigurationFailure> =>
  trigger.condition === undefined
    ? Either.right({ trigger })
    : Either.map(Cel.compile("decision", `triggers.${trigger.name}.condition`, trigger.condition), (condition) => ({ trigger, condition }))

/** The run id of the child a trigger starts on a parent run. */
export const childId = (parentRunId: string, trigger: Trigger): string => `${parentRunId}/${trigger.name}`

const knowSuffix = "/know"

/** The run of a KNOW's record id. */
const runOfKnow = (recordId: string): string | undefined =>
  recordId.endsWith(knowSuffix) ? recordId.slice(0, -knowSuffix.length) : undefined

/** A KNOW's fold as a decision sees it. */
const foldView = (know: Records.Know): Cel.FoldView => {
  const fold = know.body._fold
  return new Cel.FoldView({
    function: fold.function,
    answer: new Cel.AnswerView(fold.answer ?? null, fold.confidence, fold.rationale ?? "", "", fold.chosen),
    support: BigInt(fold.support.length),
    valid: BigInt(fold.valid),
    total: BigInt(fold.total)
  })
}

/**
 * Waits for `parentRunId` to end and starts each trigger's child whose kind and
 * condition match its KNOW (owned by the parent's owner); returns the
 * children's run ids (started now or before). A parent that failed or was
 * cancelled starts nothing.
 */
export const follow = (
  runs: Runs.Service,
  queries: QueryDefinition,
  parentRunId: string,
  triggers: ReadonlyArray<CheckedTrigger>
): Effect.Effect<ReadonlyArray<string>, Runs.RunsError> =>
  Effect.gen(function* () {
    const info = yield* runs.await(parentRunId)
    if (info.status !== "completed") return []
    const know = yield* Schema.decodeUnknown(Records.Know)(info.result).pipe(
      Effect.mapError((error) =>
        OrchestrationFailure.replayDiverged(`run ${parentRunId}'s result is not a KNOW: ${Text.excerpt(error.message, 200)}`, {
          details: { runId: parentRunId }
        })
      )
    )
    const started: Array<string> = []
    for (const { condition, trigger } of triggers) {
      if (know.body.kind !== trigger.kind) continue
      if (condition !== undefined && !(yield* condition.run({ fold: foldView(know) }))) continue
      const query: Query.Query = { ...trigger.query, input: { record_id: know.id } }
      started.push(yield* runs.start(queries, query, { id: childId(parentRunId, trigger), owner: info.owner }))
    }
    return started
  })

/** The text of a KNOW as a child query reads it: the parent's input, then its answer. */
export const recordText = (runs: Effect.Effect<Runs.Service>) => (recordId: string): Effect.Effect<string, Failure> =>
  Effect.gen(function* () {
    const service = yield* runs
    const runId = runOfKnow(recordId)
    if (runId === undefined) {
      return yield* ConfigurationFailure.invalidRequest(
        `input.record_id ${JSON.stringify(Text.excerpt(recordId, 80))} is not the id of a query's KNOW (<run id>/know)`,
        { details: { field: "input.record_id" } }
      )
    }
    const info = yield* service.poll(runId)
    if (info.status !== "completed") {
      return yield* ConfigurationFailure.invalidRequest(
        `input.record_id ${JSON.stringify(Text.excerpt(recordId, 80))}: run ${runId} is ${info.status}, it has no KNOW`,
        { details: { field: "input.record_id", status: info.status } }
      )
    }
    const know = yield* Schema.decodeUnknown(Records.Know)(info.result).pipe(
      Effect.mapError(() =>
        ConfigurationFailure.invalidRequest(`input.record_id ${JSON.stringify(Text.excerpt(recordId, 80))}: run ${runId}'s result is not a query's KNOW`, {
          details: { field: "input.record_id" }
        })
      )
    )
    const parentInput = yield* inputOf(service, runId)
    return `${parentInput}\n\nAnswer (${know.body.kind}): ${canonicalJson(know.body._fold.answer)}`
  })

/** A query run's root input text, following record inputs up the chain (bounded). */
const inputOf = (runs: Runs.Service, runId: string): Effect.Effect<string, Failure> =>
  Effect.gen(function* () {
    let current = runId
    for (let depth = 0; depth < 16; depth++) {
      // the events' first chunk is every record so far, the INTEND first
      const first = yield* Stream.runHead(Stream.chunks(runs.events(current)))
      const intend = Option.getOrUndefined(first)?.pipe(Chunk.findFirst((r) => r.kind === "INTEND"), Option.getOrUndefined)
      const query = Schema.decodeUnknownEither(Query.Query)(intend?.body)
      if (Either.isLeft(query)) {
        return yield* ConfigurationFailure.invalidRequest(`run ${current} is not a query run`, { details: { runId: current } })
      }
      const input = query.right.input
      if (input.inline !== undefined) return input.inline
      const parent = runOfKnow(input.record_id ?? "")
      if (parent === undefined) return input.record_id ?? ""
      current = parent
    }
    return yield* ConfigurationFailure.invalidRequest(`run ${runId}: record inputs nest more than 16 deep`, { details: { runId } })
  })
