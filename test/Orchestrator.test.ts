import { describe, expect, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as TestClock from "effect/TestClock"
import type { Failure } from "../src/domain/Failure.js"
import { ToolFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Orchestrator from "../src/programs/Orchestrator.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"
import * as XmlTaskParser from "../src/programs/orchestrator/XmlTaskParser.js"
import { EventLog } from "../src/services/EventLog.js"

/** Tests that could wait forever on the TestClock (a retry that never fires) end here instead. */
const bound = 20_000

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

const task = (id: string, processor: string, fields: Partial<{ dependencies: ReadonlyArray<string>; priority: number; description: string; metadata: Record<string, string> }> = {}) =>
  new Task({ id, type: processor, processor, ...fields })

/** "positive" when the description praises, "negative" otherwise. */
const sentiment = TaskProcessor.make((t) =>
  Effect.succeed(/great|love|good/i.test(t.description) ? "positive" : "negative")
)

/** Counts the positive outputs of its dependencies, plus its metadata's `add`. */
const tally = TaskProcessor.make((t, { dependencies }) =>
  Effect.succeed(
    Object.values(dependencies).filter((o) => o === "positive").length + Number(t.metadata.add ?? "0")
  )
)

const reviewList = new TaskList({
  analysis: "two reviews to classify, then a count",
  tasks: [
    task("r1", "sentiment", { priority: 1, description: "Classify: great battery" }),
    task("r2", "sentiment", { priority: 1, description: "Classify: the screen cracked" }),
    task("count", "calculator", { priority: 2, dependencies: ["r1", "r2"], description: "Count the positive reviews", metadata: { add: "10" } })
  ]
})

const withModel = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), ConstraintLive.layer)

interface Probe {
  readonly starts: Ref.Ref<ReadonlyArray<readonly [string, number]>>
  readonly ends: Ref.Ref<ReadonlyArray<readonly [string, number]>>
  readonly running: Ref.Ref<number>
  readonly max: Ref.Ref<number>
  readonly interrupted: Ref.Ref<ReadonlyArray<string>>
}

const makeProbe = Effect.gen(function* () {
  return {
    starts: yield* Ref.make<ReadonlyArray<readonly [string, number]>>([]),
    ends: yield* Ref.make<ReadonlyArray<readonly [string, number]>>([]),
    running: yield* Ref.make(0),
    max: yield* Ref.make(0),
    interrupted: yield* Ref.make<ReadonlyArray<string>>([])
  } satisfies Probe
})

/** A processor that takes `metadata.seconds` of Clock time, counted while it runs; `metadata.fail` fails it (retryable when "retryable"). */
const timed = (probe: Probe) =>
  TaskProcessor.make((t, { attempt }) =>
    Effect.gen(function* () {
      const startedAt = yield* Clock.currentTimeMillis
      yield* Ref.update(probe.starts, (s) => [...s, [t.id, startedAt] as const])
      const now = yield* Ref.updateAndGet(probe.running, (n) => n + 1)
      yield* Ref.update(probe.max, (m) => Math.max(m, now))
      yield* Effect.sleep(`${Number(t.metadata.seconds ?? "1")} seconds`).pipe(
        Effect.onInterrupt(() => Ref.update(probe.interrupted, (i) => [...i, t.id])),
        Effect.ensuring(Ref.update(probe.running, (n) => n - 1))
      )
      const endedAt = yield* Clock.currentTimeMillis
      yield* Ref.update(probe.ends, (s) => [...s, [t.id, endedAt] as const])
      const failUntil = Number(t.metadata.failUntil ?? "0")
      if (t.metadata.fail !== undefined && (failUntil === 0 || attempt <= failUntil)) {
        return yield* Effect.fail<Failure>(
          ToolFailure.executionFailed(t.id, `${t.id} failed on attempt ${attempt}`, { retryable: t.metadata.fail === "retryable" })
        )
      }
      return `${t.id}#${attempt}`
    })
  )

/** Forks `effect`, advances the TestClock second by second, and joins it. */
const runFor = <A, E>(seconds: number, effect: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(effect)
    for (let i = 0; i < seconds; i++) yield* TestClock.adjust("1 second")
    // a run still waiting here is caught by the describe's real-time bound
    return yield* Fiber.join(fiber)
  })

const noRetry = { maxAttempts: 1, backoffMultiplier: 1 }

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

describe("Orchestrator", { timeout: bound }, () => {
  describe("process(): analysis, parsing, planning, execution", () => {
    it.effect("end to end on a scripted engine emitting a TaskList", () =>
      Effect.gen(function* () {
        const orchestrator = yield* Orchestrator.make({
          processors: { sentiment, calculator: tally },
          analyzer: { considerations: ["Task dependencies", "Parallel execution"] }
        })
        const result = yield* orchestrator.process("classify these reviews and count the positive ones", { source: "shop" })
        expect(result.completed.map((r) => [r.id, r.output, r.attempts])).toEqual([
          ["r1", "positive", 1],
          ["r2", "negative", 1],
          ["count", 11, 1]
        ])
        expect(result.failed).toEqual([])
        expect(result.skipped).toEqual([])
        expect(result.analysis).toBe("two reviews to classify, then a count")
        expect(result.metadata.phases).toEqual([["r1", "r2"], ["count"]])
        expect(result.metadata.analyzerAttempts).toBe(1)
        expect(result.metadata.taskCount).toBe(3)
        expect(result.metadata.analyzerUsage?.promptTokens).toBe(10)
        const plan = (yield* (yield* EventLog).events).find((e) => e._tag === "Custom" && e.action === "orchestrator.plan")
        expect(plan?._tag === "Custom" && plan.data).toMatchObject({ taskCount: 3, phases: [["r1", "r2"], ["count"]], analyzerAttempts: 1 })

        const [request] = yield* ScriptedEngine.requests
        const [system, user] = request!.messages
        expect(system).toEqual(Message.system(orchestrator.instruction))
        expect(orchestrator.instruction).toMatch(/^Analyze the given task .*\nReply with one compact JSON object/s)
        expect(orchestrator.instruction.endsWith("\nConsider:\n- Task dependencies\n- Parallel execution\n")).toBe(true)
        expect(user).toEqual(
          Message.user(
            `task: classify these reviews and count the positive ones\ncontext: {"source":"shop"}\nprocessors: calculator, sentiment`
          )
        )
        const processorSchema = request!.schema?.properties?.tasks?.items?.properties?.processor
        expect(processorSchema?.enum).toEqual(["calculator", "sentiment"])
      }).pipe(Effect.provide(Layer.merge(withModel([ScriptedEngine.reply(toJson(reviewList))]), Observe.eventLogMemory))))

    it.effect("a reply naming an unregistered processor is re-asked with what was wrong (JSON)", () =>
      Effect.gen(function* () {
        const orchestrator = yield* Orchestrator.make({
          processors: { sentiment, calculator: tally },
          analyzer: { retry: Schedule.recurs(2) }
        })
        const result = yield* orchestrator.process("classify")
        expect(result.metadata.analyzerAttempts).toBe(2)
        const requests = yield* ScriptedEngine.requests
        const correction = requests[1]!.messages.at(-1)!
        expect(correction.content).toContain("Your previous reply was rejected")
        expect(correction.content).toContain("search")
      }).pipe(
        Effect.provide(
          withModel([
            ScriptedEngine.reply(toJson(new TaskList({ analysis: "", tasks: [task("a", "search")] }))),
            ScriptedEngine.reply(toJson(new TaskList({ analysis: "", tasks: [task("a", "sentiment", { description: "good" })] })))
          ])
        )
      ))

    it.effect("XML: a reply that does not parse is answered with the XML error (line, column) and asked again", () =>
      Effect.gen(function* () {
        const orchestrator = yield* Orchestrator.make({
          processors: { sentiment },
          parser: XmlTaskParser.make()
        })
        expect(orchestrator.instruction).toContain(`<task id="t1" type="<kind of work>"`)
        const result = yield* orchestrator.process("classify")
        expect(result.completed.map((r) => [r.id, r.output])).toEqual([["a", "positive"]])
        expect(result.metadata.analyzerAttempts).toBe(3)
        const requests = yield* ScriptedEngine.requests
        expect(requests.length).toBe(3)
        const first = requests[1]!.messages.at(-1)!.content
        expect(first).toMatch(/CONSTRAINT_SCHEMA_INVALID.*line 1, column \d+/s)
        expect(requests[1]!.messages.at(-2)).toEqual(Message.assistant(`<tasks><task id="a" type="s" processor="sentiment"></tasks>`))
        const second = requests[2]!.messages.at(-1)!.content
        expect(second).toContain("CONSTRAINT_ENUM_UNRECOGNIZED")
        expect(second).toContain(`the processors are sentiment`)
      }).pipe(
        Effect.provide(
          withModel([
            ScriptedEngine.reply(`<tasks><task id="a" type="s" processor="sentiment"></tasks>`),
            ScriptedEngine.reply(`<tasks><task id="a" type="s" processor="search"/></tasks>`),
            ScriptedEngine.reply("```xml\n<tasks><task id=\"a\" type=\"s\" processor=\"sentiment\"><description>good</description></task></tasks>\n```")
          ])
        )
      ))

    it.effect("XML: the attempts are bounded; the last parse failure is the call's", () =>
      Effect.gen(function* () {
        const orchestrator = yield* Orchestrator.make({
          processors: { sentiment },
          parser: XmlTaskParser.make(),
          analyzer: { attempts: 2 }
        })
        const error = yield* Effect.flip(orchestrator.process("classify"))
        expect(error.code).toBe("CONSTRAINT_SCHEMA_INVALID")
        expect(error._tag === "ConstraintFailure" && error.details.xmlError).toBe("NO_TASKS_SECTION")
        expect((yield* ScriptedEngine.requests).length).toBe(2)
      }).pipe(Effect.provide(withModel([ScriptedEngine.reply("no idea"), ScriptedEngine.reply("still no idea")]))))

    it.effect("without an Engine, process() is CONFIG_NO_ENGINE; execute() needs none", () =>
      Effect.gen(function* () {
        const orchestrator = yield* Orchestrator.make({ processors: { sentiment, calculator: tally } })
        expect((yield* Effect.flip(orchestrator.process("x"))).code).toBe("CONFIG_NO_ENGINE")
        const result = yield* orchestrator.execute(reviewList)
        expect(result.completed.length).toBe(3)
        expect(result.metadata.analyzerAttempts).toBe(0)
        expect(result.metadata.analyzerUsage).toBeUndefined()
      }))
  })

  describe("before anything runs", () => {
    it.effect("an unknown processor fails the call, naming the registered ones; no processor runs", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe), calculator: tally } })
        const error = yield* Effect.flip(
          orchestrator.execute(new TaskList({ analysis: "", tasks: [task("a", "timed"), task("b", "search")] }))
        )
        expect(error.code).toBe("ORCHESTRATION_STEP_MISMATCH")
        expect(error.message).toBe(`no processor is registered for "search" (task "b"); the processors are calculator, timed`)
        expect(error.details).toMatchObject({ rule: "unknownProcessor", available: ["calculator", "timed"] })
        expect(yield* Ref.get(probe.starts)).toEqual([])
      }))

    it.effect("a task list past maxTasks is refused (ITERATION_LIMIT); a bad maxTasks is a configuration error", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, maxTasks: 2 })
        const error = yield* Effect.flip(
          orchestrator.execute(new TaskList({ analysis: "", tasks: ["a", "b", "c"].map((id) => task(id, "timed")) }))
        )
        expect(error.code).toBe("ORCHESTRATION_ITERATION_LIMIT")
        expect(error.message).toBe("the task list has 3 tasks, more than the 2 allowed")
        expect(yield* Ref.get(probe.starts)).toEqual([])
        expect((yield* Effect.flip(Orchestrator.make({ processors: { sentiment }, maxTasks: 0 }))).details.field).toBe("maxTasks")
      }))

    it.effect("a cycle is rejected with its path; no processor runs", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) } })
        const error = yield* Effect.flip(
          orchestrator.execute(
            new TaskList({
              analysis: "",
              tasks: [task("a", "timed"), task("b", "timed", { dependencies: ["c"] }), task("c", "timed", { dependencies: ["b"] })]
            })
          )
        )
        expect(error.details).toMatchObject({ rule: "cycle", cycle: ["b", "c", "b"] })
        expect(yield* Ref.get(probe.starts)).toEqual([])
      }))

    it.effect("bad options are CONFIG_INVALID_REQUEST naming the option", () =>
      Effect.gen(function* () {
        const fieldOf = (options: Orchestrator.Options<Record<string, TaskProcessor.TaskProcessor>>) =>
          Effect.map(Effect.flip(Orchestrator.make(options)), (e) => [e.code, e.details.field])
        expect(yield* fieldOf({ processors: {} })).toEqual(["CONFIG_INVALID_REQUEST", "processors"])
        expect(yield* fieldOf({ processors: { " x": sentiment } })).toEqual(["CONFIG_INVALID_REQUEST", "processors"])
        expect(yield* fieldOf({ processors: { sentiment }, maxConcurrent: 0 })).toEqual(["CONFIG_INVALID_REQUEST", "maxConcurrent"])
        expect(yield* fieldOf({ processors: { sentiment }, retry: { maxAttempts: 0, backoffMultiplier: 2 } })).toEqual([
          "CONFIG_INVALID_REQUEST",
          "retry.maxAttempts"
        ])
        expect(yield* fieldOf({ processors: { sentiment }, retry: { maxAttempts: 2, backoffMultiplier: 0.5 } })).toEqual([
          "CONFIG_INVALID_REQUEST",
          "retry.backoffMultiplier"
        ])
        expect(yield* fieldOf({ processors: { sentiment }, defaultTimeout: "soon" as any })).toEqual([
          "CONFIG_INVALID_REQUEST",
          "defaultTimeout"
        ])
      }))
  })

  describe("execution", () => {
    const eight = (deps: (i: number) => ReadonlyArray<string>) =>
      new TaskList({
        analysis: "",
        tasks: Array.from({ length: 8 }, (_, i) =>
          task(`t${i}`, "timed", { dependencies: deps(i), metadata: { seconds: String(1 + (i % 3)) } }))
      })

    it.effect("phases: no task of phase n+1 starts before every task of phase n has ended", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, scheduling: "phases", maxConcurrent: 8 })
        // t0..t3 are roots (1, 2, 3, 1 s); t4..t7 each depend on one root
        const result = yield* runFor(12, orchestrator.execute(eight((i) => (i < 4 ? [] : [`t${i - 4}`])), {}))
        expect(result.metadata.phases).toEqual([["t0", "t1", "t2", "t3"], ["t4", "t5", "t6", "t7"]])
        const ends = new Map(yield* Ref.get(probe.ends))
        const starts = new Map(yield* Ref.get(probe.starts))
        const phaseOneEnd = Math.max(...["t0", "t1", "t2", "t3"].map((id) => ends.get(id)!))
        const phaseTwoStart = Math.min(...["t4", "t5", "t6", "t7"].map((id) => starts.get(id)!))
        expect(phaseOneEnd).toBe(3000)
        expect(phaseTwoStart).toBe(3000)
      }))

    it.effect("dataflow: t4 starts as soon as t0 is done", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, maxConcurrent: 8 })
        yield* runFor(12, orchestrator.execute(eight((i) => (i < 4 ? [] : [`t${i - 4}`]))))
        expect(new Map(yield* Ref.get(probe.starts)).get("t4")).toBe(1000)
      }))

    it.effect("observed concurrency never goes above maxConcurrent (counted in the processors)", () =>
      Effect.gen(function* () {
        for (const scheduling of ["dataflow", "phases"] as const) {
          const probe = yield* makeProbe
          const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, scheduling, maxConcurrent: 3 })
          const result = yield* runFor(20, orchestrator.execute(eight((i) => (i < 4 ? [] : [`t${i - 4}`]))))
          expect(result.completed.length).toBe(8)
          expect(yield* Ref.get(probe.max)).toBe(3)
        }
      }))

    it.effect("retries: exact delays by the multiplier, attempt counts; the processor sees the attempt", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({
          processors: { timed: timed(probe) },
          retry: { maxAttempts: 4, backoffMultiplier: 3, initialDelay: "1 second" }
        })
        const list = new TaskList({
          analysis: "",
          tasks: [task("flaky", "timed", { metadata: { seconds: "0", fail: "retryable", failUntil: "2" } })]
        })
        const result = yield* runFor(10, orchestrator.execute(list))
        expect(result.completed.map((r) => [r.id, r.output, r.attempts])).toEqual([["flaky", "flaky#3", 3]])
        expect((yield* Ref.get(probe.starts)).map(([, at]) => at)).toEqual([0, 1000, 4000])
      }))

    it.effect("retries are capped by maxAttempts and maxDelay; a non-retryable failure runs once", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({
          processors: { timed: timed(probe) },
          retry: { maxAttempts: 4, backoffMultiplier: 10, initialDelay: "1 second", maxDelay: "5 seconds" },
          failurePolicy: "continue"
        })
        const list = new TaskList({
          analysis: "",
          tasks: [
            task("always", "timed", { metadata: { seconds: "0", fail: "retryable" } }),
            task("fatal", "timed", { metadata: { seconds: "0", fail: "no" } })
          ]
        })
        const result = yield* runFor(20, orchestrator.execute(list))
        expect(result.failed.map((f) => [f.id, f.error.code])).toEqual([
          ["always", "TOOL_EXECUTION_FAILED"],
          ["fatal", "TOOL_EXECUTION_FAILED"]
        ])
        const starts = yield* Ref.get(probe.starts)
        expect(starts.filter(([id]) => id === "always").map(([, at]) => at)).toEqual([0, 1000, 6000, 11000])
        expect(starts.filter(([id]) => id === "fatal").length).toBe(1)
      }))

    it.effect("a pending retry is cancelled when the run is interrupted", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({
          processors: { timed: timed(probe) },
          retry: { maxAttempts: 3, backoffMultiplier: 2 }
        })
        const list = new TaskList({ analysis: "", tasks: [task("flaky", "timed", { metadata: { seconds: "0", fail: "retryable" } })] })
        const fiber = yield* Effect.fork(orchestrator.execute(list))
        yield* TestClock.adjust("500 millis")
        yield* Fiber.interrupt(fiber)
        yield* TestClock.adjust("10 seconds")
        expect((yield* Ref.get(probe.starts)).length).toBe(1)
      }))

    it.effect("a task past defaultTimeout fails with CANCELLED_TIMEOUT (retries included)", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({
          processors: { timed: timed(probe) },
          defaultTimeout: "2 seconds",
          retry: noRetry
        })
        const list = new TaskList({ analysis: "", tasks: [task("slow", "timed", { metadata: { seconds: "5" } })] })
        const result = yield* runFor(3, orchestrator.execute(list))
        expect(result.failed.map((f) => [f.id, f.error.code])).toEqual([["slow", "CANCELLED_TIMEOUT"]])
        expect(yield* Ref.get(probe.interrupted)).toEqual(["slow"])
      }))

    it.effect("fail-fast interrupts running siblings; the rest are skipped with the reason", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, retry: noRetry, maxConcurrent: 2 })
        const list = new TaskList({
          analysis: "",
          tasks: [
            task("bad", "timed", { priority: 0, metadata: { seconds: "1", fail: "no" } }),
            task("long", "timed", { priority: 1, metadata: { seconds: "5" } }),
            task("after", "timed", { dependencies: ["bad"] }),
            task("queued", "timed", { priority: 2 })
          ]
        })
        const result = yield* runFor(6, orchestrator.execute(list))
        expect(result.failed.map((f) => f.id)).toEqual(["bad"])
        expect(yield* Ref.get(probe.interrupted)).toEqual(["long"])
        expect(result.skipped.map((s) => [s.id, s.reason, s.interrupted, s.dependency])).toEqual([
          ["long", "stopped", true, undefined],
          ["queued", "stopped", false, undefined],
          ["after", "dependency_failed", false, "bad"]
        ])
      }))

    it.effect("continue: independent branches complete; dependents of the failure are skipped", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({
          processors: { timed: timed(probe) },
          retry: noRetry,
          failurePolicy: "continue"
        })
        const list = new TaskList({
          analysis: "",
          tasks: [
            task("bad", "timed", { metadata: { seconds: "1", fail: "no" } }),
            task("long", "timed", { metadata: { seconds: "3" } }),
            task("after", "timed", { dependencies: ["bad"] }),
            task("later", "timed", { dependencies: ["after"] }),
            task("fine", "timed", { dependencies: ["long"] })
          ]
        })
        const result = yield* runFor(6, orchestrator.execute(list))
        expect(result.completed.map((r) => r.id)).toEqual(["long", "fine"])
        expect(result.failed.map((f) => f.id)).toEqual(["bad"])
        expect(result.skipped.map((s) => [s.id, s.reason, s.dependency])).toEqual([
          ["after", "dependency_failed", "bad"],
          ["later", "dependency_failed", "after"]
        ])
        expect(yield* Ref.get(probe.interrupted)).toEqual([])
      }))

    it.effect("a processor receives the task (description, metadata) and its dependencies' outputs by id", () =>
      Effect.gen(function* () {
        const seen = yield* Ref.make<ReadonlyArray<unknown>>([])
        const spy = TaskProcessor.make((t, c) =>
          Effect.as(Ref.update(seen, (s) => [...s, { id: t.id, description: t.description, dependencies: c.dependencies, context: c.context }]), t.id.toUpperCase())
        )
        const orchestrator = yield* Orchestrator.make({ processors: { spy } })
        yield* orchestrator.execute(
          new TaskList({
            analysis: "",
            tasks: [
              task("a", "spy", { description: "first" }),
              task("b", "spy", { description: "second", dependencies: ["a"] }),
              task("c", "spy", { description: "third", dependencies: ["a", "b"] })
            ]
          }),
          { user: "u1" }
        )
        expect(yield* Ref.get(seen)).toEqual([
          { id: "a", description: "first", dependencies: {}, context: { user: "u1" } },
          { id: "b", description: "second", dependencies: { a: "A" }, context: { user: "u1" } },
          { id: "c", description: "third", dependencies: { a: "A", b: "B" }, context: { user: "u1" } }
        ])
      }))

    it.effect("`stop`: running tasks finish, nothing else starts, the rest are skipped as stopped", () =>
      Effect.gen(function* () {
        const probe = yield* makeProbe
        const orchestrator = yield* Orchestrator.make({ processors: { timed: timed(probe) }, maxConcurrent: 1 })
        const list = new TaskList({ analysis: "", tasks: [task("a", "timed", { priority: 0 }), task("b", "timed", { priority: 1 })] })
        const result = yield* runFor(3, orchestrator.execute(list, {}, { stop: Effect.sleep("500 millis") }))
        expect(result.completed.map((r) => r.id)).toEqual(["a"])
        expect(result.skipped.map((s) => [s.id, s.reason])).toEqual([["b", "stopped"]])
      }))
  })
})
