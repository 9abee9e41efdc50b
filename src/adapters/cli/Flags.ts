/**
 * Flags: the options the commands share, and the root command that carries the
 * global ones (`--model`, `--threads`). A value out of range or an empty text is
 * refused by @effect/cli with a message naming the flag as the user typed it.
 */
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"

/** An integer option whose value outside `min..max` is refused with a message naming the flag. */
export const integerIn = (name: string, min: number, max?: number) =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n >= min && (max === undefined || n <= max)
        ? Effect.succeed(n)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(
          `${name.length === 1 ? "-" : "--"}${name} must be ${max === undefined ? `at least ${min}` : `from ${min} to ${max}`}, got ${n}`
        )))
    )
  )

/** A text option whose empty (or blank) value is refused: an empty path or prompt is a mistake. */
export const textFlag = (name: string) =>
  Options.text(name).pipe(
    Options.mapEffect((text) =>
      text.trim().length > 0 ? Effect.succeed(text) : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} is empty`)))
    )
  )

export const maxTokensOption = integerIn("max-tokens", 1).pipe(
  Options.withDescription("tokens per inference"),
  Options.optional
)

export const systemOption = textFlag("system").pipe(Options.withDescription("a system prompt"), Options.optional)

export const jsonOption = Options.boolean("json").pipe(
  Options.withDescription("print the SystemResponse as JSON instead (no streaming)")
)

export const schemaOption = textFlag("schema").pipe(
  Options.withPseudoName("file.json | json"),
  Options.withDescription("the output's JSON schema: a .json file or inline JSON")
)

/** `--model` and `--threads`: accepted before the command and after it. */
export const globalOptions = {
  model: textFlag("model").pipe(
    Options.withPseudoName("file.gguf"),
    Options.withDescription("a GGUF model file (default: the bundled model, or PAGANTIC_MODEL_PATH)"),
    Options.optional
  ),
  threads: integerIn("threads", 1, 1024).pipe(
    Options.withDescription("CPU threads for llama.cpp (default 1, or PAGANTIC_THREADS)"),
    Options.optional
  )
}

export type GlobalOptions = { readonly model: Option.Option<string>; readonly threads: Option.Option<number> }

/** `pagantic` itself, with the global options; the commands are its subcommands. */
export const root = Command.make("pagantic", globalOptions).pipe(
  Command.withDescription("Deterministic control loops around LLM inference")
)
