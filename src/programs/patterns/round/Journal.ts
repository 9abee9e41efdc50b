/**
 * What a round writes to the run's journal: the selection (so a replay asks the
 * same responders whatever the clock and the registry say now), a CALL per
 * candidate, DO and LEARN records, their ids derived from their keys in the run.
 */
import * as Effect from "effect/Effect"
import { OrchestrationFailure } from "../../../domain/Failure.js"
import * as Records from "../../../domain/Records.js"
import * as Text from "../../../domain/Text.js"
import { ResponderRegistry } from "../../../services/ResponderRegistry.js"
import * as Select from "../../query/Select.js"
import type { JournaledCandidate } from "./Forms.js"
import { Journaled } from "./Forms.js"
import type { Spec, Thread } from "./Types.js"

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/** The id of the record journaled under `key` in the thread's run. */
export const rid = (thread: Thread, key: string) => Records.recordId(thread.runId, key)

export const doRecord = (thread: Thread, key: string, call: Records.Call, body: Records.DoBody): Records.Do =>
  new Records.Do({ id: rid(thread, key), kind: "DO", parents: [call.id], body })

export const failureBody = (call: Records.Call, problem: string): Records.FailureBody => ({
  kind: Records.kinds.failure,
  correlation_id: call.body.correlation_id,
  problem
})

/** Journals a LEARN under `key` (its id derived from it), citing `parents`. */
export const learn = (thread: Thread, key: string, parents: ReadonlyArray<string>, body: Records.LearnBody) =>
  thread.durable.step(key, Records.Learn, Effect.succeed(new Records.Learn({ id: rid(thread, key), kind: "LEARN", parents, body })))

// ---------------------------------------------------------------------------
// Selection and CALLs
// ---------------------------------------------------------------------------

/** The round's selection, journaled: a replay asks the same responders whatever the clock and the registry say now. */
export const selectStep = (thread: Thread, spec: Spec, input: string, topK: number) =>
  thread.durable.step(
    `${spec.key}/select`,
    Journaled,
    Select.select(spec.predicates, {
      query: input,
      topK,
      maxLatencySecs: thread.checked.maxLatencySecs,
      staleAfterSecs: thread.options.staleAfterSecs
    }).pipe(
      Effect.map((s): Journaled => ({
        candidates: s.candidates.map((c) => ({
          responder: c.responder.id,
          predicate: c.predicate.field,
          index: c.index,
          score: c.score,
          max_latency_secs: c.maxLatencySecs
        })),
        dropped: s.dropped,
        unmatched: s.unmatched
      }))
    )
  )

/** A candidate's CALL, journaled; its id is its correlation id. */
export const callStep = (thread: Thread, spec: Spec, candidate: Select.Candidate, dial: number | undefined) => {
  const key = `${spec.key}/call/${candidate.index}`
  return thread.durable.step(
    key,
    Records.Call,
    Effect.succeed(
      new Records.Call({
        id: rid(thread, key),
        kind: "CALL",
        parents: [thread.intendId],
        body: {
          kind: Records.kinds.call,
          correlation_id: rid(thread, key),
          responder: { id: candidate.responder.id, kind: candidate.responder.kind, index: candidate.index },
          stage: spec.stage,
          attempt: spec.attempt,
          role: spec.role,
          ...(dial === undefined ? {} : { dial })
        }
      })
    )
  )
}

/** The candidate a journaled selection names, found again in the registry. */
export const revive = (
  thread: Thread,
  spec: Spec,
  c: typeof JournaledCandidate.Type
): Effect.Effect<Select.Candidate, OrchestrationFailure, ResponderRegistry> =>
  Effect.gen(function* () {
    const registry = yield* ResponderRegistry
    const found = yield* registry.get(c.responder)
    const predicate = spec.predicates.find((p) => p.field === c.predicate)
    if (found._tag === "None" || predicate === undefined) {
      return yield* OrchestrationFailure.replayDiverged(
        `run ${thread.runId}: the recorded selection of round "${spec.key}" names ${found._tag === "None" ? `responder "${Text.excerpt(c.responder, 80)}", which is no longer registered` : `the predicate ${c.predicate}, which the query does not have`}`,
        { details: { runId: thread.runId, round: spec.key, responder: Text.excerpt(c.responder, 80), predicate: c.predicate } }
      )
    }
    return { responder: found.value, predicate, index: c.index, score: c.score, maxLatencySecs: c.max_latency_secs }
  })
