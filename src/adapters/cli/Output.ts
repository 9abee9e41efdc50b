/**
 * Output: what the commands print. A response for people (streamed chat text,
 * tool calls on their own lines, usage) or, with `--json`, the encoded
 * SystemResponse; a failure as one plain line (no escapes, no line breaks,
 * bounded); @effect/cli's help through the Io, without colours unless allowed.
 */
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as ValidationError from "@effect/cli/ValidationError"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { type SystemRequest, SystemResponse } from "../../domain/System.js"
import * as Text from "../../domain/Text.js"
import type * as TokenUsage from "../../domain/TokenUsage.js"
import type * as Facade from "../../programs/Facade.js"
import { CliFailure, fail } from "./CliFailure.js"
import { CliIo, type Io } from "./Io.js"
import { runRequest } from "./Wiring.js"

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/** Writes a line to standard output. */
export const print = (line = "") => Effect.flatMap(CliIo, (io) => io.write(`${line}\n`))

export const json = (value: unknown) => JSON.stringify(value)

export const formatUsage = (usage: TokenUsage.TokenUsage): string =>
  `${usage.calls} inference(s), ${usage.promptTokens} prompt + ${usage.outputTokens} output tokens` +
  (usage.tokensPerSecond > 0 ? `, ${usage.tokensPerSecond.toFixed(0)} tokens/s` : "")

export const seconds = (ms: number) => `${(ms / 1000).toFixed(2)}s`

/** A vote's confidence, two decimals. */
export const confidence = (response: SystemResponse) => response.confidence?.toFixed(2) ?? "n/a"

/** A response's error as a failure of the command (after printing its partial output). */
export const failOnError = (response: SystemResponse) =>
  response.error === undefined ? Effect.void : fail(`${response.error.code}: ${response.error.message}`)

/**
 * Runs a request and prints its response: `show` for people, or with `--json` the
 * encoded SystemResponse. A response that carries an error fails the command.
 */
export const respond = <R>(
  request: SystemRequest,
  asJson: boolean,
  show: (response: SystemResponse) => Effect.Effect<void, never, R>,
  options?: Facade.RunOptions
) =>
  Effect.gen(function* () {
    const response = yield* runRequest(request, asJson ? undefined : options)
    // a response the facade built always encodes: a failure here is a bug
    if (asJson) yield* print(JSON.stringify(yield* Effect.orDie(Schema.encode(SystemResponse)(response)), null, 2))
    else yield* show(response)
    yield* failOnError(response)
    return response
  })

/** Streams a chat request's progress: text as it comes, tool calls and results on their own lines. */
export const streamProgress = (io: Io): Facade.RunOptions => {
  let midLine = false
  const line = (text: string) => io.write(`${midLine ? "\n" : ""}${text}\n`).pipe(Effect.tap(() => (midLine = false)))
  return {
    onProgress: (progress) => {
      switch (progress._tag) {
        case "TextDelta":
          midLine = progress.text.length > 0 && !progress.text.endsWith("\n")
          return io.write(progress.text)
        case "ToolCallRequested":
          return line(`[tool call] ${progress.call.name}(${json(progress.call.arguments)})`)
        case "ToolResultReady":
          return line(`[tool result] ${progress.record.result}${progress.record.isError ? " (error)" : ""}`)
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Failures and help
// ---------------------------------------------------------------------------

const ANSI_ESCAPE = /\x1b\[[0-9;]*[A-Za-z]/g

/** A message as one line on a terminal: no escapes, no line breaks, no control characters, bounded. */
export const oneLine = (message: string): string => {
  const flat = message.replace(ANSI_ESCAPE, "").replace(/\s*[\r\n]+\s*/g, " ").replace(/[\x00-\x1f\x7f]/g, "?").trim()
  return flat.length > 1000 ? `${flat.slice(0, 1000)}…` : flat
}

/** What a ValidationError says, as plain text (its help document, without colours). */
const validationMessage = (error: ValidationError.ValidationError): string => {
  const text = oneLine(HelpDoc.toAnsiText(error.error)).replace(/^Expected to find option: '(.*)'$/, "missing option $1")
  return text.length > 0 ? text : `invalid command line (${error._tag})`
}

/** What a failure of `run` says (whatever reaches here: @effect/cli's prompts fail with errors of their own). */
export const failureMessage = (error: unknown): string =>
  error instanceof CliFailure
    ? error.message
    : ValidationError.isValidationError(error)
    ? validationMessage(error)
    : `unexpected failure: ${Text.messageOf(error)}`

/**
 * @effect/cli prints through the Console: the help and version go to `io.write`,
 * without colours unless `io.colors`; its error messages are dropped, since `run`
 * prints every failure itself, on one line.
 */
export const throughIo = (io: Io) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Console.consoleWith((base) =>
    Console.withConsole(self, {
      ...base,
      log: (...args: ReadonlyArray<unknown>) => {
        const text = `${args.map(String).join(" ")}\n`
        return io.write(io.colors ? text : text.replace(ANSI_ESCAPE, ""))
      },
      error: () => Effect.void
    })
  )
