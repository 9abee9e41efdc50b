/**
 * `pagantic thread export RUN` and `pagantic thread import FILE`: a run's thread
 * (its payload, records and slots, never a slot's secret) as JSON, to move a run
 * to another store (a SQLite file or a Postgres database, see RunsState). An imported thread is re-driven here: the steps whose
 * responses it holds are not run again, so a completed thread comes to the same
 * result without calling anything; the command waits until the run ends or
 * waits for an answer.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Usage from "@effect/cli/Usage"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Issues from "../../../domain/Issues.js"
import { terminalStatuses, Thread } from "../../../services/Runs.js"
import { CliFailure, fail } from "../CliFailure.js"
import { globalOptions } from "../Flags.js"
import { readJsonFile } from "../Input.js"
import { json, print } from "../Output.js"
import { runsFailure, stateOption, withRuns } from "../RunsState.js"
import { settingsOf } from "../Wiring.js"
import { printRun, runIdArg } from "./Runs.js"

/** The largest thread file read. */
const MAX_THREAD_BYTES = 64 * 1024 * 1024

const encodeThread = Schema.encode(Thread)

const exportThread = Command.make(
  "export",
  { ...globalOptions, state: stateOption, id: runIdArg },
  (args) =>
    Effect.gen(function* () {
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          const thread = yield* runs.exportThread(args.id).pipe(Effect.mapError(runsFailure))
          // a thread the store gave back always encodes: a failure here is a bug
          yield* print(json(yield* Effect.orDie(encodeThread(thread))))
        }))
    })
).pipe(Command.withDescription("print a run's thread as JSON (redirect it to a file: > thread.json)"))

const importThread = Command.make(
  "import",
  { ...globalOptions, state: stateOption, file: Args.text({ name: "file" }).pipe(Args.withDescription("a thread exported by pagantic thread export")) },
  (args) =>
    Effect.gen(function* () {
      const wire = yield* readJsonFile(args.file, "the thread file", MAX_THREAD_BYTES)
      const thread = yield* Schema.decodeUnknown(Thread)(wire).pipe(
        Effect.mapError((e) =>
          new CliFailure({
            message: `the thread file ${args.file} is not a thread: ${Issues.describe(e, "a thread object", "the thread").slice(0, 5).join("; ")}`
          })
        )
      )
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          const id = yield* runs.importThread(thread).pipe(Effect.mapError(runsFailure))
          // a slot the thread closed is delivered again: waiting on it is a moment, not a stop
          const closed = new Set(thread.slots.filter((slot) => slot.status !== "open").map((slot) => slot.key))
          const info = yield* Effect.zipLeft(runs.poll(id), Effect.sleep("50 millis")).pipe(
            Effect.repeat({
              until: (info) =>
                terminalStatuses.has(info.status) ||
                (info.status === "suspended" && (info.waitingOn === undefined || !closed.has(info.waitingOn)))
            }),
            Effect.mapError(runsFailure)
          )
          yield* printRun(info)
          if (info.status === "failed") return yield* fail(`run ${info.id} failed`)
        }))
    })
).pipe(Command.withDescription("record an exported thread here and re-drive it (recorded responses are not asked again)"))

export const thread = Command.make("thread").pipe(
  Command.withDescription("move a run's thread between stores: export, import"),
  Command.withSubcommands([exportThread, importThread])
)

/** What the command line check knows of `thread`: every subcommand's options. */
export const threadUsage: Usage.Usage = [Command.getUsage(exportThread), Command.getUsage(importThread)]
  .reduce((all, usage) => Usage.alternation(all, usage))
