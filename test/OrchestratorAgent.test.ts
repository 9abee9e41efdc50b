import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type * as Event from "../src/domain/Event.js"
import { ToolFailure } from "../src/domain/Failure.js"
import { Task, TaskList } from "../src/domain/Task.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Orchestrator from "../src/programs/Orchestrator.js"
import * as Agent from "../src/programs/orchestrator/Agent.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"
import { EventLog } from "../src/services/EventLog.js"

/** An interceptor that logs around the call. */
const tracing = (log: Ref.Ref<ReadonlyArray<string>>, name: string): Agent.Interceptor => (next) => (input) =>
  Effect.gen(function* () {
    yield* Ref.update(log, (l) => [...l, `${name} in`])
    const output = yield* next(input)
    yield* Ref.update(log, (l) => [...l, `${name} out`])
    return output
  })

const echo = (log?: Ref.Ref<ReadonlyArray<string>>) =>
  Agent.make({
    id: "echo-1",
    type: "echo",
    execute: (input) =>
      Effect.as(log === undefined ? Effect.void : Ref.update(log, (l) => [...l, "execute"]), { echoed: input })
  })

/** A call that never ends (a broken timeout waits on the TestClock forever) fails the test here. */
const bound = 20_000

describe("Agent", { timeout: bound }, () => {
  it.effect("interceptors wrap execute; the first one is the outermost", () =>
    Effect.gen(function* () {
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      const agent = Agent.withInterceptors(yield* echo(log), tracing(log, "A"), tracing(log, "B"))
      expect(yield* agent.execute({ x: 1 })).toEqual({ echoed: { x: 1 } })
      expect(yield* Ref.get(log)).toEqual(["A in", "B in", "execute", "B out", "A out"])
    }))

  it.effect("timeout: past the duration the call is interrupted and fails with CANCELLED_TIMEOUT", () =>
    Effect.gen(function* () {
      const slow = yield* Agent.make({ id: "slow", type: "t", execute: () => Effect.as(Effect.sleep("5 seconds"), {}) })
      const fiber = yield* Effect.fork(Effect.flip(Agent.withInterceptors(slow, Agent.timeout("1 second")).execute({})))
      yield* TestClock.adjust("1 second")
      const error = yield* Fiber.join(fiber)
      expect(error.code).toBe("CANCELLED_TIMEOUT")
      expect(error.message).toContain(`agent "slow"`)
    }))

  it.effect("retry: retryable failures re-run on the schedule, a non-retryable one runs once", () =>
    Effect.gen(function* () {
      const calls = yield* Ref.make(0)
      const flaky = (retryable: boolean) =>
        Agent.make({
          id: "flaky",
          type: "t",
          execute: () =>
            Effect.flatMap(Ref.updateAndGet(calls, (n) => n + 1), (n) =>
              n < 3 ? Effect.fail(ToolFailure.executionFailed("x", `call ${n}`, { retryable })) : Effect.succeed({ n }))
        })
      const retried = Agent.withInterceptors(yield* flaky(true), Agent.retry(Schedule.recurs(5)))
      expect(yield* retried.execute({})).toEqual({ n: 3 })
      yield* Ref.set(calls, 0)
      const once = Agent.withInterceptors(yield* flaky(false), Agent.retry(Schedule.recurs(5)))
      expect((yield* Effect.flip(once.execute({}))).message).toBe("call 1")
      expect(yield* Ref.get(calls)).toBe(1)
    }))

  it.effect("validate: a bad input is a step mismatch and the agent never runs; a bad output is a retryable schema failure", () =>
    Effect.gen(function* () {
      const log = yield* Ref.make<ReadonlyArray<string>>([])
      const checked = Agent.withInterceptors(
        yield* echo(log),
        Agent.validate({
          input: Schema.Struct({ x: Schema.Number }),
          output: Schema.Struct({ echoed: Schema.Struct({ x: Schema.Number }), extra: Schema.String })
        })
      )
      const badInput = yield* Effect.flip(checked.execute({ x: "one" }))
      expect(badInput.code).toBe("ORCHESTRATION_STEP_MISMATCH")
      expect(badInput.message).toContain("x")
      expect(yield* Ref.get(log)).toEqual([])
      const badOutput = yield* Effect.flip(checked.execute({ x: 1 }))
      expect(badOutput.code).toBe("CONSTRAINT_SCHEMA_INVALID")
      expect(badOutput.retryable).toBe(true)
      expect(badOutput._tag === "ConstraintFailure" && badOutput.violations).toEqual(["$.extra: is missing"])
    }))

  it.effect("events: agent.execute.start and .end, with the failure's code on failure", () =>
    Effect.gen(function* () {
      const ok = Agent.withInterceptors(yield* echo(), Agent.events)
      yield* ok.execute({ q: "hi" })
      const failing = Agent.withInterceptors(
        yield* Agent.make({ id: "bad", type: "t", execute: () => Effect.fail(ToolFailure.notFound("x", "no tool")) }),
        Agent.events
      )
      yield* Effect.flip(failing.execute({}))
      const events = (yield* (yield* EventLog).events).filter((e): e is Event.Custom => e._tag === "Custom")
      expect(events.map((e) => [e.action, e.data.agent, e.data.success ?? null, e.data.code ?? null])).toEqual([
        ["agent.execute.start", "echo-1", null, null],
        ["agent.execute.end", "echo-1", true, null],
        ["agent.execute.start", "bad", null, null],
        ["agent.execute.end", "bad", false, "TOOL_NOT_FOUND"]
      ])
    }).pipe(Effect.provide(Observe.eventLogMemory)))

  it.effect("memory: store, retrieve, list, delete, clear", () =>
    Effect.gen(function* () {
      const agent = yield* echo()
      yield* agent.memory.store("a", 1)
      yield* agent.memory.store("b", { x: 2 })
      expect(yield* agent.memory.retrieve("a")).toEqual(Option.some(1))
      expect(yield* agent.memory.list).toEqual(["a", "b"])
      yield* agent.memory.delete("a")
      expect(yield* agent.memory.retrieve("a")).toEqual(Option.none())
      yield* agent.memory.clear
      expect(yield* agent.memory.list).toEqual([])
    }))

  it.effect("TaskProcessor.fromAgent: the orchestrator hands the agent the task and its dependencies", () =>
    Effect.gen(function* () {
      const seen = yield* Ref.make<ReadonlyArray<Agent.AgentInput>>([])
      const agent = yield* Agent.make({
        id: "writer",
        type: "llm",
        execute: (input) => Effect.as(Ref.update(seen, (s) => [...s, input]), { text: `done: ${String(input.task)}` })
      })
      const orchestrator = yield* Orchestrator.make({ processors: { writer: TaskProcessor.fromAgent(agent) } })
      const result = yield* orchestrator.execute(
        new TaskList({
          analysis: "",
          tasks: [
            new Task({ id: "draft", type: "write", processor: "writer", description: "Draft it", metadata: { tone: "dry" } }),
            new Task({ id: "edit", type: "write", processor: "writer", description: "Edit it", dependencies: ["draft"] })
          ]
        }),
        { user: "u" }
      )
      expect(result.completed.map((r) => r.output)).toEqual([{ text: "done: Draft it" }, { text: "done: Edit it" }])
      expect((yield* Ref.get(seen))[1]).toEqual({
        task: "Edit it",
        id: "edit",
        type: "write",
        metadata: {},
        dependencies: { draft: { text: "done: Draft it" } },
        context: { user: "u" }
      })
    }))
})
