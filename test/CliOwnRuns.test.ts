/**
 * The CLI on the runs it made itself: a run of `pagantic task --state` (the
 * request definition) and of `pagantic query --state` (the query definition)
 * shown, exported and imported into another file (where it ends from its records,
 * the model not asked again), resumed and cancelled through the commands, which
 * register every definition the CLI makes runs of (CommandRuns). In process, on
 * temporary SQLite files, the scripted engine.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as CommandRuns from "../src/adapters/cli/CommandRuns.js"
import * as Query from "../src/domain/Query.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import * as Runs from "../src/services/Runs.js"
import * as InProcess from "./support/cli-in-process.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-own-runs-"))
let files = 0
const tempState = () => path.join(dir, `state-${++files}.db`)
const write = (name: string, value: unknown) => {
  const file = path.join(dir, name)
  fs.writeFileSync(file, typeof value === "string" ? value : JSON.stringify(value))
  return file
}

/** One command line in process, the scripted engine answering `script`. */
const runCli = (args: ReadonlyArray<string>, script: ReadonlyArray<ScriptedEngine.Step> = []) => InProcess.runCli(args, { script })

const runIdIn = (out: string): string => {
  const found = /^run: (\S+)/m.exec(out)
  expect(found, out).not.toBeNull()
  return found![1]!
}

/** `thread export` of `id` on `from`, then `thread import` into a new file, with no model answer to give. */
const exportedAndImported = (from: string, id: string, definition: string) =>
  Effect.gen(function* () {
    const exported = yield* runCli(["thread", "export", "--state", from, id])
    expect(exported.failure).toBeUndefined()
    expect(JSON.parse(exported.out)).toMatchObject({ runId: id, definition })
    const threadFile = write(`${id}.json`, exported.out)
    const other = tempState()
    const imported = yield* runCli(["thread", "import", "--state", other, threadFile])
    expect(imported.failure).toBeUndefined()
    expect(imported.out).toContain("status: completed")
    expect(imported.asked).toBe(0)
    return other
  })

const list = new TaskList({
  analysis: "name, then shout",
  tasks: [
    new Task({ id: "name", type: "write", processor: "infer", description: "Name a colour" }),
    new Task({ id: "shout", type: "write", processor: "infer", description: "Shout it", dependencies: ["name"] })
  ]
})

const classify = (category: string, confidence: number) => ScriptedEngine.reply(JSON.stringify({ category, _confidence: confidence }))

const modelQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }],
  fold: { function: "best_of" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
}

const humanQuery = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "actor", did: "did:example:alice" }],
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
}

/** A query run waiting on a human, started on `file` with the CLI's query definition by an application that registers alice. */
const startHumanQuery = (file: string, id: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { engine } = yield* ScriptedEngine.make([])
      const queries = CommandRuns.queries(engine)
      const context = yield* Layer.build(
        SqliteRuns.layer({ filename: file, definitions: [queries] }).pipe(
          Layer.provide(Layer.merge(
            InMemoryResponders.layer({ responders: [{ id: "alice", kind: "actor", did: "did:example:alice" }] }),
            LexicalReranker.layer()
          ))
        )
      )
      const runs = Context.get(context, Runs.Runs)
      yield* runs.start(queries, Schema.decodeUnknownSync(Query.Query)(humanQuery), { id })
      expect((yield* runs.await(id, { untilSuspended: true })).status).toBe("suspended")
    })
  ).pipe(Effect.orDie)

describe("the CLI on the runs it made (in process, temporary state files)", () => {
  it.live("task --state: runs show, thread export and import into another file (ended from its records)", () =>
    Effect.gen(function* () {
      const file = tempState()
      const task = yield* runCli(["task", "--state", file, "name a colour and shout it"], [
        ScriptedEngine.reply(toJson(list)),
        ScriptedEngine.reply("red"),
        ScriptedEngine.reply("RED!")
      ])
      expect(task.failure).toBeUndefined()
      const id = runIdIn(task.out)
      const shown = yield* runCli(["runs", "show", "--json", "--state", file, id])
      expect(JSON.parse(shown.out)).toMatchObject({ id, status: "completed", definition: "pagantic.request" })
      const other = yield* exportedAndImported(file, id, "pagantic.request")
      const again = JSON.parse((yield* runCli(["runs", "show", "--json", "--state", other, id])).out)
      expect(again.result.orchestration.completed.map((t: { output: unknown }) => t.output)).toEqual(["red", "RED!"])
    }).pipe(Effect.timeout("60 seconds")), 90_000)

  it.live("query --state: runs show, thread export and import into another file (ended from its records)", () =>
    Effect.gen(function* () {
      const file = tempState()
      const ran = yield* runCli(["query", "--state", file, write("q.json", modelQuery)], [classify("research", 0.9), classify("research", 0.7)])
      expect(ran.failure).toBeUndefined()
      const id = runIdIn(ran.out)
      const shown = yield* runCli(["runs", "show", "--json", "--state", file, id])
      expect(JSON.parse(shown.out)).toMatchObject({ id, status: "completed", definition: Query.QueryKind })
      yield* exportedAndImported(file, id, Query.QueryKind)
    }).pipe(Effect.timeout("60 seconds")), 90_000)

  it.live("a query run waiting on a human: runs resume re-drives it to the same wait, runs cancel ends it", () =>
    Effect.gen(function* () {
      const file = tempState()
      yield* startHumanQuery(file, "q-human")
      const resumed = yield* runCli(["runs", "resume", "--state", file, "q-human"])
      expect(resumed.failure).toBeUndefined()
      expect(resumed.out).toContain("status: suspended")
      expect(resumed.asked).toBe(0)
      const cancelled = yield* runCli(["runs", "cancel", "--state", file, "q-human"])
      expect(cancelled.failure).toBeUndefined()
      expect(cancelled.out).toContain("run q-human: cancelled")
    }).pipe(Effect.timeout("60 seconds")), 90_000)

  it.live("a run of a definition the CLI does not register: one line naming it, what the CLI has, and where definitions come from", () =>
    Effect.gen(function* () {
      const file = tempState()
      const Foreign = Runs.define({
        name: "foreign",
        payload: Schema.Struct({}),
        success: Schema.Struct({}),
        program: () => Effect.never
      })
      yield* Effect.scoped(Effect.gen(function* () {
        const runs = Context.get(yield* Layer.build(SqliteRuns.layer({ filename: file, definitions: [Foreign] })), Runs.Runs)
        yield* runs.start(Foreign, {}, { id: "f-1" })
      })).pipe(Effect.orDie)
      const cancelled = yield* runCli(["runs", "cancel", "--state", file, "f-1"])
      expect(cancelled.ok).toBe(false)
      expect(cancelled.err).toHaveLength(1)
      expect(cancelled.err[0]).toContain(`run f-1 is of definition "foreign", which this Runs layer does not have (it has `)
      expect(cancelled.err[0]).toContain(`"${Query.QueryKind}", "pagantic.request"`)
      expect(cancelled.err[0]).toContain("adds its definitions through Cli.CliRuns (pagantic/cli)")
    }).pipe(Effect.timeout("60 seconds")), 90_000)
})
