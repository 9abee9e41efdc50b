/**
 * The durable commands on Postgres beside another runner (in process): a run that
 * waits for a human is started on one runner of an embedded Postgres, which stays
 * up, and `pagantic runs list | show` and `pagantic respond --state-url` (each
 * command a cluster client of the same database: no shards) read it and answer it; the
 * run completes. Skipped, with the reason printed, only where no Postgres can
 * start (test/support/postgres.ts).
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Cli from "../src/adapters/Cli.js"
import * as PostgresRuns from "../src/layers/PostgresRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Durable } from "../src/services/Durable.js"
import { Engine } from "../src/services/Engine.js"
import * as Runs from "../src/services/Runs.js"
import { Review, secretOf } from "./support/durable-runs.js"
import * as Postgres from "./support/postgres.js"
import { shared } from "./support/postgres-shared.js"

const secrets = new Map<string, string>()

/** A run that asks a human (Review shape, one hour) and ends with the answer's note. */
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

interface Ran {
  readonly ok: boolean
  readonly out: string
  readonly err: ReadonlyArray<string>
}

const runCli = (args: ReadonlyArray<string>): Effect.Effect<Ran> =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const { engine } = yield* ScriptedEngine.make([])
    const exit = yield* Effect.exit(
      Cli.run(["node", "pagantic", ...args]).pipe(
        Effect.provideService(Cli.CliIo, {
          write: (text) => Ref.update(out, (o) => o + text),
          error: (line) => Ref.update(err, (e) => [...e, line]),
          readLine: () => Effect.succeed(Option.none()),
          colors: false
        }),
        Effect.provideService(Cli.CliEngine, { make: () => Layer.succeed(Engine, engine) }),
        Effect.provideService(Cli.CliRuns, { definitions: [Ticket] }),
        Effect.provide(NodeContext.layer)
      )
    )
    if (Exit.isFailure(exit) && Option.isNone(Cause.failureOption(exit.cause))) return yield* Effect.die(Cause.pretty(exit.cause))
    return { ok: Exit.isSuccess(exit), out: yield* Ref.get(out), err: yield* Ref.get(err) }
  })

describe("PostgresRuns: a URL of another scheme", () => {
  it.effect("is ORCHESTRATION_STATE_UNAVAILABLE quoting only its scheme, never its password", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(Effect.provide(Runs.Runs, PostgresRuns.layer({ url: "my://a:hunter2@h/x", definitions: [Ticket] })))
      const message = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause))?.message : undefined
      expect(message).toContain(`its scheme is "my:"`)
      expect(message).not.toContain("hunte")
    }))
})

const server = shared()
const skipped = "skipped" in server ? server.skipped : undefined
if (skipped !== undefined) console.warn(`CliPostgresRespond: the Postgres cases are SKIPPED: ${skipped}`)
const pg = "skipped" in server ? undefined : server

describe.skipIf(pg === undefined)("pagantic runs | respond --state-url beside another runner (in process)", () => {
  it.live("lists and shows the waiting run, refuses a wrong secret, and the answer completes it", () =>
    Effect.gen(function* () {
      const url = yield* Effect.promise(() => Postgres.createDatabase(pg!, "cli_respond"))
      const runnerPort = yield* Effect.promise(() => Postgres.freePort())
      yield* Effect.scoped(
        Effect.gen(function* () {
          // the first runner: starts the run and stays up while the commands run
          const context = yield* Layer.build(PostgresRuns.layer({ url, definitions: [Ticket], runnerPort }))
          const runs = Context.get(context, Runs.Runs)
          yield* runs.start(Ticket, { topic: "x" }, { id: "pg-t-1" })
          expect((yield* runs.await("pg-t-1", { untilSuspended: true })).status).toBe("suspended")
          const secret = secrets.get("pg-t-1")!

          const listed = yield* runCli(["runs", "list", "--state-url", url])
          expect(listed.err).toEqual([])
          expect(listed.out).toMatch(/^pg-t-1 {2}suspended \(waiting on review\) {2}ticket {2}\d{4}-/m)

          const shown = yield* runCli(["runs", "show", "--json", "--state-url", url, "pg-t-1"])
          expect(JSON.parse(shown.out)).toMatchObject({ id: "pg-t-1", status: "suspended", waitingOn: "review" })

          const forbidden = yield* runCli(["respond", "--secret", "wrong", "--submit", `{"approved":true,"note":"x"}`, "--state-url", url, "pg-t-1", "review"])
          expect(forbidden.err[0]).toMatch(/^error: ORCHESTRATION_SLOT_FORBIDDEN/)

          const answered = yield* runCli(["respond", "--secret", secret, "--submit", `{"approved":true,"note":"ok"}`, "--state-url", url, "pg-t-1", "review"])
          expect(answered.err).toEqual([])
          expect(answered.out).toContain("submit: Accepted (run pg-t-1, slot review)")
          expect(answered.out).toContain("status: completed")
          expect(answered.out).toContain(`result: {"outcome":"answered:ok"}`)
          // the first runner sees it ended too
          expect((yield* runs.await("pg-t-1")).status).toBe("completed")
        })
      )
    }).pipe(Effect.timeout("150 seconds"), Effect.orDie), 180_000)
})
