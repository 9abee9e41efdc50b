/**
 * The durable runs from the command line (cli/commands/Runs, Thread, Respond,
 * Migrate, and the demo's durable part), in process on a temporary SQLite state
 * file: a test definition with a human slot is added through `CliRuns`; its runs
 * are started by the test on the same file (SqliteRuns), then listed, shown,
 * answered, exported, imported, cancelled and pruned through the commands.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as SqliteRuns from "../src/layers/SqliteRuns.js"
import { Durable } from "../src/services/Durable.js"
import * as Runs from "../src/services/Runs.js"
import * as InProcess from "./support/cli-in-process.js"
import { Review, secretOf } from "./support/durable-runs.js"

/** The secrets the tickets handed out, by run id (the runs run in this process). */
const secrets = new Map<string, string>()

/** A run that asks a human (Review shape, one hour) and ends with the answer's note, or how the slot closed. */
const Ticket = Runs.define({
  name: "ticket",
  payload: Schema.Struct({ topic: Schema.String }),
  success: Schema.Struct({ outcome: Schema.String }),
  answers: [Review],
  program: () =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const slot = yield* durable.slot(Review, { sla: "1 hour" })
      yield* durable.step("notify", Schema.Void, Effect.sync(() => void secrets.set(durable.runId, secretOf(slot))))
      const answer = yield* durable.awaitAnswer(Review, slot)
      return { outcome: answer._tag === "Answered" ? `answered:${answer.value.note}` : answer._tag }
    })
})

const tempState = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-runs-cli-")), "state.db")

/** Starts tickets on `file` (the test's own process holding it meanwhile) and leaves them waiting. */
const startTickets = (file: string, ids: ReadonlyArray<string>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(SqliteRuns.layer({ filename: file, definitions: [Ticket] }))
      const runs = Context.get(context, Runs.Runs)
      for (const id of ids) {
        yield* runs.start(Ticket, { topic: id }, { id })
        expect((yield* runs.await(id, { untilSuspended: true })).status).toBe("suspended")
      }
    })
  ).pipe(Effect.orDie)

/** One command line in process: the scripted engine, the Ticket definition added. */
const runCli = (args: ReadonlyArray<string>, script: ReadonlyArray<ScriptedEngine.Step> = []) =>
  InProcess.runCli(args, { script, definitions: [Ticket] })

describe("pagantic migrate | runs | thread | respond (in process, a temporary state file)", () => {
  it.live("migrate creates the state file (0600); list on an empty file; a bad status, an unknown run and a bad age are one line each", () =>
    Effect.gen(function* () {
      const file = tempState()
      const migrated = yield* runCli(["migrate", "--state", file])
      expect(migrated.ok).toBe(true)
      expect(migrated.out).toContain(`state tables ready in ${file}`)
      expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      expect(fs.existsSync(`${file}.owner`)).toBe(false)

      expect((yield* runCli(["runs", "list", "--state", file])).out).toContain(`no runs in ${file}`)
      expect((yield* runCli(["runs", "list", "--json", "--state", file])).out.trim()).toBe("[]")
      const badStatus = yield* runCli(["runs", "list", "--status", "bogus", "--state", file])
      expect(badStatus.ok).toBe(false)
      expect(badStatus.err).toEqual([`error: --status expects one of running, suspended, stale, completed, failed, cancelled, got "bogus"`])
      const unknown = yield* runCli(["runs", "show", "--state", file, "nope"])
      expect(unknown.err).toEqual([`error: CONFIG_INVALID_REQUEST: no run has the id "nope"`])
      const badAge = yield* runCli(["runs", "prune", "--older-than", "soon", "--state", file])
      expect(badAge.err[0]).toContain("--older-than expects an age such as 7d")
      const noResponse = yield* runCli(["respond", "--secret", "s", "--state", file, "r", "slot"])
      expect(noResponse.err[0]).toContain("give exactly one of --submit JSON, --accept --eta SECONDS, --decline REASON")
    }), 60_000)

  it.live("respond: a wrong secret and a wrong shape are refused (the slot stays open), the answer completes the run here; again is SLOT_CLOSED", () =>
    Effect.gen(function* () {
      const file = tempState()
      yield* startTickets(file, ["t-1"])
      const secret = secrets.get("t-1")!

      const listed = yield* runCli(["runs", "list", "--state", file])
      expect(listed.out).toMatch(/^t-1 {2}suspended \(waiting on review\) {2}ticket {2}\d{4}-/m)
      const shown = yield* runCli(["runs", "show", "--json", "--state", file, "t-1"])
      expect(JSON.parse(shown.out)).toMatchObject({ id: "t-1", status: "suspended", waitingOn: "review" })

      const forbidden = yield* runCli(["respond", "--secret", "wrong", "--submit", `{"approved":true,"note":"x"}`, "--state", file, "t-1", "review"])
      expect(forbidden.err[0]).toMatch(/^error: ORCHESTRATION_SLOT_FORBIDDEN: run t-1 has no slot "review" that this answerer may answer/)
      const shape = yield* runCli(["respond", "--secret", secret, "--submit", `{"approved":"yes"}`, "--state", file, "t-1", "review"])
      expect(shape.err[0]).toMatch(/^error: CONFIG_INVALID_REQUEST: answer: does not match the shape "review" of slot "review"/)
      const notJson = yield* runCli(["respond", "--secret", secret, "--submit", "{nope", "--state", file, "t-1", "review"])
      expect(notJson.err[0]).toContain("--submit is not JSON")
      expect(JSON.parse((yield* runCli(["runs", "show", "--json", "--state", file, "t-1"])).out).waitingOn).toBe("review")

      const answered = yield* runCli(["respond", "--secret", secret, "--submit", `{"approved":true,"note":"ok"}`, "--state", file, "t-1", "review"])
      expect(answered.failure).toBeUndefined()
      expect(answered.out).toContain("submit: Accepted (run t-1, slot review)")
      expect(answered.out).toContain("status: completed")
      expect(answered.out).toContain(`result: {"outcome":"answered:ok"}`)
      const again = yield* runCli(["respond", "--secret", secret, "--submit", `{"approved":true,"note":"late"}`, "--state", file, "t-1", "review"])
      expect(again.err[0]).toMatch(/^error: ORCHESTRATION_SLOT_CLOSED/)
    }), 90_000)

  it.live("thread export | import into another file re-drives it to the same result; cancel; prune removes what ended", () =>
    Effect.gen(function* () {
      const file = tempState()
      yield* startTickets(file, ["t-2", "t-3"])
      const declined = yield* runCli(["respond", "--secret", secrets.get("t-2")!, "--decline", "overbooked", "--state", file, "t-2", "review"])
      expect(declined.out).toContain(`result: {"outcome":"Declined"}`)

      const exported = yield* runCli(["thread", "export", "--state", file, "t-2"])
      expect(exported.ok).toBe(true)
      const thread = JSON.parse(exported.out)
      expect(thread).toMatchObject({ runId: "t-2", definition: "ticket" })
      expect(exported.out).not.toContain(secrets.get("t-2")!)
      const threadFile = path.join(path.dirname(file), "t-2.json")
      fs.writeFileSync(threadFile, exported.out)

      const other = tempState()
      const imported = yield* runCli(["thread", "import", "--state", other, threadFile])
      expect(imported.failure).toBeUndefined()
      expect(imported.out).toContain("status: completed")
      expect(imported.out).toContain(`result: {"outcome":"Declined"}`)
      const twice = yield* runCli(["thread", "import", "--state", other, threadFile])
      expect(twice.err[0]).toContain(`a run with the id "t-2" exists already`)
      fs.writeFileSync(threadFile, `{"runId": 1}`)
      expect((yield* runCli(["thread", "import", "--state", other, threadFile])).err[0]).toContain("is not a thread")

      const cancelled = yield* runCli(["runs", "cancel", "--state", file, "t-3"])
      expect(cancelled.out).toContain("run t-3: cancelled")
      expect((yield* runCli(["runs", "list", "--status", "cancelled", "--state", file])).out).toContain("t-3  cancelled")

      const pruned = yield* runCli(["runs", "prune", "--older-than", "0s", "--state", file])
      expect(pruned.out).toContain("pruned 2 run(s)")
      expect((yield* runCli(["runs", "list", "--state", file])).out).toContain("no runs in")
    }), 90_000)

  it.live("a state file held by another process: the commands say who holds it; the demo says so, skips its durable part and succeeds", () =>
    Effect.gen(function* () {
      const file = tempState()
      expect((yield* runCli(["migrate", "--state", file])).ok).toBe(true)
      // this process is alive: as an owner it holds the file
      fs.writeFileSync(`${file}.owner`, JSON.stringify({ pid: process.pid, token: "another", since: "2026-01-01T00:00:00Z" }))
      const listed = yield* runCli(["runs", "list", "--state", file])
      expect(listed.err[0]).toMatch(new RegExp(`^error: ORCHESTRATION_STATE_UNAVAILABLE: the state file .* is owned by process ${process.pid}`))

      const previous = process.env.PAGANTIC_STATE
      process.env.PAGANTIC_STATE = file
      const demo = yield* runCli(["demo"], [
        ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "12 + 7" } }]),
        ScriptedEngine.reply("The answer is 19."),
        ...Array.from({ length: 7 }, () => ScriptedEngine.reply(`{"sentiment": "positive"}`)),
        // the demo's tasks: one of its reviews to classify (a description must be a review the request quotes)
        ScriptedEngine.reply(JSON.stringify({
          analysis: "1 review to classify",
          tasks: [{ id: "t1", type: "sentiment", processor: "sentiment", priority: 1, dependencies: [], description: "The room was spotless.", metadata: {} }]
        })),
        ScriptedEngine.reply(`{"sentiment": "positive"}`),
        // the waterfall query (in memory): stage 1's two responders agree
        ScriptedEngine.reply(`{"sentiment": "positive"}`),
        ScriptedEngine.reply(`{"sentiment": "positive"}`)
      ]).pipe(Effect.ensuring(Effect.sync(() => {
        if (previous === undefined) delete process.env.PAGANTIC_STATE
        else process.env.PAGANTIC_STATE = previous
      })))
      expect(demo.failure).toBeUndefined()
      // the durable run and the escalation's durable query are both skipped; the waterfall runs in memory
      expect(demo.out.match(/skipped: ORCHESTRATION_STATE_UNAVAILABLE: the state file .* is owned by process/g)).toHaveLength(2)
      expect(demo.out).toContain("waterfall accepted, from stage 1, 2 CALLs")
    }), 60_000)
})

/** A run whose one step never returns: it stays `running` (stale once its process is gone). */
const Blocker = Runs.define({
  name: "blocker",
  payload: Schema.Struct({}),
  success: Schema.Number,
  program: () => Effect.flatMap(Durable, (durable) => durable.step("wait", Schema.Number, Effect.never))
})

const OtherBlocker = Runs.define({ ...Blocker, name: "other-blocker" })

describe("Runs.list on a state file", () => {
  it.live("a status filter that tells running from stale applies the limit after telling them apart", () =>
    Effect.gen(function* () {
      const file = tempState()
      const open = (definitions: ReadonlyArray<Runs.Definition<any, any, any, any, Durable>>) =>
        Effect.map(Layer.build(SqliteRuns.layer({ filename: file, definitions, drain: "100 millis" })), Context.get(Runs.Runs))
      // a process starts a run and goes away while it runs
      yield* Effect.scoped(
        Effect.gen(function* () {
          const runs = yield* open([Blocker])
          yield* runs.start(Blocker, {}, { id: "old" })
          yield* Effect.sleep("200 millis")
        })
      )
      yield* Effect.scoped(
        Effect.gen(function* () {
          // this process does not have the old run's definition: it is left as is, stale; a newer run goes here
          const runs = yield* open([OtherBlocker])
          yield* runs.start(OtherBlocker, {}, { id: "new" })
          yield* Effect.sleep("200 millis")
          const listed = (yield* runs.list()).map((info) => `${info.id}:${info.status}`)
          expect(listed).toEqual(["new:running", "old:stale"])
          expect((yield* runs.list({ status: "stale", limit: 1 })).map((info) => info.id)).toEqual(["old"])
          expect((yield* runs.list({ status: "running", limit: 1 })).map((info) => info.id)).toEqual(["new"])
        })
      )
    }).pipe(Effect.orDie), 120_000)
})
