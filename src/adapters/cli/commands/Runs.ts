/**
 * `pagantic runs list | show | resume | cancel | prune`: the durable runs of the
 * chosen store (a SQLite file or a Postgres database: `--state`, `--state-url`,
 * see RunsState), read and moved through the Runs API. `resume` re-drives a suspended or stale run in this
 * process and waits until it ends or waits for an answer again.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Usage from "@effect/cli/Usage"
import * as Options from "@effect/cli/Options"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { RunInfo as RunInfoType } from "../../../services/Runs.js"
import { RunInfo, RunStatus } from "../../../services/Runs.js"
import { fail } from "../CliFailure.js"
import { globalOptions, integerIn } from "../Flags.js"
import { json, print } from "../Output.js"
import { loadDurable, runsFailure, stateOption, storeOf, withRuns } from "../RunsState.js"
import { settingsOf } from "../Wiring.js"

const encodeInfo = Schema.encodeSync(RunInfo)

/** The id argument: a run id as `runs list` prints it. */
export const runIdArg = Args.text({ name: "run-id" }).pipe(Args.withDescription("the run's id (see pagantic runs list)"))

const jsonFlag = Options.boolean("json").pipe(Options.withDescription("print JSON instead"))

const iso = (at: DateTime.Utc) => DateTime.formatIso(at)

/** One line per run: id, status (and the slot it waits on), definition, last move. */
const runLine = (info: RunInfoType) =>
  `${info.id}  ${info.status}${info.waitingOn === undefined ? "" : ` (waiting on ${info.waitingOn})`}  ${info.definition}  ${iso(info.updatedAt)}`

/** A run for people: its fields, its result or its error. */
export const printRun = (info: RunInfoType) =>
  Effect.gen(function* () {
    yield* print(`run ${info.id}`)
    yield* print(`  definition: ${info.definition}`)
    yield* print(`  status: ${info.status}${info.waitingOn === undefined ? "" : `, waiting on slot ${info.waitingOn}`}`)
    yield* print(`  created: ${iso(info.createdAt)}, updated: ${iso(info.updatedAt)}`)
    if (info.result !== undefined) yield* print(`  result: ${json(info.result)}`)
    if (info.error !== undefined) yield* print(`  error: ${info.error.code}: ${info.error.message}`)
  })

const list = Command.make(
  "list",
  {
    ...globalOptions,
    state: stateOption,
    status: Options.choice("status", RunStatus.literals).pipe(
      Options.withDescription("only the runs in this status"),
      Options.optional
    ),
    limit: integerIn("limit", 1, 10_000).pipe(Options.withDescription("at most this many, newest first (default 100)"), Options.optional),
    json: jsonFlag
  },
  (args) =>
    Effect.gen(function* () {
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ file, runs }) =>
        Effect.gen(function* () {
          const infos = yield* runs.list({
            status: Option.getOrUndefined(args.status),
            limit: Option.getOrUndefined(args.limit)
          }).pipe(Effect.mapError(runsFailure))
          if (args.json) return yield* print(json(infos.map((info) => encodeInfo(info))))
          if (infos.length === 0) return yield* print(`no runs in ${file}${Option.isSome(args.status) ? ` with status ${args.status.value}` : ""}`)
          for (const info of infos) yield* print(runLine(info))
        }))
    })
).pipe(Command.withDescription("the runs recorded, newest first"))

const show = Command.make(
  "show",
  { ...globalOptions, state: stateOption, json: jsonFlag, id: runIdArg },
  (args) =>
    Effect.gen(function* () {
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          const info = yield* runs.poll(args.id).pipe(Effect.mapError(runsFailure))
          if (args.json) yield* print(json(encodeInfo(info)))
          else yield* printRun(info)
        }))
    })
).pipe(Command.withDescription("one run: status, the slot it waits on, its result or error"))

const resume = Command.make(
  "resume",
  { ...globalOptions, state: stateOption, id: runIdArg },
  (args) =>
    Effect.gen(function* () {
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          yield* runs.resume(args.id).pipe(Effect.mapError(runsFailure))
          const info = yield* runs.await(args.id, { untilSuspended: true }).pipe(Effect.mapError(runsFailure))
          yield* printRun(info)
          if (info.status === "failed") return yield* fail(`run ${info.id} failed`)
        }), "runner")
    })
).pipe(Command.withDescription("re-drive a suspended or stale run here; waits until it ends or waits for an answer"))

const cancel = Command.make(
  "cancel",
  { ...globalOptions, state: stateOption, id: runIdArg },
  (args) =>
    Effect.gen(function* () {
      const settings = yield* settingsOf(args)
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          yield* runs.cancel(args.id).pipe(Effect.mapError(runsFailure))
          const info = yield* runs.poll(args.id).pipe(Effect.mapError(runsFailure))
          yield* print(`run ${info.id}: ${info.status}`)
        }))
    })
).pipe(Command.withDescription("cancel a run (CANCELLED_SIGNAL; its open slots close)"))

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }

/** An age as `7d`, `12h`, `30m`, `45s`, `500ms`, `2w`, or Effect's own spelling (`7 days`). */
export const parseAge = (text: string): Option.Option<Duration.Duration> => {
  const short = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$/i.exec(text)
  if (short !== null) return Option.some(Duration.millis(Number(short[1]) * UNITS[short[2]!.toLowerCase()]!))
  const long = /^\s*(\d+(?:\.\d+)?)\s+(millis|seconds?|minutes?|hours?|days?|weeks?)\s*$/i.exec(text)
  return long === null ? Option.none() : Duration.decodeUnknown(`${long[1]} ${long[2]!.toLowerCase()}`)
}

const prune = Command.make(
  "prune",
  {
    ...globalOptions,
    state: stateOption,
    olderThan: Options.text("older-than").pipe(
      Options.withPseudoName("age"),
      Options.withDescription("delete the runs that ended longer ago than this: 7d, 12h, 30m")
    )
  },
  (args) =>
    Effect.gen(function* () {
      const age = parseAge(args.olderThan)
      if (Option.isNone(age)) {
        return yield* fail(`--older-than expects an age such as 7d, 12h or 30m, got ${JSON.stringify(args.olderThan.slice(0, 40))}`)
      }
      const settings = yield* settingsOf(args)
      const store = yield* storeOf(args.state)
      // a SQLite file is pruned beside the server that owns it, if one does: no runner starts here
      if (store._tag === "Sqlite") {
        const lines = yield* Effect.flatMap(loadDurable, (durable) => durable.pruneFile(store.file, age.value)).pipe(Effect.mapError(runsFailure))
        for (const line of lines) yield* print(line)
        return
      }
      yield* withRuns(args.state, settings, ({ runs }) =>
        Effect.gen(function* () {
          const gone = yield* runs.prune({ olderThan: age.value }).pipe(Effect.mapError(runsFailure))
          yield* print(`pruned ${gone} run(s) that ended more than ${Duration.format(age.value)} ago`)
        }))
    })
).pipe(Command.withDescription("delete the records of runs that ended long ago (beside a running server too)"))

export const runs = Command.make("runs").pipe(
  Command.withDescription("durable runs (SQLite file or Postgres): list, show, resume, cancel, prune"),
  Command.withSubcommands([list, show, resume, cancel, prune])
)

/** What the command line check knows of `runs`: every subcommand's options. */
export const runsUsage: Usage.Usage = [Command.getUsage(list), Command.getUsage(show), Command.getUsage(resume), Command.getUsage(cancel), Command.getUsage(prune)]
  .reduce((all, usage) => Usage.alternation(all, usage))
