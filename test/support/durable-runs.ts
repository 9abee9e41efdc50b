/**
 * Run definitions for the durable-run tests (in-process and in the crash child):
 * a 6-step reference run whose steps report to a Probe, and an approval run with
 * a human slot. The Probe is where a test counts step executions and where the
 * crash child pauses so that its parent can SIGKILL it at a known point.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { Durable, answerShape, type Slot } from "../../src/services/Durable.js"
import * as Runs from "../../src/services/Runs.js"

export interface ProbeService {
  /** A step's work: reports its start and end, returns `value`. */
  readonly work: (step: string, value: number) => Effect.Effect<number>
  /** Between steps (not journaled: runs on every replay). */
  readonly between: (index: number) => Effect.Effect<void>
  /** Hands a slot's secret to whoever answers it. */
  readonly notify: (slot: Slot) => Effect.Effect<void>
}

export class Probe extends Context.Tag("test/Probe")<Probe, ProbeService>() {}

const Total = Schema.Struct({ total: Schema.Number, trail: Schema.Array(Schema.String) })

/** Six journaled steps, each a function of the one before. */
export const Reference = Runs.define({
  name: "reference",
  payload: Schema.Struct({ seed: Schema.Number }),
  success: Total,
  program: ({ seed }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const probe = yield* Probe
      let total = seed
      const trail: Array<string> = []
      for (let i = 1; i <= 6; i++) {
        total = yield* durable.step(`step-${i}`, Schema.Number, probe.work(`step-${i}`, (total * 7 + i) % 1_000_003))
        trail.push(`step-${i}:${total}`)
        yield* probe.between(i)
      }
      return { total, trail }
    })
})

export const Review = answerShape("review", Schema.Struct({ approved: Schema.Boolean, note: Schema.String }))

/** Prepare, ask a human (SLA from the payload), finish with the answer or the expiry. */
export const Approval = Runs.define({
  name: "approval",
  payload: Schema.Struct({ slaMillis: Schema.Number }),
  success: Schema.Struct({ outcome: Schema.String, note: Schema.String, deadline: Schema.Number }),
  answers: [Review],
  program: ({ slaMillis }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const probe = yield* Probe
      yield* durable.step("prepare", Schema.Number, probe.work("prepare", 1))
      const slot = yield* durable.slot(Review, { sla: slaMillis })
      yield* durable.step("notify", Schema.Void, probe.notify(slot))
      const answer = yield* durable.awaitAnswer(Review, slot)
      const outcome = answer._tag === "Answered"
        ? (answer.value.approved ? "approved" : "rejected")
        : answer._tag === "Declined"
        ? `declined:${answer.reason}`
        : "expired"
      const note = answer._tag === "Answered" ? answer.value.note : ""
      yield* durable.step("finish", Schema.Number, probe.work("finish", 2))
      return { outcome, note, deadline: slot.deadline.epochMillis }
    })
})

export const secretOf = (slot: Slot): string => Redacted.value(slot.secret)

/** One at-most-once step (a charge): after a crash inside it, its outcome is unknown, never a second charge. */
export const Charge = Runs.define({
  name: "charge",
  payload: Schema.Struct({}),
  success: Schema.Struct({ charged: Schema.String, message: Schema.String }),
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const probe = yield* Probe
      return yield* durable.step("charge", Schema.Number, probe.work("charge", 1), { once: true }).pipe(
        Effect.as({ charged: "yes", message: "" }),
        Effect.catchIf(
          (failure) => failure.code === "TOOL_EXECUTION_FAILED",
          (failure) => Effect.succeed({ charged: "unknown", message: failure.message })
        )
      )
    })
})
