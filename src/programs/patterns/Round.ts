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
 *
 * This module runs the round; its parts are in round/: the shapes (Types), the
 * journal forms and records (Forms, Journal), a machine call (Ask), a human call
 * through slots (Human) and the fold of its answers (Fold).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Ref from "effect/Ref"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { Failure, OrchestrationFailure } from "../../domain/Failure.js"
import * as Records from "../../domain/Records.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import { ask } from "./round/Ask.js"
import { fold, responseOf, summary } from "./round/Fold.js"
import { DoStep } from "./round/Forms.js"
import { awaitHuman, HumanResponse, maxAccepts, openSlot } from "./round/Human.js"
import { callStep, doRecord, failureBody, learn, revive, selectStep } from "./round/Journal.js"
import type { Round, Spec, Thread } from "./round/Types.js"

export type { AnswerShapeOverride, Notice, Options, Round, Spec, Thread } from "./round/Types.js"
export { fold, HumanResponse, learn, maxAccepts, responseOf, summary }

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
