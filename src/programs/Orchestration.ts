/**
 * Orchestration: a query (`infer.query.v1`) run durably by its pattern.
 *
 * A query names one of six patterns (single_shot, verify, waterfall,
 * retry_on_low_confidence, escalate, ensemble_with_audit); each is a durable
 * program over rounds of CALLs and DOs (see patterns/Round). Every CALL and DO is
 * journaled as a step before anything folds, so a restart never asks again a
 * responder whose answer is recorded, and a failed run still shows the answers it
 * had; each pattern's state between rounds is a LEARN step; the committed answer
 * (KNOW) is the run's result. A failing responder is a failed slot, recorded,
 * never a crash.
 *
 * `definition` makes the run definition to register with a Runs layer; `start`
 * checks a query before starting it (a bad query is CONFIG_INVALID_REQUEST naming
 * its fields, and no run is recorded); `thread` reads a run back as the query's
 * records (INTEND, CALL, DO, LEARN, KNOW). Queries nest: `follow` starts a
 * trigger's child query on a parent's KNOW, exactly once (see patterns/Nested).
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { Failure } from "../domain/Failure.js"
import * as Query from "../domain/Query.js"
import * as Records from "../domain/Records.js"
import { Durable } from "../services/Durable.js"
import type { Reranker } from "../services/Reranker.js"
import type { ResponderRegistry } from "../services/ResponderRegistry.js"
import * as Runs from "../services/Runs.js"
import * as Audit from "./patterns/Audit.js"
import * as Escalate from "./patterns/Escalate.js"
import type * as Nested from "./patterns/Nested.js"
import * as Retry from "./patterns/Retry.js"
import * as Round from "./patterns/Round.js"
import * as SingleShot from "./patterns/SingleShot.js"
import * as Verify from "./patterns/Verify.js"
import * as Waterfall from "./patterns/Waterfall.js"
import * as Check from "./query/Check.js"
import * as Observed from "./internal/Observed.js"

export { HumanResponse, maxAccepts, type Notice } from "./patterns/Round.js"
export { type CheckedTrigger, checkTrigger, childId, follow, recordText, type Trigger } from "./patterns/Nested.js"

export interface Options extends Round.Options, Check.Options {
  /** The run definition's name. Default "infer.query.v1". */
  readonly name?: string | undefined
  /** The text of a record input (`input.record_id`: another query's KNOW). Without it such a query is refused. */
  readonly recordText?: ((recordId: string) => Effect.Effect<string, Failure>) | undefined
}

/** A query's run definition. */
export type QueryDefinition = Nested.QueryDefinition

/** The run definition of queries, to register with a Runs layer. */
export const definition = (options: Options = {}): QueryDefinition =>
  Runs.define({
    name: options.name ?? Query.QueryKind,
    payload: Query.Query,
    success: Records.Know,
    answers: [Round.HumanResponse],
    program: (query) => run(query, options)
  })

/** Runs a query inside a durable run: check, then its pattern. */
export const run: (
  query: Query.Query,
  options?: Options
) => Effect.Effect<Records.Know, Failure, Durable | ResponderRegistry | Reranker> = Observed.fn("Orchestration.run")(
  function* (query: Query.Query, options: Options = {}) {
    const checked = yield* Check.checkDecoded(query, options)
    const durable = yield* Durable
    const recordText = options.recordText
    const input = yield* Check.inputText(
      checked.input,
      recordText === undefined ? undefined : (recordId) => durable.step("input", Schema.String, recordText(recordId)),
      (recordId) => `this orchestration has no recordText option to read ${recordId} with`
    )
    const thread: Round.Thread = {
      durable,
      runId: durable.runId,
      intendId: Records.recordId(durable.runId, "intend"),
      checked,
      input,
      options,
      spent: yield* Ref.make({ calls: 0, tokens: 0 })
    }
    const o = checked.orchestration
    switch (o.pattern) {
      case "single_shot":
        return yield* SingleShot.run(thread)
      case "verify":
        return yield* Verify.run(thread, o)
      case "waterfall":
        return yield* Waterfall.run(thread, o)
      case "retry_on_low_confidence":
        return yield* Retry.run(thread, o)
      case "escalate":
        return yield* Escalate.run(thread, o)
      case "ensemble_with_audit":
        return yield* Audit.run(thread, o)
    }
  }
)

/** Checks `wire` as a query and starts it; a bad query starts nothing. */
export const start = (
  runs: Runs.Service,
  queries: QueryDefinition,
  wire: unknown,
  options: Check.Options & Runs.StartOptions = {}
): Effect.Effect<string, Runs.RunsError> =>
  Effect.flatMap(Check.check(wire, options), (checked) => runs.start(queries, checked.query, { id: options.id, owner: options.owner }))

const decodeRecord = Schema.decodeUnknownEither(Records.QueryRecord)

/**
 * A run of `queries` read back as the query's thread: the INTEND, then the CALL,
 * DO and LEARN records in the order they were journaled, then the KNOW if the run
 * committed one. Waits for nothing: the records so far.
 */
export const thread = (runs: Runs.Service, runId: string): Effect.Effect<ReadonlyArray<Records.QueryRecord>, Runs.RunsError> =>
  Effect.gen(function* () {
    const info = yield* runs.poll(runId)
    const done = Runs.terminalStatuses.has(info.status)
    const events = runs.events(runId)
    // the events' first chunk is every record so far; a run that is over ends its stream
    const recorded = Chunk.toReadonlyArray(
      done
        ? yield* Stream.runCollect(events)
        : Option.getOrElse(yield* Stream.runHead(Stream.chunks(events)), () => Chunk.empty<Runs.ThreadRecord>())
    )
    const out: Array<Records.QueryRecord> = []
    for (const record of recorded) {
      if (record.kind === "INTEND") {
        const decoded = Schema.decodeUnknownEither(Query.Query)(record.body)
        if (Either.isRight(decoded)) {
          out.push(new Records.Intend({ id: Records.recordId(runId, "intend"), kind: "INTEND", parents: [], body: decoded.right }))
        }
        continue
      }
      if (record.kind !== "DO") continue
      // a step's value: a record, or a dispatched call's { record, tokens }
      const value = (record.body as { readonly value?: unknown } | undefined)?.value
      const decoded = Either.orElse(decodeRecord(value), () => decodeRecord((value as { readonly record?: unknown } | undefined)?.record))
      if (Either.isRight(decoded)) out.push(decoded.right)
    }
    if (info.status === "completed") {
      const know = Schema.decodeUnknownEither(Records.Know)(info.result)
      if (Either.isRight(know)) out.push(know.right)
    }
    return out
  })
