/**
 * The orchestrated durable run of the orchestrator crash test (issue #15): an
 * analyzer (a scripted engine) writes a TaskList of five tasks in three phases,
 * and the Orchestrator runs it with a barrier between phases. The "compute"
 * processor reports each invocation to a Probe (where the crash child counts
 * them and pauses so that its parent can SIGKILL it inside a task); its output is
 * a function of the task and its dependencies' outputs, so the result says
 * whether every task saw the right inputs.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Failure } from "../../src/domain/Failure.js"
import { OrchestratorResult, Task, TaskList, toJson } from "../../src/domain/Task.js"
import * as ScriptedEngine from "../../src/layers/ScriptedEngine.js"
import * as Orchestrator from "../../src/programs/Orchestrator.js"
import * as TaskProcessor from "../../src/programs/orchestrator/TaskProcessor.js"
import type { Constraint } from "../../src/services/Constraint.js"
import type { Engine } from "../../src/services/Engine.js"
import * as Runs from "../../src/services/Runs.js"

export interface TaskProbeService {
  /** One invocation of the processor for `task`: reports it; may pause there for good (the crash child). */
  readonly invoked: (task: string) => Effect.Effect<void>
}

export class TaskProbe extends Context.Tag("test/TaskProbe")<TaskProbe, TaskProbeService>() {}

const task = (id: string, dependencies: ReadonlyArray<string>, seed: string) =>
  new Task({ id, type: "compute", processor: "compute", priority: 0, dependencies, description: `compute ${id}`, metadata: { seed } })

/** Phase 1: a1, a2. Phase 2: b1 (a1, a2), b2 (a1). Phase 3: c1 (b1, b2). */
export const threePhases = new TaskList({
  analysis: "two sources, two combinations, one total",
  tasks: [
    task("a1", [], "3"),
    task("a2", [], "5"),
    task("b1", ["a1", "a2"], "7"),
    task("b2", ["a1"], "11"),
    task("c1", ["b1", "b2"], "13")
  ]
})

/** What the analyzer replies. */
export const analyzerReply = ScriptedEngine.reply(toJson(threePhases))

const compute = TaskProcessor.make((t, { dependencies }) =>
  Effect.gen(function* () {
    const probe = yield* TaskProbe
    yield* probe.invoked(t.id)
    const inputs = Object.keys(dependencies).sort().map((id) => (dependencies[id] as { value: number }).value)
    const value = inputs.reduce((acc, v) => (acc * 31 + v) % 1_000_003, Number(t.metadata.seed))
    return { task: t.id, value, inputs }
  })
)

/** The orchestrated run: analysis, then three phases with a barrier between them. */
export const Orchestrated = Runs.define({
  name: "orchestrated",
  payload: Schema.Struct({ request: Schema.String }),
  success: OrchestratorResult,
  program: ({ request }): Effect.Effect<OrchestratorResult, Failure, TaskProbe | Engine | Constraint> =>
    Effect.gen(function* () {
      const orchestrator = yield* Orchestrator.make({
        processors: { compute },
        scheduling: "phases",
        maxConcurrent: 4,
        retry: { maxAttempts: 1, backoffMultiplier: 1 }
      })
      return yield* orchestrator.process(request)
    })
})

/** A result without its clock times (they differ between any two runs). */
export const timeless = (result: unknown): unknown => {
  const { metadata, ...rest } = result as { metadata: Record<string, unknown> } & Record<string, unknown>
  const { durationMs: _, ...meta } = metadata
  return {
    ...rest,
    metadata: meta,
    completed: (rest.completed as ReadonlyArray<Record<string, unknown>>).map(({ finishedAt: _f, startedAt: _s, ...t }) => t)
  }
}
