/**
 * A human CALL: its answer comes through a durable slot, one per candidate.
 * The human is notified when the slot opens; each accept (`infer.accept.v1`)
 * moves the deadline to max(deadline, answered at + eta) and opens the next
 * slot; a decline or a submit closes the call, and the deadline closes it as
 * expired. At most `maxAccepts` accepts per call.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import type { Failure } from "../../../domain/Failure.js"
import * as Records from "../../../domain/Records.js"
import type { Slot } from "../../../services/Durable.js"
import { answerShape } from "../../../services/Durable.js"
import type * as Select from "../../query/Select.js"
import { doRecord, failureBody } from "./Journal.js"
import type { Spec, Thread } from "./Types.js"

/** The answers a human slot takes: accept, decline or submit. */
export const HumanResponse = answerShape("infer.response.v1", Records.HumanAnswer)

/** Accepts a human may send on one CALL; the last one closes the call as failed (an answer never came). */
export const maxAccepts = 32

/** Opens the `n`th slot of a human CALL (its deadline the candidate's latency bound, or `deadline`) and notifies the human. */
export const openSlot = (
  thread: Thread,
  spec: Spec,
  candidate: Select.Candidate,
  call: Records.Call,
  input: string,
  n: number,
  deadline: number | undefined
): Effect.Effect<Slot, Failure> =>
  Effect.gen(function* () {
    const { durable } = thread
    const at = `${spec.key}/${candidate.index}/${n}`
    const sla = deadline === undefined
      ? Duration.seconds(candidate.maxLatencySecs)
      : Duration.millis(Math.max(0, deadline - (yield* durable.now(`${spec.key}/now/${candidate.index}/${n}`)).epochMillis))
    const slot = yield* durable.slot(HumanResponse, { key: `${spec.key}/slot/${candidate.index}/${n}`, sla })
    const notify = thread.options.notify
    if (notify !== undefined) {
      yield* durable.step(`${spec.key}/notify/${candidate.index}/${n}`, Schema.Void, notify({ slot, call, responder: candidate.responder, input }))
    } else if (n === 1) {
      yield* Effect.logWarning(`human CALL ${call.id} (${at}) has no notify option: nobody is told of slot ${slot.key}`)
    }
    return slot
  })

/** Waits for a human's terminal answer: accepts move the deadline and reopen; decline, submit or expiry end the call. */
export const awaitHuman = (
  thread: Thread,
  spec: Spec,
  candidate: Select.Candidate,
  call: Records.Call,
  input: string,
  first: Slot,
  kind: Records.AnswerKind
): Effect.Effect<{ readonly record: Records.Do; readonly accepts: ReadonlyArray<Records.Do>; readonly expired: boolean }, Failure> =>
  Effect.gen(function* () {
    const { durable } = thread
    const key = `${spec.key}/do/${candidate.index}`
    const accepts: Array<Records.Do> = []
    let slot = first
    let deadline = first.deadline.epochMillis
    for (let n = 1; ; n++) {
      const outcome = yield* durable.awaitAnswer(HumanResponse, slot)
      if (outcome._tag === "Expired") {
        const record = yield* durable.step(
          key,
          Records.Do,
          Effect.succeed(doRecord(thread, key, call, failureBody(call, `expired: no answer by ${new Date(deadline).toISOString()}`)))
        )
        return { record, accepts, expired: true }
      }
      const correlation = call.body.correlation_id
      if (outcome._tag !== "Answered") {
        // declined through the Runs API rather than with an infer.decline.v1 answer
        const declined = Schema.decodeUnknownEither(Records.DeclineReason)((outcome as { readonly reason?: unknown }).reason)
        const reason = Either.getOrElse(declined, () => "other" as const)
        const record = yield* durable.step(
          key,
          Records.Do,
          Effect.succeed(doRecord(thread, key, call, { kind: Records.kinds.decline, correlation_id: correlation, reason }))
        )
        return { record, accepts, expired: false }
      }
      const answer = outcome.value
      if (answer.kind === Records.kinds.accept) {
        const eta = answer.eta_seconds
        const acceptKey = `${key}/${n}`
        accepts.push(
          yield* durable.step(
            acceptKey,
            Records.Do,
            Effect.succeed(doRecord(thread, acceptKey, call, { kind: Records.kinds.accept, correlation_id: correlation, eta_seconds: eta }))
          )
        )
        if (n >= maxAccepts) {
          const record = yield* durable.step(
            key,
            Records.Do,
            Effect.succeed(doRecord(thread, key, call, failureBody(call, `accepted ${n} times without answering; at most ${maxAccepts} accepts per call`)))
          )
          return { record, accepts, expired: false }
        }
        deadline = Math.max(deadline, outcome.at.epochMillis + eta * 1000)
        slot = yield* openSlot(thread, spec, candidate, call, input, n + 1, deadline)
        continue
      }
      const body: Records.DoBody = answer.kind === Records.kinds.decline
        ? { kind: Records.kinds.decline, correlation_id: correlation, reason: answer.reason, ...(answer.note === undefined ? {} : { note: answer.note }) }
        : answer.kind === kind
        ? Records.submitBody(kind, correlation, withoutKind(answer))
        : failureBody(call, `submitted an answer of kind ${answer.kind}; the query asks for ${kind}`)
      const record = yield* durable.step(key, Records.Do, Effect.succeed(doRecord(thread, key, call, body)))
      return { record, accepts, expired: false }
    }
  })

const withoutKind = (answer: Readonly<Record<string, unknown>>): unknown => {
  if (answer.kind === "core.json.v1") return answer.value
  const { kind: _kind, ...rest } = answer
  return rest
}
