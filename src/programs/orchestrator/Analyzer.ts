/**
 * The analyzer: a model that breaks a request into a TaskList.
 *
 * Its system instruction is rendered from the AnalyzerConfig: the base
 * instruction, then on the next line the format instructions (the parser's, when
 * none are given), then, when there are considerations, a `Consider:` line and
 * one `- consideration` line each. The user message carries the request, the
 * context (compact JSON, when not empty) and the names of the processors.
 *
 * With a structured parser (JSON) the reply is requested through Structured.run
 * under the TaskList schema whose `processor` is an enum of the registered names,
 * so engines that constrain decoding cannot write anything else, and a rejected
 * reply is re-asked with what was wrong. With `quoted` processors, their tasks'
 * descriptions are held to the passages the request quotes (copied exactly). With a text parser (XML) the reply is
 * parsed, and a reply that does not parse, or names a processor that is not
 * registered, is answered with the failure and asked again, at most `attempts`
 * times in all; the last failure is the analysis' failure.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Schedule from "effect/Schedule"
import { ConstraintFailure } from "../../domain/Failure.js"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as Message from "../../domain/Message.js"
import * as Task from "../../domain/Task.js"
import * as Text from "../../domain/Text.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import type { Constraint } from "../../services/Constraint.js"
import { Engine, InferenceRequest } from "../../services/Engine.js"
import * as RetryPolicy from "../../services/RetryPolicy.js"
import * as Structured from "../Structured.js"
import type { TaskParser } from "./TaskParser.js"
import * as Observed from "../internal/Observed.js"

export interface AnalyzerConfig {
  /** Default `defaultBaseInstruction`. */
  readonly baseInstruction?: string | undefined
  /** Default: the parser's format instructions. */
  readonly formatInstructions?: string | undefined
  readonly considerations?: ReadonlyArray<string> | undefined
  /** Replies asked for at most, with a text parser. Default 3. */
  readonly attempts?: number | undefined
  /** With a structured parser: when a rejected reply is re-asked. Default Structured's policy. */
  readonly retry?: Schedule.Schedule<unknown> | undefined
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  /**
   * Processors whose tasks take a passage the request quotes as it is: with a
   * structured parser, such a task's description is one of the request's quoted
   * passages (`quotedPassages`), held to that by the schema, so an engine that
   * constrains decoding copies the passage exactly. A request that quotes
   * nothing, or more than `maxQuotedPassages` passages or `maxQuotedChars`
   * characters of them, is analyzed without it.
   * Default none.
   */
  readonly quoted?: ReadonlyArray<string> | undefined
}

/** Passages a grounded schema lists at most (each is an alternative of the grammar). */
export const maxQuotedPassages = 64

/** Longest passage, in characters, a grounded schema lists; a longer one is left out. */
export const maxQuotedPassageChars = 2_000

/**
 * The passages' characters a grounded schema lists at most in all: far inside the
 * size bound of a schema a grammar is made from (`Gbnf.defaultSchemaLimits`, 64 KiB).
 */
export const maxQuotedChars = 16_000

const quotePairs: ReadonlyArray<readonly [string, string]> = [["\"", "\""], ["\u201c", "\u201d"]]

/**
 * The passages a request quotes, in order, each once: the text between straight
 * double quotes or between curly ones (“...”), trimmed, not empty, at most
 * `maxQuotedPassageChars` long.
 */
export const quotedPassages = (request: string): ReadonlyArray<string> => {
  const found: Array<{ readonly at: number; readonly text: string }> = []
  for (const [open, close] of quotePairs) {
    let from = 0
    while (true) {
      const start = request.indexOf(open, from)
      if (start < 0) break
      const end = request.indexOf(close, start + 1)
      if (end < 0) break
      const text = request.slice(start + 1, end).trim()
      if (text !== "" && text.length <= maxQuotedPassageChars) found.push({ at: start, text })
      from = end + 1
    }
  }
  found.sort((a, b) => a.at - b.at)
  return Array.from(new Set(found.map((f) => f.text)))
}

/** The grounding of a request's analysis under `config` (see `AnalyzerConfig.quoted`), if any. */
export const groundingFor = (task: string, config: AnalyzerConfig): Task.Grounding | undefined => {
  if (config.quoted === undefined || config.quoted.length === 0) return undefined
  const passages = quotedPassages(task)
  const chars = passages.reduce((n, p) => n + p.length, 0)
  return passages.length === 0 || passages.length > maxQuotedPassages || chars > maxQuotedChars
    ? undefined
    : { processors: config.quoted, passages }
}

export const defaultBaseInstruction =
  "Analyze the given task and break it down into well-defined subtasks, each handled by one of the processors."

export const defaultAttempts = 3

/** The analyzer's system instruction (see the module header). */
export const renderInstruction = (config: AnalyzerConfig, parser: TaskParser): string => {
  let instruction = config.baseInstruction ?? defaultBaseInstruction
  const format = config.formatInstructions ?? parser.formatInstructions
  if (format !== "") instruction += "\n" + format
  const considerations = config.considerations ?? []
  if (considerations.length > 0) instruction += "\nConsider:\n" + considerations.map((c) => `- ${c}\n`).join("")
  return instruction
}

/** The user message: the request, the context, the processors. */
export const renderRequest = (
  task: string,
  context: Readonly<Record<string, unknown>>,
  processors: ReadonlyArray<string>
): string =>
  [
    `task: ${task}`,
    ...(Object.keys(context).length === 0 ? [] : [`context: ${JSON.stringify(Text.bounded(context))}`]),
    `processors: ${processors.join(", ")}`
  ].join("\n")

/** What the analysis produced. */
export interface Analysis {
  readonly list: Task.TaskList
  /** Replies asked for. */
  readonly attempts: number
  /** The tokens every reply used, rejected ones included. */
  readonly usage: TokenUsage.TokenUsage
}

/** Asks the analyzer for the task list. Requires Engine (and Constraint for a structured parser). */
export const analyze = (
  task: string,
  context: Readonly<Record<string, unknown>>,
  options: {
    readonly config: AnalyzerConfig
    readonly parser: TaskParser
    readonly processors: readonly [string, ...Array<string>]
  }
): Effect.Effect<Analysis, InferenceFailure | ConstraintFailure, Engine | Constraint> => {
  const { config, parser, processors } = options
  const messages = [
    Message.system(renderInstruction(config, parser)),
    Message.user(renderRequest(task, context, processors))
  ]
  return parser.structured
    ? Effect.map(
      Structured.run<Task.TaskList, never>(messages, {
        schema: Task.taskListFor(processors, groundingFor(task, config)),
        ...(config.retry === undefined ? {} : { retry: config.retry }),
        ...(config.maxTokens === undefined ? {} : { maxTokens: config.maxTokens }),
        ...(config.temperature === undefined ? {} : { temperature: config.temperature })
      }),
      (result) => ({ list: result.value, attempts: result.attempts, usage: result.usage })
    )
    : analyzeText(messages, parser, processors, config)
}

const analyzeText = Observed.fn("Orchestrator.analyzeText")(function* (
  messages: ReadonlyArray<Message.Message>,
  parser: TaskParser,
  processors: ReadonlyArray<string>,
  config: AnalyzerConfig
) {
  const engine = yield* Engine
  const attempts = Math.max(1, config.attempts ?? defaultAttempts)
  let conversation = messages
  let usage = TokenUsage.empty
  let last: ConstraintFailure | undefined
  for (let attempt = 1; attempt <= attempts; attempt++) {
    const reply = yield* Effect.retry(
      engine.infer(
        new InferenceRequest({
          messages: conversation,
          maxTokens: config.maxTokens ?? Structured.defaultMaxTokens,
          temperature: config.temperature ?? Structured.defaultTemperature
        })
      ),
      { schedule: RetryPolicy.inference, while: (f: InferenceFailure) => f.retryable }
    )
    usage = TokenUsage.combine(usage, reply.usage)
    const parsed = Either.flatMap(parser.parse(reply.content), (list) => checkProcessors(list, processors, reply.content))
    if (Either.isRight(parsed)) return { list: parsed.right, attempts: attempt, usage } satisfies Analysis
    last = parsed.left
    conversation = [...conversation, Message.assistant(reply.content), Message.user(correction(parsed.left))]
  }
  return yield* Effect.fail(last ?? ConstraintFailure.schemaInvalid("the analyzer gave no task list"))
})

/** Every task's processor is registered, else a retryable CONSTRAINT_ENUM_UNRECOGNIZED naming the registered ones. */
export const checkProcessors = (
  list: Task.TaskList,
  processors: ReadonlyArray<string>,
  raw: string
): Either.Either<Task.TaskList, ConstraintFailure> => {
  const known = new Set(processors)
  const unknown = list.tasks.filter((t) => !known.has(t.processor))
  if (unknown.length === 0) return Either.right(list)
  return Either.left(
    ConstraintFailure.enumUnrecognized(
      `unknown processor ${unknown.slice(0, 5).map((t) => `"${t.processor}" (task "${t.id}")`).join(", ")}${
        unknown.length > 5 ? ` and ${unknown.length - 5} more` : ""
      }; the processors are ${processors.join(", ")}`,
      {
        raw,
        violations: unknown.slice(0, 50).map((t) => `task "${t.id}": processor must be one of ${processors.join(", ")}`),
        details: { processors }
      }
    )
  )
}

/** What the analyzer is told after a rejected reply. */
export const correction = (failure: ConstraintFailure): string =>
  [
    `Your previous reply was rejected (${failure.code}): ${failure.message}.`,
    ...failure.violations.filter((v) => v !== failure.message).map((v) => `- ${v}`),
    "Reply again with the corrected task list."
  ].join("\n")
