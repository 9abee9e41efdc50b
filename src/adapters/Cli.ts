/**
 * The command-line adapter: `pagantic chat | extract | vote | plan | task | query | demo | serve`,
 * the durable runs' `migrate | runs | thread | respond` (their durable layer
 * is loaded only when one of them runs: `cli/RunsState.ts`), and `trace show`
 * (the runs page of a trace file, as one HTML file).
 *
 * A thin shell: each command decodes its flags and arguments into a
 * SystemRequest, runs it through the facade (`PaganticSystem`) and prints the
 * SystemResponse. Prompt building, tool execution, validation and voting happen
 * behind the facade, never here. What the commands need from outside is injected:
 * `CliIo` (stdout, stderr, stdin lines) and `CliEngine` (the engine for a `--model`
 * / `--threads` choice; the facade is composed around it with `Live.layer`), so
 * tests run the handlers in process on a ScriptedEngine and capture what they print.
 *
 * Bad input is one line on stderr (printed by `run`) and exit code 1 at the edge:
 * a `CliFailure` (an empty message, a schema or plan file that is not readable,
 * too large, not JSON or not a schema/plan, a model that cannot load, a response
 * that carries a SystemError) or @effect/cli's ValidationError (a flag value out of
 * range). The command line is checked before @effect/cli parses it
 * (`checkCommandLine`), so an unknown option or command is named as such. Help is
 * plain text unless standard output is a terminal and NO_COLOR is unset.
 *
 * The parts live in `cli/`: Io, Input (decoding), Output (printing), Wiring (the
 * engine and the facade), CommandLine (the pre-parse), Flags, and one module per
 * command in `cli/commands/`.
 */
import * as Command from "@effect/cli/Command"
import type * as ValidationError from "@effect/cli/ValidationError"
import * as Effect from "effect/Effect"
import * as Text from "../domain/Text.js"
import { CliFailure, fail } from "./cli/CliFailure.js"
import { checker } from "./cli/CommandLine.js"
import { chat } from "./cli/commands/Chat.js"
import { demo } from "./cli/commands/Demo.js"
import { extract } from "./cli/commands/Extract.js"
import { migrate } from "./cli/commands/Migrate.js"
import { plan } from "./cli/commands/Plan.js"
import { query } from "./cli/commands/Query.js"
import { respond } from "./cli/commands/Respond.js"
import { runs, runsUsage } from "./cli/commands/Runs.js"
import { serve } from "./cli/commands/Serve.js"
import { task } from "./cli/commands/Task.js"
import { thread, threadUsage } from "./cli/commands/Thread.js"
import { keys, keysUsage } from "./cli/commands/Keys.js"
import { trace, traceUsage } from "./cli/commands/Trace.js"
import { vote } from "./cli/commands/Vote.js"
import { root } from "./cli/Flags.js"
import { CliIo } from "./cli/Io.js"
import { failureMessage, oneLine, throughIo } from "./cli/Output.js"

export { CliFailure } from "./cli/CliFailure.js"
export { demoPlan } from "./cli/commands/DemoData.js"
export { type ServeFlags, serveOptions } from "./cli/commands/Serve.js"
export { CliIo, type Io, nodeIo } from "./cli/Io.js"
export { formatUsage } from "./cli/Output.js"
export { CliEngine, type Engines, type EngineSettings, llamaEngine } from "./cli/Wiring.js"
export { CliRuns } from "./cli/RunsState.js"

// ---------------------------------------------------------------------------
// The application
// ---------------------------------------------------------------------------

/** The `pagantic` command and its subcommands, for embedding or testing. */
export const command = root.pipe(
  Command.withSubcommands([chat, extract, vote, plan, task, query, demo, serve, migrate, runs, thread, respond, trace, keys])
)

const cli = Command.run(command, { name: "pagantic", version: "0.1.0" })

/**
 * What is wrong with a command line (the arguments after the executable) that
 * @effect/cli would misreport: an unknown option (it says "Invalid subcommand",
 * or takes the option as the message), an unknown command, an option without its
 * value, a value that is not a number or not one of the choices. Undefined when
 * none of these; anything else is left to @effect/cli. After `--` every word is text.
 */
export const checkCommandLine: (args: ReadonlyArray<string>) => string | undefined = checker(
  Command.getUsage(root),
  {
    chat: Command.getUsage(chat),
    extract: Command.getUsage(extract),
    vote: Command.getUsage(vote),
    plan: Command.getUsage(plan),
    task: Command.getUsage(task),
    query: Command.getUsage(query),
    demo: Command.getUsage(demo),
    serve: Command.getUsage(serve),
    migrate: Command.getUsage(migrate),
    runs: runsUsage,
    thread: threadUsage,
    respond: Command.getUsage(respond),
    trace: traceUsage,
    keys: keysUsage
  },
  new Set(["chat", "extract", "vote", "task"])
)

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/**
 * Runs the CLI on `process.argv`-style arguments. Every failure is printed on
 * stderr as one line (`error: ...`) before the effect fails with it: a CliFailure,
 * a ValidationError of @effect/cli, or a defect (as a CliFailure: an unexpected
 * failure, without its stack). `--n` is accepted for vote's `-n` (@effect/cli
 * spells one-letter options with one dash).
 */
export const run = (argv: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    const end = argv.includes("--") ? argv.indexOf("--") : argv.length
    const args = argv.map((arg, i) => (arg === "--n" && i < end ? "-n" : arg))
    const problem = checkCommandLine(args.slice(2))
    if (problem !== undefined) return yield* fail(problem)
    // the wizard's prompts are drawn with ANSI escapes, whatever NO_COLOR says
    if (!io.colors && args.slice(2, end).some((word) => word.toLowerCase() === "--wizard")) {
      return yield* fail("--wizard needs a terminal that allows colours (standard output a terminal, NO_COLOR unset)")
    }
    return yield* cli(args).pipe(throughIo(io))
  }).pipe(
    Effect.catchAllDefect((defect) =>
      Effect.fail(new CliFailure({ message: `unexpected failure: ${Text.messageOf(defect)}` }))
    ),
    Effect.tapError((error) => Effect.flatMap(CliIo, (io) => io.error(`error: ${oneLine(failureMessage(error))}`)))
  )

/** What `run` fails with (already printed on standard error). */
export type RunError = CliFailure | ValidationError.ValidationError
