import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import { Approval, Probe, Reference, Review, secretOf } from "./support/durable-runs.js"
import type { Slot } from "../src/services/Durable.js"

const probe = Effect.gen(function* () {
  const log = yield* Ref.make<ReadonlyArray<string>>([])
  const slots = yield* Ref.make<ReadonlyArray<Slot>>([])
  const layer = Layer.succeed(Probe, {
    work: (step, value) => Effect.as(Ref.update(log, (l) => [...l, step]), value),
    between: () => Effect.void,
    notify: (slot) => Ref.update(slots, (s) => [...s, slot])
  })
  return { log, slots, layer }
})

const Twice = Runs.define({
  name: "twice",
  payload: Schema.Struct({}),
  success: Schema.Number,
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const a = yield* durable.step("same", Schema.Number, Effect.succeed(1))
      const b = yield* durable.step("same", Schema.Number, Effect.succeed(2))
      return a + b
    })
})

const withRuns = <A, E>(
  body: (ctx: Effect.Effect.Success<typeof probe>) => Effect.Effect<A, E, Runs.Runs>
) =>
  Effect.gen(function* () {
    const ctx = yield* probe
    return yield* body(ctx).pipe(
      Effect.provide(InMemoryRuns.layer({ definitions: [Reference, Approval, Twice] }).pipe(Layer.provide(ctx.layer)))
    )
  })

describe("Durable runs in memory", () => {
  it.live("a 6-step run completes once, each step once, its thread INTEND, six DO and KNOW", () =>
    withRuns(({ log }) =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const id = yield* runs.start(Reference, { seed: 5 }, { id: "ref-1" })
        const info = yield* runs.await(id)
        expect(info.status).toBe("completed")
        expect((info.result as { trail: ReadonlyArray<string> }).trail).toHaveLength(6)
        expect(yield* Ref.get(log)).toEqual(["step-1", "step-2", "step-3", "step-4", "step-5", "step-6"])
        const records = Chunk.toReadonlyArray(yield* Stream.runCollect(runs.events(id)))
        expect(records.map((r) => `${r.kind} ${r.key}`)).toEqual([
          "INTEND payload",
          "DO step-1",
          "DO step-2",
          "DO step-3",
          "DO step-4",
          "DO step-5",
          "DO step-6",
          "KNOW result"
        ])
        // starting the same id again returns it and runs nothing
        expect(yield* runs.start(Reference, { seed: 5 }, { id: "ref-1" })).toBe("ref-1")
        expect(yield* Ref.get(log)).toHaveLength(6)
      })
    ).pipe(Effect.timeout("20 seconds")))

  it.live("a step key used twice in one run fails the run with a defect naming both call sites", () =>
    withRuns(() =>
      Effect.gen(function* () {
        const runs = yield* Runs.Runs
        const info = yield* runs.await(yield* runs.start(Twice, {}))
        expect(info.status).toBe("failed")
        expect(info.error?.code).toBe("ORCHESTRATION_DEFECT")
        expect(info.error?.message).toMatch(/"same" is used twice .*first at .*Durable\.test\.ts:\d+.*again at .*Durable\.test\.ts:\d+/)
      })
    ).pipe(Effect.timeout("20 seconds")))
})
