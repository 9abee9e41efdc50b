/**
 * Nested queries (the seed's chain, examples/patterns.ts): classify, then
 * summarise only research documents. The child cites the parent's KNOW as
 * input.record_id and reads the parent's document through it; a trigger followed
 * again (as after a restart between the parent's KNOW and the child's start)
 * starts nothing new.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Orchestration from "../src/programs/Orchestration.js"
import * as Runs from "../src/services/Runs.js"
import { classify, documents, make, program, summariseResearch } from "../examples/patterns.js"

describe("nested queries", () => {
  it.live("the example chain: research is summarised through its KNOW, news is not", () =>
    Effect.gen(function* () {
      const setup = yield* make
      const outcomes = yield* program(documents, setup).pipe(Effect.provide(setup.layer))
      expect(outcomes).toEqual([
        { document: documents[0], category: "research", summary: "A two-year study of protein folding under heat stress." },
        { document: documents[1], category: "news" }
      ])
    }).pipe(Effect.timeout("30 seconds")))

  it.live("the child cites the parent's KNOW; following the trigger again starts nothing new", () =>
    Effect.gen(function* () {
      const setup = yield* make
      yield* Effect.gen(function* () {
        const runs = yield* Runs.Runs
        yield* program([], setup)
        const trigger = Either.getOrThrow(Orchestration.checkTrigger(summariseResearch))
        const parent = yield* Orchestration.start(runs, setup.queries, classify(documents[0]!), { id: "doc-1" })
        const first = yield* Orchestration.follow(runs, setup.queries, parent, [trigger])
        expect(first).toEqual([Orchestration.childId("doc-1", summariseResearch)])
        yield* runs.await(first[0]!)
        const again = yield* Orchestration.follow(runs, setup.queries, parent, [trigger])
        expect(again).toEqual(first)
        const all = yield* runs.list()
        expect(all.map((r) => r.id).sort()).toEqual(["doc-1", "doc-1/summary"])
        const child = yield* Orchestration.thread(runs, first[0]!)
        const intend = child.find((r) => r.kind === "INTEND")!
        expect(intend.body).toMatchObject({ input: { record_id: "doc-1/know" } })
        const know = child.find((r) => r.kind === "KNOW")!
        expect(know.body).toMatchObject({ kind: "core.summary.v1", summary: "A two-year study of protein folding under heat stress." })
      }).pipe(Effect.provide(setup.layer))
    }).pipe(Effect.timeout("30 seconds")))

  it("a trigger's condition is compiled once: a bad one names the trigger and the position", () => {
    const bad = Orchestration.checkTrigger({ ...summariseResearch, condition: "fold.answer.nope(" })
    expect(Either.isLeft(bad)).toBe(true)
    if (Either.isLeft(bad)) {
      expect(bad.left.code).toBe("CONFIG_INVALID_REQUEST")
      expect(bad.left.message).toContain("triggers.summary.condition")
    }
  })
})
