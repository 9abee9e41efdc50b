/**
 * Io: where the commands write and read (standard output, standard error, lines
 * of standard input) and whether colours are allowed. The commands see only this
 * Tag, so tests run them in process and capture what they print; `nodeIo` is the
 * process's own streams.
 *
 * It is not @effect/platform's Terminal: Terminal has no standard error, its
 * `readLine` opens a new readline interface for each line (lines of piped input
 * read ahead are lost) and never ends at the end of input, where `chat` must
 * leave. Console's `log` adds a line break, so streamed text cannot go through it.
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as readline from "node:readline"

/** Where the commands write and read. */
export interface Io {
  /** Writes to standard output as is (no newline added): streamed text goes through here. */
  readonly write: (text: string) => Effect.Effect<void>
  /** Writes a line to standard error. */
  readonly error: (line: string) => Effect.Effect<void>
  /** Shows `prompt` and reads one line of input; None at end of input. */
  readonly readLine: (prompt: string) => Effect.Effect<Option.Option<string>>
  /** Whether standard output may carry ANSI colours (the help): a terminal, and NO_COLOR unset. */
  readonly colors: boolean
  /**
   * Redraws the live status line on standard error (undefined clears it). Present
   * only when standard error is a terminal; without it, progress is plain lines
   * through `error`.
   */
  readonly status?: ((line: string | undefined) => Effect.Effect<void>) | undefined
}

export class CliIo extends Context.Tag("pagantic/CliIo")<CliIo, Io>() {}

/** Standard output and error, and lines of standard input (opened on the first read, closed with the layer). */
export const nodeIo: Layer.Layer<CliIo> = Layer.scoped(
  CliIo,
  Effect.gen(function* () {
    const input = yield* Ref.make<Option.Option<{ readonly rl: readline.Interface; readonly lines: AsyncIterator<string> }>>(
      Option.none()
    )
    yield* Effect.addFinalizer(() => Effect.map(Ref.get(input), Option.map(({ rl }) => rl.close())))
    // a reader that goes away (`pagantic demo | head`) is not a crash: further output is dropped
    const ignoreBrokenPipe = (error: NodeJS.ErrnoException) => {
      if (error.code !== "EPIPE") throw error
    }
    // (for the life of the process: the error can arrive after the last write)
    yield* Effect.sync(() => process.stdout.on("error", ignoreBrokenPipe))
    const lines = Effect.flatMap(Ref.get(input), (open) => {
      if (Option.isSome(open)) return Effect.succeed(open.value.lines)
      const rl = readline.createInterface({ input: process.stdin, terminal: false })
      const lines = rl[Symbol.asyncIterator]()
      return Effect.as(Ref.set(input, Option.some({ rl, lines })), lines)
    })
    const write = (text: string) => Effect.sync(() => void process.stdout.write(text))
    // https://no-color.org: set and not empty means no colours
    const noColor = yield* Effect.orElseSucceed(Config.string("NO_COLOR").pipe(Config.withDefault("")), () => "")
    return CliIo.of({
      write,
      colors: noColor === "" && process.stdout.isTTY === true,
      error: (line) => Effect.sync(() => void process.stderr.write(`${line}\n`)),
      ...(process.stderr.isTTY === true
        ? {
          status: (line: string | undefined) =>
            Effect.sync(() => void process.stderr.write(line === undefined ? "\r\x1b[2K" : `\r\x1b[2K${line}`))
        }
        : {}),
      readLine: (prompt) =>
        Effect.gen(function* () {
          yield* write(prompt)
          const next = yield* Effect.flatMap(lines, (it) => Effect.promise(() => it.next()))
          return next.done === true ? Option.none() : Option.some(next.value)
        })
    })
  })
)
