/**
 * TaskParser: how an analyzer's reply becomes a TaskList.
 *
 * A parser says how the analyzer is asked (`formatInstructions`, appended to its
 * prompt) and reads the reply text. A parse failure is a retryable
 * ConstraintFailure that says what was wrong, so the orchestrator can re-prompt
 * the analyzer with it. Two ship here: `json` (the default: the analyzer's reply
 * is requested as schema-constrained JSON through Structured.run, with the
 * processor names as an enum; `parse` reads such JSON from any text) and the XML
 * parser (XmlTaskParser.ts). A reply longer than the parser's bound is refused
 * before it is parsed: the text comes from a model or from a client.
 */
import * as Either from "effect/Either"
import { ConstraintFailure } from "../../domain/Failure.js"
import * as Json from "../../domain/Json.js"
import * as Text from "../../domain/Text.js"
import { TaskList } from "../../domain/Task.js"

/** Reads an analyzer's reply. */
export interface TaskParser {
  /** "json", "xml" or a custom name: in events and metadata. */
  readonly name: string
  /**
   * True: the analyzer's reply is requested as JSON under the TaskList schema
   * (decoding constrained where the engine can), and decoded by it. False: the
   * reply is free text handed to `parse`.
   */
  readonly structured: boolean
  /** Appended to the analyzer's instruction: how the tasks must be written. */
  readonly formatInstructions: string
  readonly parse: (raw: string) => Either.Either<TaskList, ConstraintFailure>
}

/** Longest reply a parser reads by default, in characters. */
export const defaultMaxInputChars = 64_000

/** A reply over `max` characters, refused before parsing (retryable: a shorter reply may come). */
export const checkSize = (raw: string, max: number): Either.Either<string, ConstraintFailure> =>
  raw.length <= max
    ? Either.right(raw)
    : Either.left(
      ConstraintFailure.schemaInvalid(`the task list is ${raw.length} characters, more than the ${max} allowed`, {
        raw: Text.excerpt(raw, 200),
        violations: [`reply: at most ${max} characters`],
        details: { reason: "tooLarge", length: raw.length, maxInputChars: max }
      })
    )

export const jsonFormatInstructions = [
  "Reply with one compact JSON object and nothing else:",
  `{"analysis":"<why the work is split so>","tasks":[{"id":"t1","type":"<kind of work>","processor":"<one of the processors>","priority":1,"dependencies":[],"description":"<what to do>","metadata":{}}]}`,
  "Every task has all seven fields in this order. Lower priority runs first; dependencies are ids of other tasks in the list; metadata values are strings."
].join("\n")

/** The JSON parser (the default). */
export const json = (options: { readonly maxInputChars?: number | undefined } = {}): TaskParser => {
  const max = options.maxInputChars ?? defaultMaxInputChars
  return {
    name: "json",
    structured: true,
    formatInstructions: jsonFormatInstructions,
    parse: (raw) =>
      Either.flatMap(checkSize(raw, max), (text) =>
        Json.decodeJsonAs(TaskList, stripFence(text), {
          notJson: "the task list is not JSON",
          wrongShape: "the task list does not match the TaskList schema"
        }))
  }
}

/** The text inside a Markdown code fence, when the whole reply is one. */
const stripFence = (text: string): string => {
  const fenced = /^\s*```[a-zA-Z]*\s*\n([\s\S]*?)\n?\s*```\s*$/.exec(text)
  return fenced?.[1] ?? text
}
