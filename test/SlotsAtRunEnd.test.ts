/**
 * The close-at-run-end safety net of the durable runs (layers/durable/InRun): a
 * run that ends, completed or failed, while one of its human slots is still open
 * (its program neither awaited nor closed it) has that slot closed when it ends,
 * so a late answer is ORCHESTRATION_SLOT_CLOSED at once, not Accepted into a run
 * that will never read it, and not left open until its deadline. The patterns
 * close their own slots (quorum met, deadline); these programs do not, so only
 * the safety net can close them. The slots' SLA is an hour and the tests run on
 * the real clock: no deadline closes them.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { ToolFailure } from "../src/domain/Failure.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Review, secretOf } from "./support/durable-runs.js"

/** The secrets the runs handed out, by run id (the runs run in this process). */
const secrets = new Map<string, string>()

/** Opens a slot, hands its secret out, and ends without waiting for it or closing it: completed, or failed by `fail`. */
const Forgetful = Runs.define({
  name: "forgetful",
  payload: Schema.Struct({ fail: Schema.Boolean }),
  success: Schema.Struct({ slot: Schema.String }),
  answers: [Review],
  program: ({ fail }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const slot = yield* durable.slot(Review, { sla: "1 hour" })
      yield* durable.step("notify", Schema.Void, Effect.sync(() => void secrets.set(durable.runId, secretOf(slot))))
      if (fail) return yield* ToolFailure.executionFailed("forgetful", "the run failed after asking its human", { retryable: false })
      return { slot: slot.key }
    })
})

const withRuns = <A, E>(body: Effect.Effect<A, E, Runs.Runs>) =>
  body.pipe(Effect.provide(InMemoryRuns.layer({ definitions: [Forgetful] })), Effect.timeout("20 seconds"))

describe("durable runs: slots left open are closed when the run ends", () => {
  it.live("a run that completes with its slot open: the slot closes at the run's end, a late answer is SLOT_CLOSED", () =>
    withRuns(Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const id = yield* runs.start(Forgetful, { fail: false })
      const done = yield* runs.await(id)
      expect(done.status).toBe("completed")
      expect(done.result).toEqual({ slot: "review" })
      const late = yield* Effect.flip(runs.respond(id, "review", secrets.get(id)!, { approved: true, note: "late" }))
      expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
      // an accept or a decline cannot reopen it either
      expect((yield* Effect.flip(runs.accept(id, "review", secrets.get(id)!, 60))).code).toBe("ORCHESTRATION_SLOT_CLOSED")
      expect((yield* Effect.flip(runs.decline(id, "review", secrets.get(id)!, "other"))).code).toBe("ORCHESTRATION_SLOT_CLOSED")
      expect((yield* runs.poll(id)).status).toBe("completed")
    })))

  it.live("a run that fails with its slot open: the slot closes too", () =>
    withRuns(Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const id = yield* runs.start(Forgetful, { fail: true })
      const done = yield* runs.await(id)
      expect(done.status).toBe("failed")
      expect(done.error?.code).toBe("TOOL_EXECUTION_FAILED")
      const late = yield* Effect.flip(runs.respond(id, "review", secrets.get(id)!, { approved: true, note: "late" }))
      expect(late.code).toBe("ORCHESTRATION_SLOT_CLOSED")
    })))
})
