/**
 * Closing human slots. A slot closes once: answered (through `respond`), expired
 * (its SLA timer, armed from the absolute deadline in the store, again after a
 * restart) or cancelled (with its run). The store's conditional UPDATE decides who
 * was first; only the winner records DO and completes the slot's deferred, and
 * then resumes the run until it moves (a resume can be lost in a race with the
 * run's suspension being stored).
 */
import type { DeclineReason } from "../../services/Durable.js"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberMap from "effect/FiberMap"
import { OrchestrationFailure } from "../../domain/Failure.js"
import type { SlotRow } from "./Tables.js"
import type { RunWorkflow, SlotClosed } from "./Encoding.js"
import { parseJson, slotDeferred } from "./Encoding.js"
import type { Runtime } from "./Runtime.js"

export interface Slots {
  /** Hands a closed slot to its run (idempotent). */
  readonly deliver: (slot: SlotRow) => Effect.Effect<void, OrchestrationFailure>
  /** Closes an open slot; false when another writer closed it first. */
  readonly close: (
    runId: string,
    key: string,
    status: "answered" | "declined" | "expired" | "cancelled",
    answer?: unknown
  ) => Effect.Effect<boolean, OrchestrationFailure>
  /** Arms the SLA timer of a slot (once per slot and process). */
  readonly arm: (runId: string, key: string, deadline: number) => Effect.Effect<void>
}

export const make = (runtime: Runtime): Slots => {
  const { appended, byName, engine, now, scope, store, timers } = runtime

  /** Resumes a run waiting on `key` until it moves (a resume can be lost in a race with its suspension). */
  const kick = (runId: string, key: string, workflow: RunWorkflow) =>
    Effect.gen(function* () {
      for (let i = 0; i < 20; i++) {
        yield* Effect.sleep(i === 0 ? "50 millis" : "250 millis")
        const row = yield* store.getRun(runId)
        if (row === undefined || row.status !== "suspended" || row.waiting_on !== key) return
        yield* engine.resume(workflow, runId)
      }
    }).pipe(Effect.ignore, Effect.forkIn(scope), Effect.asVoid)

  /** Hands a closed slot to its run's deferred (idempotent), then makes sure the run resumes. */
  const deliver = (slot: SlotRow) =>
    Effect.gen(function* () {
      const run = yield* store.getRun(slot.run_id)
      const entry = run === undefined ? undefined : byName.get(run.definition)
      if (entry === undefined) return
      const closed: SlotClosed = slot.status === "answered"
        ? { _tag: "Answered", value: (parseJson(slot.answer) as { value: unknown }).value, at: slot.closed_at ?? 0 }
        : slot.status === "declined"
        ? { _tag: "Declined", reason: (parseJson(slot.answer) as { reason: DeclineReason }).reason, at: slot.closed_at ?? 0 }
        : slot.status === "expired"
        ? { _tag: "Expired", deadline: slot.deadline }
        : { _tag: "Cancelled" }
      yield* engine.deferredDone(slotDeferred(slot.key), {
        workflowName: entry.workflow.name,
        executionId: slot.run_id,
        deferredName: `slot/${slot.key}`,
        exit: Exit.succeed(closed)
      })
      yield* store.markDelivered(slot.run_id, slot.key)
      yield* kick(slot.run_id, slot.key, entry.workflow)
    })

  /** Closes an open slot; false when another writer closed it first. The winner records DO and delivers. */
  const close = (runId: string, key: string, status: "answered" | "declined" | "expired" | "cancelled", answer?: unknown) =>
    Effect.gen(function* () {
      const at = yield* now
      const won = yield* store.closeSlot(runId, key, status, answer, at)
      if (!won) return false
      yield* store.record(runId, "DO", key, at, { slot: status, ...(answer === undefined ? {} : { answer }) })
      yield* appended(runId)
      const slot = yield* store.getSlot(runId, key)
      if (slot !== undefined) yield* deliver(slot)
      return true
    })

  /**
   * The SLA timer of a slot: closes it as expired at its absolute deadline (at
   * once if past). Woken, it reads the deadline again: an `accept` may have moved it.
   */
  const arm = (runId: string, key: string, deadline: number) =>
    FiberMap.run(
      timers,
      `${runId}\u0000${key}`,
      Effect.gen(function* () {
        let until = deadline
        while (true) {
          const wait = until - (yield* now)
          if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
          const slot = yield* store.getSlot(runId, key)
          if (slot === undefined || slot.status !== "open") return
          if (slot.deadline <= (yield* now)) {
            yield* close(runId, key, "expired")
            return
          }
          until = slot.deadline
        }
      }).pipe(
        Effect.catchAll((error) => Effect.logWarning(`the SLA timer of slot ${key} of run ${runId} failed: ${error.message}`))
      ),
      { onlyIfMissing: true }
    ).pipe(Effect.asVoid)

  return { deliver, close, arm }
}
