/**
 * The Runs API over the runtime: start, poll, await, resume, cancel, respond,
 * accept, decline, events, list, export/import of threads, prune. Waiting
 * (`await`, `events`) follows the runtime's change feed, never a clock.
 */
import { DeclineReason } from "../../services/Durable.js"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { Cancellation, ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import type { AnswerProblem } from "../../services/Durable.js"
import type { Answerer, RunsError, Service as RunsService } from "../../services/Runs.js"
import { maxAcceptsPerSlot, RunInfo, terminalStatuses, Thread, ThreadRecord, ThreadSlot } from "../../services/Runs.js"
import type { RunRow, SlotRow } from "./Tables.js"
import { describeParse, encodeFailure, parseJson, recordOf, endsThread, secretMatches, toUtc, workflowName, decodeFailure } from "./Encoding.js"
import { describeDefinitions, type Runtime } from "./Runtime.js"
import type { Slots } from "./Slots.js"

export interface Options {
  /** Deletes what the engine keeps of a pruned run (its journal); none for the in-memory engine. */
  readonly purge?: ((workflow: string, runId: string) => Effect.Effect<void>) | undefined
  /** After a prune that removed runs: gives the space back (a SQLite file shrunk); none elsewhere. */
  readonly compact?: Effect.Effect<void> | undefined
}

export const make = (runtime: Runtime, slots: Slots, options: Options): RunsService => {
  const { appended, byName, cancelled, changed, changes, engine, findRun, now, owner, store } = runtime
  const { arm, close, deliver } = slots

  /** Whether a run's recorded owner is alive (another process on a shared store); only this one otherwise. */
  const liveness = runtime.shared === undefined ? Effect.succeed((_: string) => false) : runtime.shared.isLive

  const infoOf = (row: RunRow, isLive: (owner: string) => boolean): RunInfo => {
    const error = row.error === null ? Option.none() : decodeFailure(parseJson(row.error))
    return new RunInfo({
      id: row.id,
      definition: row.definition,
      status: row.status === "running" && row.owner !== owner && !(row.owner !== null && isLive(row.owner)) ? "stale" : row.status,
      ...(row.principal === null ? {} : { owner: row.principal }),
      ...(row.waiting_on === null ? {} : { waitingOn: row.waiting_on }),
      ...(row.result === null ? {} : { result: parseJson(row.result) }),
      ...(Option.isSome(error) ? { error: error.value } : {}),
      createdAt: toUtc(row.created_at),
      updatedAt: toUtc(row.updated_at)
    })
  }

  /** The run's row, whatever its definition (reading a run needs no definition registered here). */
  const rowOf = (runId: string) =>
    Effect.flatMap(store.getRun(runId), (row) =>
      row === undefined ? Effect.fail(ConfigurationFailure.invalidRequest(`no run has the id "${runId}"`)) : Effect.succeed(row))

  const poll = Effect.fn("Runs.poll")(function* (runId: string) {
    return infoOf(yield* rowOf(runId), yield* liveness)
  })

  /**
   * Waits for a move of `runId`'s row (not every record appended) after
   * subscribing, so no move is missed between a check and the wait.
   */
  const waitUntil = <A>(runId: string, check: Effect.Effect<Option.Option<A>, RunsError>) =>
    Effect.scoped(
      Effect.gen(function* () {
        const subscription = yield* PubSub.subscribe(changes)
        while (true) {
          const done = yield* check
          if (Option.isSome(done)) return done.value
          while (true) {
            const change = yield* Queue.take(subscription)
            if (change.runId === runId && change.status) break
          }
        }
      })
    )

  /** Whether `answerer` may answer `slot`. */
  const opens = (slot: SlotRow, answerer: Answerer): boolean =>
    typeof answerer === "string"
      ? secretMatches(answerer, slot.secret_hash)
      : "responder" in answerer
      ? slot.responder !== null && slot.responder === answerer.responder
      : answerer.operator

  /**
   * The slot `slotKey` of `runId` if `answerer` may answer it and it still takes a
   * response: a run or a slot that does not exist and a slot the answerer may not
   * answer are refused alike, before anything else is said about the run (not
   * even whether this process has its definition); a slot past its deadline is
   * closed as expired on the way.
   */
  const openSlot = (runId: string, slotKey: string, answerer: Answerer) =>
    Effect.gen(function* () {
      const slot = yield* store.getSlot(runId, slotKey)
      if (slot === undefined || !opens(slot, answerer)) {
        return yield* OrchestrationFailure.slotForbidden(
          `run ${runId} has no slot "${slotKey}" that this answerer may answer`,
          { details: { runId, slot: slotKey } }
        )
      }
      const { definition } = yield* findRun(runId)
      if (slot.status !== "open") {
        return yield* OrchestrationFailure.slotClosed(`slot "${slotKey}" of run ${runId} is closed (${slot.status})`, {
          details: { runId, slot: slotKey, status: slot.status }
        })
      }
      const at = yield* now
      if (at >= slot.deadline) {
        yield* close(runId, slotKey, "expired")
        return yield* OrchestrationFailure.slotClosed(
          `slot "${slotKey}" of run ${runId} passed its deadline (${new Date(slot.deadline).toISOString()})`,
          { details: { runId, slot: slotKey, status: "expired" } }
        )
      }
      return { at, definition, slot }
    })

  /** A response the slot refuses as sent (CONFIG_INVALID_REQUEST), naming the field of the response. */
  const refused = (runId: string, slotKey: string, problem: AnswerProblem) =>
    ConfigurationFailure.invalidRequest(`${problem.field}: ${problem.message}`, {
      details: { runId, slot: slotKey, field: problem.field }
    })

  const closedBefore = (runId: string, slotKey: string) =>
    OrchestrationFailure.slotClosed(`slot "${slotKey}" of run ${runId} closed before this response`, {
      details: { runId, slot: slotKey }
    })

  const service: RunsService = {
    start: Effect.fn("Runs.start")(function* (definition, payload, startOptions) {
      const entry = byName.get(definition.name)
      if (entry === undefined || entry.definition !== definition) {
        return yield* ConfigurationFailure.invalidRequest(
          `run definition "${definition.name}" is not registered with this Runs layer`
        )
      }
      const input = yield* Schema.encode(definition.payload)(payload).pipe(
        Effect.mapError((error) =>
          ConfigurationFailure.invalidRequest(`the payload of "${definition.name}" is invalid: ${describeParse(error)}`)
        )
      )
      const id = startOptions?.id ?? globalThis.crypto.randomUUID()
      if (id.length === 0) return yield* ConfigurationFailure.invalidRequest("a run id cannot be empty")
      const inserted = yield* store.insertRun({
        id,
        definition: definition.name,
        payload: input,
        owner,
        principal: startOptions?.owner,
        at: yield* now
      })
      if (inserted) {
        yield* changed(id)
        yield* engine.execute(entry.workflow, { executionId: id, payload: {}, discard: true })
      }
      return id
    }),

    poll,

    await: Effect.fn("Runs.await")(function* (runId, awaitOptions) {
      yield* findRun(runId)
      return yield* waitUntil(
        runId,
        Effect.map(poll(runId), (info) =>
          terminalStatuses.has(info.status) || (awaitOptions?.untilSuspended === true && info.status === "suspended")
            ? Option.some(info)
            : Option.none())
      )
    }),

    resume: Effect.fn("Runs.resume")(function* (runId) {
      const { row, workflow } = yield* findRun(runId)
      if (terminalStatuses.has(row.status)) return
      yield* engine.execute(workflow, { executionId: runId, payload: {}, discard: true })
      yield* engine.resume(workflow, runId)
    }),

    cancel: Effect.fn("Runs.cancel")(function* (runId) {
      const { row, workflow } = yield* findRun(runId)
      if (terminalStatuses.has(row.status)) return
      cancelled.add(runId)
      const failure = Cancellation.signal(`run ${runId} was cancelled`, { runId })
      yield* store.finish(runId, { status: "cancelled", error: encodeFailure(failure) }, yield* now)
      runtime.secrets.delete(runId)
      yield* changed(runId)
      for (const slot of yield* store.openSlotsOf(runId)) yield* close(runId, slot.key, "cancelled")
      yield* engine.interrupt(workflow, runId)
    }),

    respond: Effect.fn("Runs.respond")(function* (runId, slotKey, answerer, answer) {
      const { at, definition, slot } = yield* openSlot(runId, slotKey, answerer)
      const shape = (definition.answers ?? []).find((candidate) => candidate.name === slot.shape)
      if (shape === undefined) {
        return yield* ConfigurationFailure.invalidRequest(
          `slot "${slotKey}" of run ${runId} takes the answer shape "${slot.shape}", which "${definition.name}" no longer lists`
        )
      }
      const decoded = yield* Schema.decodeUnknown(shape.schema)(answer).pipe(
        Effect.mapError((error) =>
          refused(runId, slotKey, {
            field: "answer",
            message: `does not match the shape "${shape.name}" of slot "${slotKey}": ${describeParse(error)}`
          })
        )
      )
      const problem = shape.check?.(decoded, {
        terms: parseJson(slot.terms),
        at,
        deadline: slot.deadline,
        latest: slot.latest ?? undefined
      })
      if (problem !== undefined) return yield* refused(runId, slotKey, { ...problem, field: `answer.${problem.field}` })
      const encoded = yield* Effect.orDie(Schema.encode(shape.schema)(decoded))
      const won = yield* close(runId, slotKey, "answered", { value: encoded, at })
      if (!won) return yield* closedBefore(runId, slotKey)
      return "Accepted" as const
    }),

    accept: Effect.fn("Runs.accept")(function* (runId, slotKey, answerer, etaSeconds) {
      if (!(Number.isFinite(etaSeconds) && etaSeconds >= 0 && etaSeconds <= 366 * 24 * 3600)) {
        return yield* refused(runId, slotKey, {
          field: "etaSeconds",
          message: `an accept's etaSeconds must be a number of seconds from 0 to a year, got ${etaSeconds}`
        })
      }
      const { at, slot } = yield* openSlot(runId, slotKey, answerer)
      const tooMany = refused(runId, slotKey, {
        field: "kind",
        message: `slot "${slotKey}" of run ${runId} was accepted ${maxAcceptsPerSlot} times, the most it takes: submit or decline`
      })
      if (slot.accepts >= maxAcceptsPerSlot) return yield* tooMany
      const until = at + Math.round(etaSeconds * 1000)
      if (slot.latest !== null && until > slot.latest) {
        return yield* refused(runId, slotKey, {
          field: "etaSeconds",
          message: `an accept of slot "${slotKey}" may move its deadline to ${new Date(slot.latest).toISOString()} at the latest; ` +
            `now + ${etaSeconds} s is later`
        })
      }
      const deadline = yield* store.extendSlot(runId, slotKey, until, maxAcceptsPerSlot)
      if (deadline === undefined) {
        const after = yield* store.getSlot(runId, slotKey)
        return yield* (after?.status === "open" ? tooMany : closedBefore(runId, slotKey))
      }
      yield* store.record(runId, "DO", `${slotKey}/accepted/${deadline}`, at, { slot: "accepted", etaSeconds, deadline })
      yield* appended(runId)
      return "Accepted" as const
    }),

    decline: Effect.fn("Runs.decline")(function* (runId, slotKey, answerer, reason) {
      if (!DeclineReason.literals.includes(reason)) {
        return yield* ConfigurationFailure.invalidRequest(
          `a decline's reason is one of ${DeclineReason.literals.join(", ")}, got ${String(reason)}`
        )
      }
      yield* openSlot(runId, slotKey, answerer)
      const won = yield* close(runId, slotKey, "declined", { reason })
      if (!won) return yield* closedBefore(runId, slotKey)
      return "Declined" as const
    }),

    events: (runId) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          yield* rowOf(runId)
          const subscription = yield* PubSub.subscribe(changes)
          const last = yield* Ref.make(0)
          const ended = yield* Ref.make(false)
          const pull: Effect.Effect<Chunk.Chunk<ThreadRecord>, Option.Option<RunsError>> = Effect.gen(function* () {
            if (yield* Ref.get(ended)) return yield* Effect.fail(Option.none())
            while (true) {
              const rows = yield* store.records(runId, yield* Ref.get(last)).pipe(Effect.mapError(Option.some))
              if (rows.length > 0) {
                yield* Ref.set(last, rows[rows.length - 1]!.seq)
                if (rows.some(endsThread)) yield* Ref.set(ended, true)
                return Chunk.fromIterable(rows.map(recordOf))
              }
              while ((yield* Queue.take(subscription)).runId !== runId) {
                // another run changed
              }
            }
          })
          return Stream.repeatEffectChunkOption(pull)
        })
      ),

    list: Effect.fn("Runs.list")(function* (listOptions) {
      const limit = listOptions?.limit ?? 100
      if (!(Number.isInteger(limit) && limit >= 1)) {
        return yield* ConfigurationFailure.invalidRequest(`a list limit must be a whole number >= 1, got ${limit}`)
      }
      const status = listOptions?.status
      // running and stale share the stored status: the limit applies after telling them apart
      const split = status === "running" || status === "stale"
      const rows = yield* store.list(status, split ? Number.MAX_SAFE_INTEGER : limit, listOptions?.owner)
      const isLive = yield* liveness
      const infos = rows.map((row) => infoOf(row, isLive))
      return status === undefined ? infos : infos.filter((info) => info.status === status).slice(0, limit)
    }),

    exportThread: Effect.fn("Runs.exportThread")(function* (runId) {
      const row = yield* rowOf(runId)
      const records = yield* store.records(runId, 0)
      const slots = yield* store.slotsOf(runId)
      return new Thread({
        runId,
        definition: row.definition,
        ...(row.principal === null ? {} : { owner: row.principal }),
        payload: parseJson(row.payload),
        records: records.map(recordOf),
        slots: slots.map((slot) =>
          new ThreadSlot({
            key: slot.key,
            shape: slot.shape,
            status: slot.status,
            deadline: slot.deadline,
            ...(slot.answer === null ? {} : { answer: parseJson(slot.answer) }),
            ...(slot.closed_at === null ? {} : { closedAt: slot.closed_at }),
            ...(slot.responder === null ? {} : { responder: slot.responder }),
            ...(slot.terms === null ? {} : { terms: parseJson(slot.terms) }),
            ...(slot.latest === null ? {} : { latest: slot.latest }),
            accepts: slot.accepts
          })
        )
      })
    }),

    importThread: Effect.fn("Runs.importThread")(function* (thread) {
      const entry = byName.get(thread.definition)
      if (entry === undefined) {
        return yield* ConfigurationFailure.invalidRequest(
          `the thread of run ${thread.runId} is of definition "${thread.definition}", which this Runs layer does not have (${describeDefinitions(byName)})`,
          { details: { definition: thread.definition } }
        )
      }
      const inserted = yield* store.importRun({
        id: thread.runId,
        definition: thread.definition,
        payload: thread.payload,
        owner,
        principal: thread.owner,
        at: yield* now,
        records: thread.records
          .filter((r) => r.kind !== "KNOW" && r.kind !== "STATE")
          .map((r) => ({ kind: r.kind, key: r.key, at: r.at.epochMillis, body: r.body })),
        slots: thread.slots.map((slot) => ({
          key: slot.key,
          shape: slot.shape,
          status: slot.status,
          deadline: slot.deadline,
          answer: slot.answer,
          closedAt: slot.closedAt,
          responder: slot.responder,
          terms: slot.terms,
          latest: slot.latest,
          accepts: slot.accepts
        }))
      })
      if (!inserted) return yield* ConfigurationFailure.invalidRequest(`a run with the id "${thread.runId}" exists already`)
      yield* changed(thread.runId)
      yield* engine.execute(entry.workflow, { executionId: thread.runId, payload: {}, discard: true })
      for (const slot of yield* store.undelivered) if (slot.run_id === thread.runId) yield* deliver(slot)
      for (const slot of yield* store.openSlotsOf(thread.runId)) yield* arm(slot.run_id, slot.key, slot.deadline)
      return thread.runId
    }),

    prune: Effect.fn("Runs.prune")(function* (pruneOptions) {
      const before = (yield* now) - Duration.toMillis(Duration.decode(pruneOptions.olderThan))
      const gone = yield* store.prune(before)
      if (options.purge !== undefined) {
        for (const run of gone) yield* options.purge(workflowName(run.definition), run.id)
      }
      if (gone.length > 0 && options.compact !== undefined) yield* options.compact
      return gone.length
    })
  }
  return service
}
