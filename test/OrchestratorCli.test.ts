/** `pagantic task`: the task mode from the command line, on a ScriptedEngine, output captured. */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Cli from "../src/adapters/Cli.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Engine } from "../src/services/Engine.js"

/** Tests that could wait forever on the TestClock (a retry that never fires) end here instead. */
const bound = 20_000

const runCli = (args: ReadonlyArray<string>, script: ReadonlyArray<ScriptedEngine.Step>) =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const { control, engine } = yield* ScriptedEngine.make(script)
    const io = Cli.CliIo.of({
      write: (text) => Ref.update(out, (o) => o + text),
      error: (line) => Ref.update(err, (e) => [...e, line]),
      readLine: () => Effect.succeed(Option.none()),
      colors: false
    })
    const engines = Cli.CliEngine.of({ make: () => Layer.succeed(Engine, engine) })
    const exit = yield* Effect.exit(
      Cli.run(["node", "pagantic", ...args]).pipe(
        Effect.provideService(Cli.CliIo, io),
        Effect.provideService(Cli.CliEngine, engines),
        Effect.provide(NodeContext.layer)
      )
    )
    return { exit, out: yield* Ref.get(out), err: yield* Ref.get(err), requests: yield* control.requests }
  })

const list = new TaskList({
  analysis: "name, then shout",
  tasks: [
    new Task({ id: "name", type: "write", processor: "infer", description: "Name a colour" }),
    new Task({ id: "shout", type: "write", processor: "infer", description: "Shout it", dependencies: ["name"] })
  ]
})

describe("pagantic task", { timeout: bound }, () => {
  it.effect("analyzes, runs the tasks on the default processor and prints each one", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["task", "name a colour and shout it"], [
        ScriptedEngine.reply(toJson(list)),
        ScriptedEngine.reply("red"),
        ScriptedEngine.reply("RED!")
      ])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain("analysis: name, then shout\nphases: [name] -> [shout]\n")
      expect(run.out).toContain(`  name (infer): "red"\n  shout (infer): "RED!"\n`)
      expect(run.requests[0]!.messages.at(-1)!.content).toContain("task: name a colour and shout it")
      expect(run.requests[0]!.schema).toBeDefined()
    }))

  it.effect("--xml asks for XML; --phases, --continue and --max-concurrent reach the orchestration", () =>
    Effect.gen(function* () {
      const xml = `<tasks><task id="a" type="w" processor="infer"><description>go</description></task></tasks>`
      const run = yield* runCli(["task", "--xml", "--phases", "--continue", "--max-concurrent", "2", "--json", "go"], [
        ScriptedEngine.reply(xml),
        ScriptedEngine.reply("went")
      ])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests[0]!.messages[0]!.content).toContain("<tasks>")
      expect(run.requests[0]!.schema).toBeUndefined()
      const response = JSON.parse(run.out)
      expect(response.orchestration.metadata).toMatchObject({ scheduling: "phases", failurePolicy: "continue", maxConcurrent: 2 })
      expect(response.structuredOutput).toEqual({ a: "went" })
    }))

  it.effect("a task that failed is printed and the command fails (exit 1) naming it; the others are still printed", () =>
    Effect.gen(function* () {
      const two = new TaskList({
        analysis: "two colours",
        tasks: [
          new Task({ id: "a", type: "write", processor: "infer", description: "Name a colour" }),
          new Task({ id: "b", type: "write", processor: "infer", description: "Name another" })
        ]
      })
      const run = yield* runCli(["task", "--continue", "--max-concurrent", "1", "two colours"], [
        ScriptedEngine.reply(toJson(two)),
        ScriptedEngine.reply("red"),
        ScriptedEngine.fail(InferenceFailure.contextExceeded("the prompt does not fit"))
      ])
      expect(Exit.isFailure(run.exit)).toBe(true)
      expect(run.out).toContain(`  a (infer): "red"\n`)
      expect(run.out).toContain("  b (infer): failed: INFERENCE_CONTEXT_EXCEEDED")
      expect(run.err.join("\n")).toContain("1 of 2 task(s) failed: b")
    }))

  it.effect("--max-concurrent outside 1..32 is refused, naming the flag", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["task", "--max-concurrent", "99", "go"], [])
      expect(Exit.isFailure(run.exit)).toBe(true)
      expect(run.err.join("\n")).toContain("--max-concurrent must be from 1 to 32, got 99")
      expect(run.requests).toEqual([])
    }))
})
