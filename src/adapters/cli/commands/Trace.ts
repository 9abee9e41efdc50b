/**
 * `pagantic trace show FILE [--output PAGE.html]`: the runs page of `pagantic
 * serve` made from a trace file, as one self-contained HTML file (its style,
 * script and data inline, no network access) to open in any browser or attach
 * to a bug report.
 *
 * A trace file is what the EventLog recorded, as JSON: the body of
 * `GET /v1/events`, or JSON lines as the page's "Download trace" writes them
 * (see `http/PageTrace.ts`). The output defaults to FILE with `.html` for its
 * extension.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Usage from "@effect/cli/Usage"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as path from "node:path"
import { traceHtml } from "../../http/Page.js"
import { parseTrace } from "../../http/PageTrace.js"
import { CliFailure, fail } from "../CliFailure.js"
import { textFlag } from "../Flags.js"
import { readText } from "../Input.js"
import { print } from "../Output.js"

/** The largest trace file read. */
export const MAX_TRACE_BYTES = 64 * 1024 * 1024

/** Where the page goes when `--output` is not given: FILE with `.html` for its extension. */
export const defaultOutput = (file: string): string => {
  const ext = path.extname(file)
  const html = `${ext === "" ? file : file.slice(0, -ext.length)}.html`
  return html === file ? `${file}.html` : html
}

const show = Command.make(
  "show",
  {
    file: Args.text({ name: "file" }).pipe(Args.withDescription("a trace: the JSON of GET /v1/events, or JSON lines of events and runs")),
    output: textFlag("output").pipe(
      Options.withAlias("o"),
      Options.withPseudoName("page.html"),
      Options.withDescription("where to write the page (default: FILE with .html)"),
      Options.optional
    )
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* readText(args.file, "the trace file", MAX_TRACE_BYTES)
      const trace = parseTrace(text)
      if (Either.isLeft(trace)) {
        return yield* fail(`the trace file ${args.file} is not a trace: ${trace.left.where}: ${trace.left.message}`)
      }
      const output = Option.getOrElse(args.output, () => defaultOutput(args.file))
      if (path.resolve(output) === path.resolve(args.file)) return yield* fail(`--output ${output} is the trace file itself`)
      const fs = yield* FileSystem.FileSystem
      yield* fs.writeFileString(output, traceHtml(trace.right, `pagantic trace: ${path.basename(args.file)}`)).pipe(
        Effect.mapError((e) => new CliFailure({ message: `cannot write ${output}: ${e.message}` }))
      )
      yield* print(`wrote ${output} (${trace.right.events.length} events, ${trace.right.runs.length} runs): open it in a browser`)
    })
).pipe(Command.withDescription("write the runs page of a trace file as one self-contained HTML file"))

export const trace = Command.make("trace").pipe(
  Command.withDescription("look at a recorded trace: show"),
  Command.withSubcommands([show])
)

/** What the command line check knows of `trace`: its subcommand's options. */
export const traceUsage: Usage.Usage = Command.getUsage(show)
