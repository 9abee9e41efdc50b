/**
 * CliFailure: why a command did not do its job, as one line for the user: bad
 * input, a model that does not load, or a response that carries an error. `run`
 * prints it on standard error; the exit code at the edge is 1.
 */
import type * as ConfigError from "effect/ConfigError"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type { InferenceFailure } from "../../domain/Failure.js"

/** Bad input, a model that does not load, or a response that carries an error. */
export class CliFailure extends Data.TaggedError("CliFailure")<{ readonly message: string }> {}

/** Fails the command with this message. */
export const fail = (message: string) => Effect.fail(new CliFailure({ message }))

/** An engine that could not be built (a model that does not load, a bad configuration). */
export const fromLayerFailure = (error: InferenceFailure | ConfigError.ConfigError): CliFailure =>
  new CliFailure({
    message: error._tag === "InferenceFailure" ? `${error.code}: ${error.message}` : `invalid configuration: ${String(error)}`
  })
