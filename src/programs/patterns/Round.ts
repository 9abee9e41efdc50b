/**
 * A round of a durable query: one set of CALLs and their DOs, journaled.
 *
 * Every pattern is made of rounds (single_shot is one; a waterfall's stage, an
 * escalation's tier, a retry's attempt, verify's primary, verifier and tiebreaker,
 * the ensemble and its auditor are each one). A round selects its candidates (the
 * selection journaled, so a replay asks the same responders), records a CALL per
 * candidate, then dispatches: pattern, system and llm responders concurrently,
 * each answer (or failure, timeout, off-shape reply) journaled as its DO before
 * anything folds; humans through durable slots, one per candidate, each accept
 * (`infer.accept.v1`) moving the deadline to max(deadline, answered at + eta)
 * and opening the next slot, a decline or a submit closing the call, the deadline
 * closing it as expired. A DO recorded is never asked again: a replay after a
 * crash returns it.
 *
 * Awaiting `all` waits for every candidate; `quorum` stops as soon as
 * `min_quorum` valid answers are in: the calls still going are interrupted and
 * their DO records say so, the humans not yet awaited are not waited for and
 * their slots are closed (a late answer is ORCHESTRATION_SLOT_CLOSED at once).
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { Failure } from "../../domain/Failure.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type * as TokenUsage from "../../domain/TokenUsage.js"
import type { Service as DurableService, Slot } from "../../services/Durable.js"
import { answerShape } from "../../services/Durable.js"
import type { Reranker } from "../../services/Reranker.js"
import type { Responder } from "../../services/ResponderRegistry.js"
import { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Folds from "../Folds.js"
import type * as Check from "../query/Check.js"
import * as Select from "../query/Select.js"
import * as SingleShot from "../query/SingleShot.js"

/** The answers a human slot takes: accept, decline or submit. */
export const HumanResponse = answerShape("infer.response.v1", Records.HumanAnswer)

/** What a human responder is told: where to answer, what, by when. */
export interface Notice {
  readonly slot: Slot
  readonly call: Records.Call
  readonly responder: Responder
  /** The question as the responder sees it. */
  readonly input: string
}

export interface Options {
  /** all (default): wait for every candidate; quorum: fold once `min_quorum` valid answers are in. */
  readonly awaiting?: "all" | "quorum" | undefined
  /** Hands a human slot (its secret and deadline) to the human; runs once per slot. Without it nobody can answer a human CALL. */
  readonly notify?: ((notice: Notice) => Effect.Effect<void, Failure>) | undefined
  /** Temperature for llm responders at dial 1 (the dial scales it). Default 1. */
  readonly maxTemperature?: number | undefined
  /** See Select. */
  readonly staleAfterSecs?: number | undefined
}

/** Accepts a human may send on one CALL; the last one closes the call as failed (an answer never came). */
export const maxAccepts = 32

/** What every round of one run shares. */
export interface Thread {
  readonly durable: DurableService
  readonly runId: string
  readonly intendId: string
  readonly checked: Check.Checked
  /** The query's input as text. */
  readonly input: string
  readonly options: Options
  /** CALLs dispatched and tokens spent so far (rebuilt identically on a replay). */
  readonly spent: Ref.Ref<{ readonly calls: number; readonly tokens: number }>
}

export interface Spec {
  /** The round's key in the run, unique: `stage-1`, `attempt-2`, `verifier`... */
  readonly key: string
  readonly role: string
  readonly predicates: ReadonlyArray<Check.Responder>
  readonly stage: number
  readonly attempt: number
  readonly topK: number
  /** The text the responders are asked. Default the query's input. */
  readonly input?: string | undefined
  /** The dial; default the query's. */
  readonly dial?: number | undefined
  /** The answer shape asked for, when it is not the query's (an auditor's verdict). */
  readonly shape?: AnswerShapeOverride | undefined
}

/** A shape asked of a round instead of the query's. */
export interface AnswerShapeOverride {
  readonly wire: Check.Checked["query"]["answer_shape"]
  readonly checker: AnswerShape.Checker
}

export interface Round {
  readonly calls: ReadonlyArray<Records.Call>
  /** Every DO: the accepts, then one terminal DO per CALL, in candidate order. */
  readonly dos: ReadonlyArray<Records.Do>
  /** One per CALL, in candidate order, as the folds take them. */
  readonly responses: ReadonlyArray<Folds.Response>
  /** Every human CALL of the round expired and nothing else answered validly. */
  readonly expired: boolean
  readonly selection: Journaled
}

// ---------------------------------------------------------------------------
// Journal forms
// ---------------------------------------------------------------------------

const JournaledCandidate = Schema.Struct({
  responder: Schema.String,
  predicate: Schema.String,
  index: Schema.Number,
  score: Schema.Number,
  max_latency_secs: Schema.Number
})

const Journaled = Schema.Struct({
  candidates: Schema.Array(JournaledCandidate),
  dropped: Schema.Array(Schema.Struct({ responder: Schema.String, predicate: Schema.String, reason: Schema.String })),
  unmatched: Schema.Array(Schema.String)
})
type Journaled = typeof Journaled.Type

const DoStep = Schema.Struct({ record: Records.Do, tokens: Schema.Number })

// ---------------------------------------------------------------------------
// Budget
// ---------------------------------------------------------------------------

/** Why the query's budget allows no further round, if it does not. */
export const budgetExhausted = (thread: Thread): Effect.Effect<string | undefined> =>
  Effect.map(Ref.get(thread.spent), (spent) => {
    const budget = thread.checked.budget
    if (budget?.calls !== undefined && spent.calls >= budget.calls) return `the call budget (${budget.calls}) is spent`
    if (budget?.tokens !== undefined && spent.tokens >= budget.tokens) {
      return `the token budget (${budget.tokens}) is spent (${spent.tokens} used)`
    }
    return undefined
  })

const callsLeft = (thread: Thread): Effect.Effect<number> =>
  Effect.map(Ref.get(thread.spent), (spent) =>
    thread.checked.budget?.calls === undefined ? Number.POSITIVE_INFINITY : thread.checked.budget.calls - spent.calls)

// ---------------------------------------------------------------------------
// The round
// ---------------------------------------------------------------------------

const rid = (thread: Thread, key: string) => Records.recordId(thread.runId, key)

/** Runs one round: select, CALL, dispatch, await; every CALL and DO journaled. */
export const run = (
  thread: Thread,
  spec: Spec
): Effect.Effect<Round, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const { durable } = thread
    const input = spec.input ?? thread.input
    const topK = Math.max(0, Math.min(spec.topK, yield* callsLeft(thread)))
    const selection = yield* selectStep(thread, spec, input, topK)
    const candidates = yield* Effect.forEach(selection.candidates, (c) => revive(thread, spec, c))
    const dial = spec.dial ?? thread.checked.dial
    const calls = yield* Effect.forEach(candidates, (candidate) => callStep(thread, spec, candidate, dial))
    yield* Ref.update(thread.spent, (s) => ({ ...s, calls: s.calls + calls.length }))

    const checker = spec.shape?.checker ?? thread.checked.shape
    const kind = (spec.shape?.wire ?? thread.checked.query.answer_shape).kind
    const quorum = yield* Deferred.make<void>()
    const validCount = yield* Ref.make(0)
    const countValid = (record: Records.Do) =>
      Records.isSubmit(record.body) && Either.isRight(checker.check(AnswerShape.answerOf(Records.bodyOfSubmit(record.body))))
        ? Effect.flatMap(Ref.updateAndGet(validCount, (n) => n + 1), (n) =>
          n >= thread.checked.minQuorum ? Deferred.succeed(quorum, undefined) : Effect.void)
        : Effect.void
    const byQuorum = thread.options.awaiting === "quorum"

    const machine = candidates.flatMap((c, i) => (c.responder.kind === "actor" ? [] : [{ candidate: c, call: calls[i]! }]))
    const humans = candidates.flatMap((c, i) => (c.responder.kind === "actor" ? [{ candidate: c, call: calls[i]! }] : []))

    // humans hear first (their slots open with the round), then the machines answer, then the humans are awaited
    const opened = yield* Effect.forEach(humans, ({ call, candidate }) =>
      Effect.map(openSlot(thread, spec, candidate, call, input, 1, undefined), (slot) => ({ call, candidate, slot })))

    const terminal = new Map<number, Records.Do>()
    const accepts: Array<Records.Do> = []
    let tokens = 0
    yield* Effect.forEach(machine, ({ call, candidate }) =>
      Effect.gen(function* () {
        const asked = ask(thread, spec, candidate, call, input, dial, kind)
        const raced = byQuorum
          ? Effect.raceFirst(
            asked,
            Effect.as(Deferred.await(quorum), {
              record: doRecord(thread, `${spec.key}/do/${candidate.index}`, call, failureBody(call, "interrupted: the quorum was met before it answered")),
              tokens: 0
            })
          )
          : asked
        const done = yield* durable.step(`${spec.key}/do/${candidate.index}`, DoStep, raced)
        tokens += done.tokens
        terminal.set(candidate.index, done.record)
        yield* countValid(done.record)
      }), { concurrency: "unbounded", discard: true })

    let expiredHumans = 0
    for (const { call, candidate, slot } of opened) {
      const key = `${spec.key}/do/${candidate.index}`
      if (byQuorum && (yield* Deferred.isDone(quorum))) {
        // nobody waits for this human any more: a late answer is refused at once
        yield* durable.closeSlot(slot)
        const record = yield* durable.step(
          key,
          Records.Do,
          Effect.succeed(doRecord(thread, key, call, failureBody(call, "not awaited: the quorum was met before it answered")))
        )
        terminal.set(candidate.index, record)
        continue
      }
      const outcome = yield* awaitHuman(thread, spec, candidate, call, input, slot, kind)
      accepts.push(...outcome.accepts)
      terminal.set(candidate.index, outcome.record)
      if (outcome.expired) expiredHumans += 1
      yield* countValid(outcome.record)
    }
    yield* Ref.update(thread.spent, (s) => ({ ...s, tokens: s.tokens + tokens }))

    const terminals = candidates.map((c) => terminal.get(c.index)!)
    const responses = candidates.map((c, i) => responseOf(spec, c, terminals[i]!))
    const valid = yield* Ref.get(validCount)
    return {
      calls,
      dos: [...accepts, ...terminals],
      responses,
      expired: humans.length > 0 && expiredHumans === humans.length && valid === 0,
      selection
    }
  })

/** The round's selection, journaled: a replay asks the same responders whatever the clock and the registry say now. */
const selectStep = (thread: Thread, spec: Spec, input: string, topK: number) =>
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
const callStep = (thread: Thread, spec: Spec, candidate: Select.Candidate, dial: number | undefined) => {
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
const revive = (
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

const doRecord = (thread: Thread, key: string, call: Records.Call, body: Records.DoBody): Records.Do =>
  new Records.Do({ id: rid(thread, key), kind: "DO", parents: [call.id], body })

const failureBody = (call: Records.Call, problem: string): Records.FailureBody => ({
  kind: Records.kinds.failure,
  correlation_id: call.body.correlation_id,
  problem
})

/** One pattern, system or llm call: its DO (a submit or a failure, never a failed effect) and its tokens. */
const ask = (
  thread: Thread,
  spec: Spec,
  candidate: Select.Candidate,
  call: Records.Call,
  input: string,
  dial: number | undefined,
  kind: Records.AnswerKind
): Effect.Effect<typeof DoStep.Type> =>
  Effect.gen(function* () {
    const usage = yield* Ref.make<ReadonlyArray<TokenUsage.TokenUsage>>([])
    const checked: Check.Checked = spec.shape === undefined
      ? { ...thread.checked, dial }
      : { ...thread.checked, dial, shape: spec.shape.checker, query: { ...thread.checked.query, answer_shape: spec.shape.wire } }
    const outcome = yield* SingleShot.ask(candidate, input, checked, { maxTemperature: thread.options.maxTemperature }, usage).pipe(
      Effect.timeoutFail({
        duration: Duration.seconds(candidate.maxLatencySecs),
        onTimeout: () => `no answer within ${candidate.maxLatencySecs} s`
      }),
      Effect.either
    )
    const tokens = (yield* Ref.get(usage)).reduce((sum, u) => sum + u.promptTokens + u.outputTokens, 0)
    const key = `${spec.key}/do/${candidate.index}`
    const body: Records.DoBody = Either.match(outcome, {
      onLeft: (problem) => failureBody(call, problem),
      onRight: (answer) => Records.submitBody(kind, call.body.correlation_id, answer)
    })
    return { record: doRecord(thread, key, call, body), tokens }
  })

const openSlot = (
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
const awaitHuman = (
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

/** A terminal DO as the folds take it. */
export const responseOf = (spec: Pick<Spec, "stage" | "attempt">, candidate: Select.Candidate, record: Records.Do): Folds.Response => {
  const fields = {
    responder: candidate.responder.id,
    responderIndex: candidate.index,
    kind: candidate.responder.kind,
    attempt: spec.attempt,
    stage: spec.stage,
    recordId: record.id
  }
  const body = record.body
  if (Records.isSubmit(body)) return Folds.answered({ ...fields, body: Records.bodyOfSubmit(body) })
  if (body.kind === Records.kinds.decline) return Folds.failed({ ...fields, problem: `declined: ${body.reason}${body.note === undefined ? "" : ` (${Text.excerpt(body.note, 120)})`}` })
  if (body.kind === Records.kinds.failure) return Folds.failed({ ...fields, problem: body.problem })
  return Folds.failed({ ...fields, problem: "accepted but never answered" })
}

// ---------------------------------------------------------------------------
// Folding a round
// ---------------------------------------------------------------------------

/** Folds responses with the query's fold, after checking the quorum (below it: NO_CONSENSUS naming what was missing). */
export const fold = (
  thread: Thread,
  responses: ReadonlyArray<Folds.Response>,
  spec: Folds.Spec = thread.checked.fold
): Either.Either<Folds.Output, OrchestrationFailure> => {
  const checker = spec.options.shape ?? thread.checked.shape
  const valid = responses.filter((r) =>
    r.outcome._tag === "Answered" && Either.isRight(checker.check(AnswerShape.answerOf(r.outcome.body)))).length
  if (valid < thread.checked.minQuorum) {
    return Either.left(
      OrchestrationFailure.noConsensus(
        `only ${valid} of ${responses.length} responders gave a valid answer; min_quorum is ${thread.checked.minQuorum}`,
        {
          details: {
            valid,
            minQuorum: thread.checked.minQuorum,
            missing: responses.flatMap((r) =>
              r.outcome._tag === "Failed"
                ? [{ responder: r.responder, record_id: r.recordId, problem: Text.excerpt(r.outcome.problem, 160) }]
                : []
            )
          }
        }
      )
    )
  }
  return Folds.run(spec, responses)
}

/** A fold's output as records carry it. */
export const summary = (out: Folds.Output): Records.FoldSummary => ({
  function: out.function,
  answer: out.answer ?? null,
  confidence: out.confidence,
  ...(out.rationale === undefined ? {} : { rationale: out.rationale }),
  chosen: out.chosen.recordId,
  support: out.support.map((r) => r.recordId),
  valid: out.valid,
  total: out.total,
  rejected: out.rejected.map((r) => ({ record_id: r.response.recordId, problem: Text.excerpt(r.problem, 300) }))
})

/** Journals a LEARN under `key` (its id derived from it), citing `parents`. */
export const learn = (thread: Thread, key: string, parents: ReadonlyArray<string>, body: Records.LearnBody) =>
  thread.durable.step(key, Records.Learn, Effect.succeed(new Records.Learn({ id: rid(thread, key), kind: "LEARN", parents, body })))

const isNoConsensus = (failure: Failure): failure is OrchestrationFailure =>
  failure._tag === "OrchestrationFailure" && failure.code === "ORCHESTRATION_NO_CONSENSUS"

/**
 * A round whose selection may find no one: that failure comes back as a value (a
 * stage or tier that could not run); any other failure still fails.
 */
export const runOrNoOne = (
  thread: Thread,
  spec: Spec
): Effect.Effect<Either.Either<Round, OrchestrationFailure>, Failure, ResponderRegistry | Reranker> =>
  run(thread, spec).pipe(
    Effect.map(Either.right),
    Effect.catchIf(isNoConsensus, (failure) => Effect.succeed(Either.left(failure)))
  )

/** Record ids of a round's terminal DOs. */
export const doIds = (round: Round): ReadonlyArray<string> => round.dos.map((d) => d.id)
