import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "fast-check"
import type { OrchestrationFailure } from "../src/domain/Failure.js"
import { Task } from "../src/domain/Task.js"
import * as PlanCreator from "../src/programs/orchestrator/PlanCreator.js"

const task = (id: string, dependencies: ReadonlyArray<string> = [], priority = 1) =>
  new Task({ id, type: "test", processor: "test", priority, dependencies })

const ids = (phases: PlanCreator.Phases) => phases.map((p) => p.map((t) => t.id))

const rejection = (either: Either.Either<PlanCreator.Phases, OrchestrationFailure>) => {
  if (Either.isRight(either)) throw new Error(`expected a rejection, got ${JSON.stringify(ids(either.right))}`)
  return either.left
}

describe("DependencyPlanCreator", () => {
  it.effect("the seed's example graph: task1, then task2 and task4, then task3 (max 2 per phase)", () =>
    Effect.gen(function* () {
      const creator = PlanCreator.dependency({ maxTasksPerPhase: 2 })
      const phases = yield* creator.createPlan([
        task("task1"),
        task("task2", ["task1"]),
        task("task3", ["task2"]),
        task("task4", ["task1"])
      ])
      expect(ids(phases)).toEqual([["task1"], ["task2", "task4"], ["task3"]])
    }))

  it.effect("a phase is ordered by priority (lower first), then id", () =>
    Effect.gen(function* () {
      const phases = yield* PlanCreator.dependency({ maxTasksPerPhase: 3 }).createPlan([
        task("task1", [], 3),
        task("task2", [], 1),
        task("task3", [], 2),
        task("a", [], 2)
      ])
      expect(ids(phases)).toEqual([["task2", "a", "task3"], ["task1"]])
    }))

  it.effect("a ready set larger than maxTasksPerPhase is cut into consecutive phases; the default is 10", () =>
    Effect.gen(function* () {
      const many = Array.from({ length: 12 }, (_, i) => task(`t${String(i).padStart(2, "0")}`))
      const phases = yield* PlanCreator.dependency().createPlan([...many, task("last", ["t00"])])
      expect(phases.map((p) => p.length)).toEqual([10, 2, 1])
      expect(ids(phases)[2]).toEqual(["last"])
    }))

  it.effect("no tasks, no phases", () =>
    Effect.gen(function* () {
      expect(yield* PlanCreator.dependency().createPlan([])).toEqual([])
    }))

  it("duplicate ids, unknown dependencies and cycles are three different rejections", () => {
    const duplicate = rejection(PlanCreator.phasesOf([task("a"), task("b"), task("a", ["b"])]))
    expect(duplicate.code).toBe("ORCHESTRATION_STEP_MISMATCH")
    expect(duplicate.details).toMatchObject({ rule: "duplicateTask", task: "a", count: 2 })
    expect(duplicate.message).toContain(`2 tasks have the id "a"`)

    const unknown = rejection(PlanCreator.phasesOf([task("a"), task("b", ["a", "ghost"])]))
    expect(unknown.details).toMatchObject({ rule: "unknownDependency", task: "b", dependency: "ghost" })
    expect(unknown.message).toContain(`task "b" depends on "ghost"`)

    const cycle = rejection(PlanCreator.phasesOf([task("root"), task("a", ["root", "c"]), task("b", ["a"]), task("c", ["b"])]))
    expect(cycle.details).toMatchObject({ rule: "cycle", cycle: ["a", "b", "c", "a"] })
    expect(cycle.message).toContain("a -> b -> c -> a")

    const self = rejection(PlanCreator.phasesOf([task("a", ["a"])]))
    expect(self.details).toMatchObject({ rule: "cycle", cycle: ["a", "a"] })
    expect([duplicate, unknown, cycle].every((f) => f.retryable === false)).toBe(true)
  })

  it.effect("maxTasksPerPhase that is not a positive integer is a typed configuration error", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(PlanCreator.dependency({ maxTasksPerPhase: 0 }).createPlan([task("a")]))
      expect(error.code).toBe("CONFIG_INVALID_REQUEST")
      expect(error.message).toContain("maxTasksPerPhase")
    }))

  // A random DAG: task k may depend on any task generated before it; ids are
  // drawn so that id order is unrelated to the generation order.
  const dag = fc
    .integer({ min: 1, max: 25 })
    .chain((n) =>
      fc.tuple(
        fc.uniqueArray(fc.array(fc.constantFrom("a", "b", "c", "x", "1", "2"), { minLength: 1, maxLength: 4 }).map((cs) => cs.join("")), {
          minLength: n,
          maxLength: n
        }),
        fc.array(fc.integer({ min: -1, max: 3 }), { minLength: n, maxLength: n }),
        fc.array(fc.array(fc.nat(), { maxLength: 3 }), { minLength: n, maxLength: n })
      )
    )
    .map(([names, priorities, picks]) =>
      names.map((id, k) =>
        task(
          id,
          k === 0 ? [] : [...new Set(picks[k]!.map((p) => names[p % k]!))],
          priorities[k]!
        )
      )
    )

  it("any permutation of the input gives the same phases, and the phases are a valid schedule", () => {
    fc.assert(
      fc.property(dag, fc.integer({ min: 1, max: 4 }), fc.func(fc.integer()), (tasks, max, key) => {
        const shuffled = tasks.map((t, i) => [key(i), i, t] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((e) => e[2])
        const original = Either.getOrThrow(PlanCreator.phasesOf(tasks, max))
        const permuted = Either.getOrThrow(PlanCreator.phasesOf(shuffled, max))
        expect(ids(permuted)).toEqual(ids(original))
        const phaseOf = new Map(original.flatMap((p, k) => p.map((t) => [t.id, k] as const)))
        expect(phaseOf.size).toBe(tasks.length)
        for (const [k, phase] of original.entries()) {
          expect(phase.length).toBeLessThanOrEqual(max)
          expect([...phase].sort(PlanCreator.byPriorityThenId)).toEqual(phase)
          for (const t of phase) for (const d of t.dependencies) expect(phaseOf.get(d)!).toBeLessThan(k)
        }
      }),
      { numRuns: 200 }
    )
  })
})
