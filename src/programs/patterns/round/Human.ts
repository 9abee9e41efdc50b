/**
 * A human CALL: its answer comes through a durable slot, one per candidate.
 * The slot names its responder (who may answer it with their own key) and the
 * terms its answers are checked against when they arrive (the answer kind and
 * shape the round asks for, the CALL's latency bound): an answer off them is
 * refused and the slot stays open. The human is notified when the slot opens;
 * each accept (`infer.accept.v1`) moves the deadline to max(deadline, answered
 * at + eta), never past the bound, and opens the next slot; a decline or a
 * submit closes the call, and the deadline closes it as expired. At most
 * `maxAccepts` accepts per call: one more is refused when it arrives, naming
 * `kind`, and the slot stays open.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { Failure } from "../../../domain/Failure.js"
import * as AnswerShape from "../../../domain/AnswerShape.js"
import { canonicalJson } from "../../../domain/Json.js"
import * as Query from "../../../domain/Query.js"
import * as Records from "../../../domain/Records.js"
import * as Text from "../../../domain/Text.js"
import type { AnswerProblem, Slot, SlotTerms } from "../../../services/Durable.js"
import { answerShape } from "../../../services/Durable.js"
import type * as Select from "../../query/Select.js"
import { doRecord, failureBody } from "./Journal.js"
import type { Spec, Thread } from "./Types.js"

/**
 * What a human slot records of its round: the answer kind and shape asked for,
 * and how many accepts its call had before it opened (none recorded on a slot
 * opened before the count was).
 */
const Terms = Schema.Struct({
  kind: Records.AnswerKind,
  answer_shape: Query.AnswerShape,
  accepts: Schema.optional(Schema.NonNegativeInt)
})
const decodeTerms = Schema.decodeUnknownOption(Terms)

/**
 * Accepts (`infer.accept.v1`) one CALL takes, each opening the next slot; one
 * more is refused (the slot stays open for a submit or a decline).
 */
export const maxAccepts = 32

/** The field of a submit that carries the answer, per kind. */
const answerField: Readonly<Record<Records.AnswerKind, string>> = {
  "core.classification.v1": "category",
  "core.summary.v1": "summary",
  "core.text.v1": "text",
  "core.json.v1": "value"
}

/**
 * A human answer as its slot's terms take it: an accept within the bound and the
 * call's count, a decline, or a submit of the kind asked for that the round's
 * shape accepts (as the fold will check it). A slot without terms (opened before
 * they were recorded) takes any answer its schema does.
 */
export const checkHumanAnswer = (answer: Records.HumanAnswer, slot: SlotTerms): AnswerProblem | undefined => {
  if (answer.kind === Records.kinds.accept) {
    const accepted = Option.getOrUndefined(decodeTerms(slot.terms))?.accepts
    if (accepted !== undefined && accepted >= maxAccepts) {
      return { field: "kind", message: `this call was accepted ${accepted} times, the most it takes (${maxAccepts}): submit or decline` }
    }
    const eta = (answer as { readonly eta_seconds: number }).eta_seconds
    return slot.latest !== undefined && slot.at + eta * 1000 > slot.latest
      ? {
        field: "eta_seconds",
        message: `an accept may move the deadline to ${new Date(slot.latest).toISOString()} at the latest (the query's latency bound); now + ${eta} s is later`
      }
      : undefined
  }
  if (answer.kind === Records.kinds.decline) return undefined
  const terms = decodeTerms(slot.terms)
  if (terms._tag === "None") return undefined
  const { answer_shape, kind } = terms.value
  if (answer.kind !== kind) {
    return { field: "kind", message: `the query asks for ${kind} (or an accept or decline), got ${Text.excerpt(String(answer.kind), 60)}` }
  }
  const body = Records.bodyOfSubmit(Records.submitBody(kind, "", withoutKind(answer)))
  const checked = AnswerShape.checker(answer_shape).check(AnswerShape.answerOf(body))
  if (checked._tag === "Right") return undefined
  const labels = answer_shape.kind === "core.classification.v1" ? answer_shape.labels : undefined
  return {
    field: answerField[kind],
    message: labels === undefined ? checked.left : `${checked.left} (the labels: ${Text.excerpt(canonicalJson(labels), 200)})`
  }
}

/** The answers a human slot takes: accept, decline or submit, checked against the slot's terms when they arrive. */
export const HumanResponse = answerShape("infer.response.v1", Records.HumanAnswer, checkHumanAnswer)

/**
 * Opens the `n`th slot of a human CALL and notifies the human: the first one's
 * deadline is the candidate's latency bound; the next ones' `next.deadline`, and
 * no accept moves any past `next.latest` (the first one's deadline).
 */
export const openSlot = (
  thread: Thread,
  spec: Spec,
  candidate: Select.Candidate,
  call: Records.Call,
  input: string,
  n: number,
  next: { readonly deadline: number; readonly latest: number } | undefined
): Effect.Effect<Slot, Failure> =>
  Effect.gen(function* () {
    const { durable } = thread
    const at = `${spec.key}/${candidate.index}/${n}`
    const now = next === undefined ? 0 : (yield* durable.now(`${spec.key}/now/${candidate.index}/${n}`)).epochMillis
    const sla = next === undefined ? Duration.seconds(candidate.maxLatencySecs) : Duration.millis(Math.max(0, next.deadline - now))
    const bound = next === undefined ? sla : Duration.millis(Math.max(0, next.latest - now))
    const wire = spec.shape?.wire ?? thread.checked.query.answer_shape
    const slot = yield* durable.slot(HumanResponse, {
      key: `${spec.key}/slot/${candidate.index}/${n}`,
      sla,
      bound,
      responder: candidate.responder.id,
      terms: { kind: wire.kind, answer_shape: wire, accepts: n - 1 }
    })
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
    const latest = first.deadline.epochMillis
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
        // only a slot opened before its terms counted accepts takes one past the bound
        if (n > maxAccepts) {
          const record = yield* durable.step(
            key,
            Records.Do,
            Effect.succeed(doRecord(thread, key, call, failureBody(call, `accepted ${n} times without answering; at most ${maxAccepts} accepts per call`)))
          )
          return { record, accepts, expired: false }
        }
        deadline = Math.min(latest, Math.max(deadline, outcome.at.epochMillis + eta * 1000))
        slot = yield* openSlot(thread, spec, candidate, call, input, n + 1, { deadline, latest })
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
