/**
 * PlanCreator: how a task list becomes phases.
 *
 * A phase is a group of tasks that may run together: every dependency of a task
 * lies in an earlier phase. The DependencyPlanCreator builds the dependency
 * graph, rejects it when it is not a DAG over the list, then repeatedly takes the
 * ready set (the tasks whose dependencies are all placed), sorts it by
 * (priority, id) and cuts it into phases of at most `maxTasksPerPhase` tasks. The
 * order is total, so the phases depend only on the set of tasks: any permutation
 * of the input gives the same phases.
 *
 * Three rejections, all before anything runs, each an ORCHESTRATION_STEP_MISMATCH
 * with its own `details.rule` and message: `duplicateTask` (two tasks share an
 * id), `unknownDependency` (a task depends on an id not in the list) and `cycle`
 * (with the cycle's path in execution order, `a -> b -> a`).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import type { Task } from "../../domain/Task.js"

/** Task groups in execution order. */
export type Phases = ReadonlyArray<ReadonlyArray<Task>>

/** Organizes tasks into execution phases. */
export interface PlanCreator {
  readonly createPlan: (
    tasks: ReadonlyArray<Task>
  ) => Effect.Effect<Phases, OrchestrationFailure | ConfigurationFailure>
}

export const defaultMaxTasksPerPhase = 10

export interface DependencyOptions {
  /** A positive integer. Default 10. */
  readonly maxTasksPerPhase?: number | undefined
}

/** The dependency plan creator (see the module header). */
export const dependency = (options: DependencyOptions = {}): PlanCreator => {
  const max = options.maxTasksPerPhase ?? defaultMaxTasksPerPhase
  return {
    createPlan: (tasks) =>
      Number.isSafeInteger(max) && max > 0
        ? phasesOf(tasks, max)
        : Effect.fail(
          ConfigurationFailure.invalidRequest(`maxTasksPerPhase must be a positive integer, got ${String(max)}`, {
            details: { field: "maxTasksPerPhase", value: max }
          })
        )
  }
}

/** Orders by priority (lower first), then id (code-unit order, locale-free). */
export const byPriorityThenId = (a: Task, b: Task): number =>
  a.priority !== b.priority ? a.priority - b.priority : a.id < b.id ? -1 : a.id > b.id ? 1 : 0

/** The phases of `tasks` (see the module header), or why the graph is rejected. */
export const phasesOf = (
  tasks: ReadonlyArray<Task>,
  maxTasksPerPhase: number = defaultMaxTasksPerPhase
): Either.Either<Phases, OrchestrationFailure> =>
  Either.flatMap(checkGraph(tasks), (byId) => {
    const placed = new Set<string>()
    const phases: Array<ReadonlyArray<Task>> = []
    let remaining = [...byId.values()].sort(byPriorityThenId)
    while (remaining.length > 0) {
      const ready = remaining.filter((t) => t.dependencies.every((d) => placed.has(d)))
      // checkGraph rules this out; kept so that no input can make this loop spin
      if (ready.length === 0) {
        const stuck = remaining.map((t) => t.id)
        return Either.left(rejected("cycle", `the tasks ${stuck.join(", ")} wait on each other`, { cycle: stuck }))
      }
      for (let i = 0; i < ready.length; i += maxTasksPerPhase) phases.push(ready.slice(i, i + maxTasksPerPhase))
      for (const t of ready) placed.add(t.id)
      remaining = remaining.filter((t) => !placed.has(t.id))
    }
    return Either.right(phases)
  })

const rejected = (rule: string, message: string, details: Record<string, unknown>): OrchestrationFailure =>
  OrchestrationFailure.stepMismatch(message, { details: { rule, ...details } })

/**
 * Unique ids, known dependencies, no cycle; the tasks by id when the graph holds.
 * Every check looks at the tasks in id order, so the rejection reported does not
 * depend on the order of the input either.
 */
export const checkGraph = (tasks: ReadonlyArray<Task>): Either.Either<ReadonlyMap<string, Task>, OrchestrationFailure> => {
  const ordered = [...tasks].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  const byId = new Map<string, Task>()
  for (const task of ordered) {
    if (byId.has(task.id)) {
      const count = ordered.filter((t) => t.id === task.id).length
      return Either.left(
        rejected("duplicateTask", `${count} tasks have the id "${task.id}"; task ids must be unique`, {
          task: task.id,
          count
        })
      )
    }
    byId.set(task.id, task)
  }
  for (const task of ordered) {
    const unknown = [...task.dependencies].sort().find((d) => !byId.has(d))
    if (unknown !== undefined) {
      return Either.left(
        rejected("unknownDependency", `task "${task.id}" depends on "${unknown}", which is not in the task list`, {
          task: task.id,
          dependency: unknown
        })
      )
    }
  }
  const cycle = findCycle(ordered, byId)
  if (cycle !== undefined) {
    return Either.left(
      rejected("cycle", `the tasks have a dependency cycle: ${cycle.join(" -> ")}`, { cycle })
    )
  }
  return Either.right(byId)
}

/** A cycle in execution order (its first id repeated at the end), or undefined. */
const findCycle = (
  ordered: ReadonlyArray<Task>,
  byId: ReadonlyMap<string, Task>
): ReadonlyArray<string> | undefined => {
  // Depth-first along dependency edges, white/grey/black; meeting a grey task closes a cycle.
  const colour = new Map<string, 1 | 2>()
  const stack: Array<string> = []
  const visit = (task: Task): ReadonlyArray<string> | undefined => {
    colour.set(task.id, 1)
    stack.push(task.id)
    for (const dep of [...task.dependencies].sort()) {
      const c = colour.get(dep)
      if (c === 1) return [...stack.slice(stack.indexOf(dep)), dep]
      const next = byId.get(dep)
      if (c === undefined && next !== undefined) {
        const found = visit(next)
        if (found !== undefined) return found
      }
    }
    stack.pop()
    colour.set(task.id, 2)
    return undefined
  }
  for (const task of ordered) {
    if (!colour.has(task.id)) {
      const cycle = visit(task)
      // The walk follows "depends on", backwards in time: reverse it into execution order.
      if (cycle !== undefined) return [...cycle].reverse()
    }
  }
  return undefined
}
