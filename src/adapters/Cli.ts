/**
 * The command-line adapter: `pagantic chat | extract | vote | plan | demo`.
 *
 * A thin shell (seed 02): each command decodes its flags and arguments into a
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
 */
import * as Args from "@effect/cli/Args"
import * as AutoCorrect from "@effect/cli/AutoCorrect"
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import type * as Usage from "@effect/cli/Usage"
import * as ValidationError from "@effect/cli/ValidationError"
import * as FileSystem from "@effect/platform/FileSystem"
import type * as PlatformError from "@effect/platform/Error"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as path from "node:path"
import * as readline from "node:readline"
import * as Issues from "../domain/Issues.js"
import type { InferenceFailure } from "../domain/Failure.js"
import { JsonSchema } from "../domain/JsonSchema.js"
import { ExecutionPlan } from "../domain/Plan.js"
import { SystemRequest, SystemResponse } from "../domain/System.js"
import type * as TokenUsage from "../domain/TokenUsage.js"
import * as LlamaEngine from "../layers/LlamaEngine.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../layers/llama/PaganticChatWrapper.js"
import * as Calculator from "../layers/tools/Calculator.js"
import type * as Facade from "../programs/Facade.js"
import { PaganticSystem } from "../programs/Facade.js"
import { Engine } from "../services/Engine.js"
import type { InferenceResult } from "../services/Engine.js"
import type * as Tool from "../services/ToolRegistry.js"
import * as Http from "./Http.js"
import * as Live from "./Live.js"

// ---------------------------------------------------------------------------
// What the commands need from outside
// ---------------------------------------------------------------------------

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
}

export class CliIo extends Context.Tag("pagantic/CliIo")<CliIo, Io>() {}

/** The engine choice made on the command line. */
export interface EngineSettings {
  readonly model?: string
  readonly threads?: number
}

/** The engine for an `--model` / `--threads` choice. */
export interface Engines {
  readonly make: (settings: EngineSettings) => Layer.Layer<Engine, InferenceFailure | ConfigError.ConfigError>
}

/** Builds the engine a command runs on (llama.cpp at the edge, a scripted one in tests). */
export class CliEngine extends Context.Tag("pagantic/CliEngine")<CliEngine, Engines>() {}

/** The llama.cpp engine: `--model` / `--threads` override the environment's configuration. */
export const llamaEngine: Layer.Layer<CliEngine> = Layer.succeed(CliEngine, {
  make: (settings) =>
    LlamaEngine.layerConfig({
      ...(settings.model === undefined ? {} : { modelPath: settings.model }),
      ...(settings.threads === undefined ? {} : { threads: settings.threads })
    })
})

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
      readLine: (prompt) =>
        Effect.gen(function* () {
          yield* write(prompt)
          const next = yield* Effect.flatMap(lines, (it) => Effect.promise(() => it.next()))
          return next.done === true ? Option.none() : Option.some(next.value)
        })
    })
  })
)

// ---------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------

/** Bad input, a model that does not load, or a response that carries an error. */
export class CliFailure extends Data.TaggedError("CliFailure")<{ readonly message: string }> {}

const fail = (message: string) => Effect.fail(new CliFailure({ message }))

const fromLayerFailure = (error: InferenceFailure | ConfigError.ConfigError): CliFailure =>
  new CliFailure({
    message: error._tag === "InferenceFailure" ? `${error.code}: ${error.message}` : `invalid configuration: ${String(error)}`
  })

// ---------------------------------------------------------------------------
// Decoding input
// ---------------------------------------------------------------------------

/** The largest schema or plan file read (as the HTTP adapter's default body limit). */
const MAX_FILE_BYTES = 1024 * 1024

/** The deepest nesting of objects and arrays accepted in a schema or plan. */
const MAX_JSON_DEPTH = 64

/** Nesting depth of a parsed JSON value, counted without recursion (stops past `limit`). */
const depthOf = (value: unknown, limit: number): number => {
  let deepest = 0
  const stack: Array<readonly [unknown, number]> = [[value, 0]]
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!
    if (typeof v !== "object" || v === null) continue
    deepest = Math.max(deepest, depth + 1)
    if (deepest > limit) return deepest
    for (const child of Object.values(v)) stack.push([child, depth + 1])
  }
  return deepest
}

const parseJson = (text: string, what: string) =>
  Effect.gen(function* () {
    if (text.trim().length === 0) return yield* fail(`${what} is empty`)
    const json = yield* Effect.try({
      try: () => JSON.parse(text) as unknown,
      catch: (e) => new CliFailure({ message: `${what} is not JSON: ${e instanceof Error ? e.message : String(e)}` })
    })
    if (depthOf(json, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
      return yield* fail(`${what} is nested too deeply (more than ${MAX_JSON_DEPTH} levels of objects and arrays)`)
    }
    return json
  })

const unreadable = (what: string, file: string) => (e: PlatformError.PlatformError) =>
  new CliFailure({
    message: e._tag === "SystemError" && e.reason === "NotFound"
      ? `cannot read ${what} ${file}: no such file`
      : e._tag === "SystemError" && e.reason === "PermissionDenied"
      ? `cannot read ${what} ${file}: permission denied`
      : `cannot read ${what} ${file}: ${e.message}`
  })

/**
 * A schema or plan file as UTF-8 text: at most MAX_FILE_BYTES are read, so a huge
 * file or a device (/dev/zero) is refused without being read whole; a pipe works.
 */
const readText = (file: string, what: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    if (file.length === 0) return yield* fail(`${what} is an empty path`)
    const info = yield* fs.stat(file).pipe(Effect.mapError(unreadable(what, file)))
    if (info.type === "Directory") return yield* fail(`cannot read ${what} ${file}: it is a directory`)
    const chunks = yield* fs.stream(file, { bytesToRead: MAX_FILE_BYTES + 1 }).pipe(
      Stream.runCollect,
      Effect.mapError(unreadable(what, file))
    )
    const bytes = Buffer.concat([...chunks])
    if (bytes.length > MAX_FILE_BYTES) return yield* fail(`${what} ${file} is larger than ${MAX_FILE_BYTES / 1024 / 1024} MiB`)
    return yield* Effect.try({
      try: () => new TextDecoder("utf-8", { fatal: true }).decode(bytes),
      catch: () => new CliFailure({ message: `${what} ${file} is not UTF-8 text` })
    })
  })

/** `--schema`: inline JSON (starting with `{` or `[`) or the path of a JSON file. */
const loadSchema = (value: string) =>
  Effect.gen(function* () {
    const inline = /^\s*[{[]/.test(value)
    const what = inline ? "the inline schema" : `the schema file ${value}`
    const json = yield* parseJson(inline ? value : yield* readText(value, "the schema file"), what)
    const decoded = yield* Schema.decodeUnknown(JsonSchema)(json).pipe(
      Effect.mapError((e) => new CliFailure({ message: `${what} is not a schema: ${Issues.describe(e, "a JSON schema object", "the schema").join("; ")}` }))
    )
    if (decoded.type === undefined && decoded.properties === undefined && decoded.enum === undefined) {
      return yield* fail(`${what} is not a schema: it needs a "type", "properties" or "enum"`)
    }
    return json
  })

/** The flag each request field comes from, so that a refused value is named as the user typed it. */
const flagOfField: Record<string, string> = {
  "hints.temperature": "--temperature",
  "hints.maxTokens": "--max-tokens",
  "redundancy.n": "-n",
  "redundancy.quorum": "--quorum",
  "redundancy.voting": "--voting"
}

const nameFlag = (line: string): string => {
  const field = Object.keys(flagOfField).find((f) => line.startsWith(`${f}: `) || line.startsWith(`${f}.`))
  // an absent flag is no alternative the user can act on
  return field === undefined ? line : `${flagOfField[field]}${line.slice(field.length)}`.replace(" | undefined, got", ", got")
}

/** Decodes a wire-form request, so that bad input fails before a model is loaded. */
const decodeRequest = (wire: unknown) =>
  Schema.decodeUnknown(SystemRequest)(wire).pipe(
    Effect.mapError((e) =>
      new CliFailure({ message: `invalid request: ${Issues.describe(e, "a SystemRequest object").map(nameFlag).join("; ")}` })
    )
  )

/** The message of a command: its words joined; none, or only spaces, is refused. */
const messageText = (words: ReadonlyArray<string>) => {
  const text = words.join(" ")
  return text.trim().length === 0 ? fail("the message is empty") : Effect.succeed(text)
}

const messages = (text: string, system: Option.Option<string>) => [
  ...Option.match(system, { onNone: () => [], onSome: (content) => [{ role: "system", content }] }),
  { role: "user", content: text }
]

const hints = (fields: { readonly temperature?: Option.Option<number>; readonly maxTokens?: Option.Option<number> }) => ({
  ...(fields.temperature !== undefined && Option.isSome(fields.temperature) ? { temperature: fields.temperature.value } : {}),
  ...(fields.maxTokens !== undefined && Option.isSome(fields.maxTokens) ? { maxTokens: fields.maxTokens.value } : {})
})

// ---------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------

const print = (line = "") => Effect.flatMap(CliIo, (io) => io.write(`${line}\n`))

const json = (value: unknown) => JSON.stringify(value)

export const formatUsage = (usage: TokenUsage.TokenUsage): string =>
  `${usage.calls} inference(s), ${usage.promptTokens} prompt + ${usage.outputTokens} output tokens` +
  (usage.tokensPerSecond > 0 ? `, ${usage.tokensPerSecond.toFixed(0)} tokens/s` : "")

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)}s`

/** A response's error as a failure of the command (after printing its partial output). */
const failOnError = (response: SystemResponse) =>
  response.error === undefined ? Effect.void : fail(`${response.error.code}: ${response.error.message}`)

const jsonOption = Options.boolean("json").pipe(
  Options.withDescription("print the SystemResponse as JSON instead (no streaming)")
)

/**
 * Runs a request and prints its response: `show` for people, or with `--json` the
 * encoded SystemResponse. A response that carries an error fails the command.
 */
const respond = <R>(
  request: SystemRequest,
  asJson: boolean,
  show: (response: SystemResponse) => Effect.Effect<void, never, R>,
  options?: Facade.RunOptions
) =>
  Effect.gen(function* () {
    const response = yield* runRequest(request, asJson ? undefined : options)
    if (asJson) yield* print(JSON.stringify(Schema.encodeSync(SystemResponse)(response), null, 2))
    else yield* show(response)
    yield* failOnError(response)
  })

/** Streams a chat request's progress: text as it comes, tool calls and results on their own lines. */
const streamProgress = (io: Io): Facade.RunOptions => {
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
// Running a request on the system chosen by the global options
// ---------------------------------------------------------------------------

/** An integer option whose value outside `min..max` is refused with a message naming the flag. */
const integerIn = (name: string, min: number, max?: number) =>
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
const textFlag = (name: string) =>
  Options.text(name).pipe(
    Options.mapEffect((text) =>
      text.trim().length > 0 ? Effect.succeed(text) : Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} is empty`)))
    )
  )

const maxTokensOption = integerIn("max-tokens", 1).pipe(
  Options.withDescription("tokens per inference"),
  Options.optional
)

const systemOption = textFlag("system").pipe(Options.withDescription("a system prompt"), Options.optional)

const globalOptions = {
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

type GlobalOptions = { readonly model: Option.Option<string>; readonly threads: Option.Option<number> }

const root = Command.make("pagantic", globalOptions).pipe(
  Command.withDescription("Deterministic control loops around LLM inference")
)

/** The engine settings: a subcommand's own `--model` / `--threads` win over the ones before it. */
const settingsOf = (own: GlobalOptions) =>
  Effect.map(root, (global): EngineSettings => {
    const model = Option.orElse(own.model, () => global.model)
    const threads = Option.orElse(own.threads, () => global.threads)
    return {
      ...(Option.isSome(model) ? { model: model.value } : {}),
      ...(Option.isSome(threads) ? { threads: threads.value } : {})
    }
  })

/**
 * The raw output of every inference the engine finishes, in order. The response
 * carries a vote's winner and confidence but not the replicas' answers, so the CLI
 * watches the engine to show them (observation only: nothing is changed).
 */
const recordingEngine = (outputs: Ref.Ref<ReadonlyArray<string>>) =>
  Layer.effect(
    Engine,
    Effect.map(Engine, (engine) => {
      const record = (result: InferenceResult) => Ref.update(outputs, (all) => [...all, result.content])
      return Engine.of({
        ...engine,
        infer: (request) => Effect.tap(engine.infer(request), record),
        stream: (request) =>
          Stream.tap(engine.stream(request), (part) => (part._tag === "Finish" ? record(part.result) : Effect.void))
      })
    })
  )

/**
 * Loads the engine for these settings (with its outputs recorded), runs `program`
 * with it, and disposes it. A model that does not load is a CliFailure.
 */
const withEngine = <A, E, R>(
  own: GlobalOptions,
  program: (engine: Layer.Layer<Engine>, outputs: Ref.Ref<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const engines = yield* CliEngine
      const settings = yield* settingsOf(own)
      const outputs = yield* Ref.make<ReadonlyArray<string>>([])
      const engine = yield* Layer.build(Layer.provide(recordingEngine(outputs), engines.make(settings))).pipe(
        Effect.mapError(fromLayerFailure)
      )
      return yield* program(Layer.succeedContext(engine), outputs)
    })
  )

/**
 * Provides the facade (`Live.layer`) over a loaded engine, with the tools this
 * command offers: chat and plans get the calculator; extraction and votes get
 * none, since a structured request with tools first runs a tool phase.
 */
const onSystem =
  (engine: Layer.Layer<Engine>, tools: ReadonlyArray<Tool.Tool<any, any>>) =>
  <A, E, R>(program: Effect.Effect<A, E, R>) =>
    // the engine is already built: composing the facade around it cannot fail
    Effect.provide(program, Layer.orDie(Live.layer({ engine, tools })))

const toolsFor = {
  chat: [Calculator.calculator],
  plan: [Calculator.calculator],
  structured: []
} as const

/** Runs `program` on the facade with `tools`, over the engine chosen by the options. */
const withSystem = <A, E, R>(
  own: GlobalOptions,
  tools: ReadonlyArray<Tool.Tool<any, any>>,
  program: (outputs: Ref.Ref<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) => withEngine(own, (engine, outputs) => onSystem(engine, tools)(program(outputs)))

const runRequest = (request: SystemRequest, options?: Facade.RunOptions) =>
  Effect.flatMap(PaganticSystem, (system) => system.run(request, options))

// ---------------------------------------------------------------------------
// chat
// ---------------------------------------------------------------------------

const chatTurn = (request: SystemRequest) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    const response = yield* runRequest(request, streamProgress(io))
    if (response.error === undefined) {
      yield* print(`\n(${response.stopReason ?? "finish"}; ${formatUsage(response.tokenUsage)})`)
    } else {
      yield* print()
    }
    return response
  })

const repl = (base: Record<string, unknown>) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    yield* print("pagantic chat: one session across turns; /exit or end of input to leave")
    let sessionId: string | undefined = undefined
    for (;;) {
      const line = yield* io.readLine("> ")
      if (Option.isNone(line)) return yield* print()
      if (line.value.trim() === "/exit") return
      const text = line.value.trim()
      if (text.length === 0) continue
      const request: SystemRequest = yield* decodeRequest({
        ...base,
        ...(sessionId === undefined ? {} : { sessionId }),
        messages: [...(sessionId === undefined ? ((base["messages"] as Array<unknown>) ?? []) : []), { role: "user", content: text }]
      })
      const response: SystemResponse = yield* chatTurn(request)
      if (response.error !== undefined) {
        yield* io.error(`${response.error.code}: ${response.error.message}`)
      }
      sessionId = response.sessionId ?? sessionId
    }
  })

const chat = Command.make(
  "chat",
  {
    ...globalOptions,
    system: systemOption,
    temperature: Options.float("temperature").pipe(Options.withDescription("sampling temperature (0..2)"), Options.optional),
    maxTokens: maxTokensOption,
    json: jsonOption,
    prompt: Args.text({ name: "prompt" }).pipe(Args.withDescription("one message; without it, an interactive session"), Args.repeated)
  },
  (args) =>
    Effect.gen(function* () {
      const base = { mode: "chat", hints: hints(args) }
      if (args.prompt.length === 0) {
        const system = Option.map(args.system, (content) => [{ role: "system", content }])
        // check the flags before loading the model
        yield* decodeRequest({ ...base, messages: [{ role: "user", content: "check" }] })
        return yield* withSystem(args, toolsFor.chat, () => repl({ ...base, messages: Option.getOrElse(system, () => []) }))
      }
      const text = yield* messageText(args.prompt)
      const request = yield* decodeRequest({ ...base, messages: messages(text, args.system) })
      yield* withSystem(args, toolsFor.chat, () =>
        args.json ? respond(request, true, () => Effect.void) : Effect.flatMap(chatTurn(request), failOnError))
    })
).pipe(Command.withDescription("chat with the model and its tools (one message, or interactive without one)"))

// ---------------------------------------------------------------------------
// extract
// ---------------------------------------------------------------------------

const schemaOption = textFlag("schema").pipe(
  Options.withPseudoName("file.json | json"),
  Options.withDescription("the output's JSON schema: a .json file or inline JSON")
)

const printStructured = (response: SystemResponse) =>
  Effect.gen(function* () {
    if (response.structuredOutput !== undefined) yield* print(JSON.stringify(response.structuredOutput, null, 2))
    yield* print(`raw: ${response.content}`)
    if (response.validationResult !== undefined && response.validationResult.repairAttempts > 0) {
      yield* print(`repairs: ${response.validationResult.repairAttempts}`)
    }
    yield* print(`usage: ${formatUsage(response.tokenUsage)}`)
  })

const extract = Command.make(
  "extract",
  {
    ...globalOptions,
    schema: schemaOption,
    system: systemOption,
    temperature: Options.float("temperature").pipe(Options.optional),
    maxTokens: maxTokensOption,
    json: jsonOption,
    text: Args.text({ name: "text" }).pipe(Args.withDescription("the text to extract from"), Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      const schema = yield* loadSchema(args.schema)
      const request = yield* decodeRequest({
        mode: "structured",
        messages: messages(text, args.system),
        output: { schema },
        hints: hints(args)
      })
      yield* withSystem(args, toolsFor.structured, () =>
        respond(request, args.json, (response) => (response.error === undefined ? printStructured(response) : Effect.void)))
    })
).pipe(Command.withDescription("structured extraction: the model's answer, constrained and validated by a JSON schema"))

// ---------------------------------------------------------------------------
// vote
// ---------------------------------------------------------------------------

const printVote = (response: SystemResponse, candidates: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    yield* print(`winner: ${json(response.structuredOutput)}`)
    yield* print(`confidence: ${response.confidence?.toFixed(2) ?? "n/a"} (${response.confidenceSource ?? "voting"})`)
    yield* print(`candidates (${candidates.length}):`)
    yield* Effect.forEach(candidates, (c, i) => print(`  ${i + 1}. ${c}`))
    yield* print(`usage: ${formatUsage(response.tokenUsage)}`)
  })

const vote = Command.make(
  "vote",
  {
    ...globalOptions,
    schema: schemaOption,
    n: Options.integer("n").pipe(Options.withDescription("replicas"), Options.withDefault(5)),
    quorum: Options.integer("quorum").pipe(Options.withDescription("valid answers needed (default: a majority of n)"), Options.optional),
    voting: Options.choice("voting", ["majority", "unanimity"]).pipe(Options.withDefault("majority" as const)),
    temperature: Options.float("temperature").pipe(Options.withDescription("sampling temperature"), Options.withDefault(0.8)),
    system: systemOption,
    maxTokens: maxTokensOption,
    json: jsonOption,
    text: Args.text({ name: "text" }).pipe(Args.atLeast(1))
  },
  (args) =>
    Effect.gen(function* () {
      const text = yield* messageText(args.text)
      if (Option.isSome(args.quorum) && args.quorum.value > args.n) {
        return yield* fail(`--quorum ${args.quorum.value} is more than the ${args.n} replicas (-n) that vote`)
      }
      const schema = yield* loadSchema(args.schema)
      const request = yield* decodeRequest({
        mode: "redundant",
        messages: messages(text, args.system),
        output: { schema },
        hints: hints({ temperature: Option.some(args.temperature), maxTokens: args.maxTokens }),
        redundancy: {
          n: args.n,
          voting: args.voting,
          ...(Option.isSome(args.quorum) ? { quorum: args.quorum.value } : {})
        }
      })
      yield* withSystem(args, toolsFor.structured, (outputs) =>
        respond(request, args.json, (response) =>
          response.error === undefined ? Effect.flatMap(Ref.get(outputs), (c) => printVote(response, c)) : Effect.void))
    })
).pipe(Command.withDescription("redundant mode: N replicas at a temperature, a vote over their valid answers"))

// ---------------------------------------------------------------------------
// plan
// ---------------------------------------------------------------------------

const outputText = (output: unknown): string =>
  typeof output === "object" && output !== null && "content" in output && typeof output.content === "string"
    ? output.content
    : json(output)

/** Each step's output by name: the structured output, or on failure the partial output (the completed steps, as JSON). */
const stepOutputs = (response: SystemResponse): Record<string, unknown> => {
  if (response.structuredOutput !== undefined) return response.structuredOutput as Record<string, unknown>
  const partial = Either.getOrElse(Either.try(() => JSON.parse(response.content) as unknown), () => undefined)
  return typeof partial === "object" && partial !== null ? (partial as Record<string, unknown>) : {}
}

const printPlan = (plan: ExecutionPlan, response: SystemResponse) =>
  Effect.gen(function* () {
    const outputs = stepOutputs(response)
    for (const step of plan.steps) {
      yield* print(
        step.name in outputs
          ? `  ${step.name} (${step.type}): ${outputText(outputs[step.name])}`
          : `  ${step.name} (${step.type}): not completed`
      )
    }
  })

const planCommand = Command.make(
  "plan",
  {
    ...globalOptions,
    json: jsonOption,
    file: Args.text({ name: "plan.json" }).pipe(Args.withDescription("a JSON file with { steps: [...] }"))
  },
  (args) =>
    Effect.gen(function* () {
      const wire = yield* parseJson(yield* readText(args.file, "the plan file"), `the plan file ${args.file}`)
      const plan = yield* Schema.decodeUnknown(ExecutionPlan)(wire).pipe(
        Effect.mapError((e) =>
          new CliFailure({ message: `the plan file ${args.file} is not a plan: ${Issues.describe(e, "a plan object", "the plan").join("; ")}` })
        )
      )
      const request = yield* decodeRequest({ mode: "plan", messages: [], plan: wire })
      yield* withSystem(args, toolsFor.plan, () =>
        respond(request, args.json, (response) =>
          Effect.zipRight(printPlan(plan, response), print(`usage: ${formatUsage(response.tokenUsage)}`))))
    })
).pipe(Command.withDescription("run a plan of typed steps (tool, infer, ...) from a JSON file"))

// ---------------------------------------------------------------------------
// demo
// ---------------------------------------------------------------------------

/** The demo's plan (also in examples/plan.json): a tool step, then an inference with a schema. */
export const demoPlan = {
  steps: [
    { name: "sum", type: "tool", input: { name: "calculator", arguments: { expression: "12 + 7" } } },
    {
      name: "classify",
      type: "infer",
      input: {
        messages: [
          { _tag: "SystemMessage", role: "system", content: "Classify the sentiment of the review." },
          { _tag: "UserMessage", role: "user", content: "The staff was very friendly. Would buy again." }
        ],
        schema: BUNDLED_SENTIMENT_SCHEMA,
        temperature: 0
      }
    }
  ]
}

/** The system prompt the bundled model was trained with for sentiment (training/tasks.ts). */
const SENTIMENT_SYSTEM = "Classify the sentiment of the review."
const DEMO_QUESTION = "What is 12 plus 7?"
const DEMO_REVIEW = "The pasta was absolutely delicious and the waiter was lovely."
const DEMO_VOTE_REVIEW = "The hotel was fine. Nothing special."
const DEMO_TEMPERATURE = 0.8

const timed = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    const a = yield* self
    return [a, (yield* Clock.currentTimeMillis) - start] as const
  })

const heading = (title: string) => print(`\n== ${title}`)

/** Runs one part of the demo: its request on the facade, timed; prints what happened. */
const demoPart = (
  title: string,
  intro: string,
  request: unknown,
  show: (response: SystemResponse) => Effect.Effect<void, never, CliIo>,
  options?: Facade.RunOptions
) =>
  Effect.gen(function* () {
    yield* heading(title)
    yield* print(intro)
    const decoded = yield* decodeRequest(request)
    const [response, ms] = yield* timed(runRequest(decoded, options))
    if (response.error === undefined) yield* show(response)
    yield* print(
      `  ${formatUsage(response.tokenUsage)}; ${seconds(ms)}` +
        (response.error === undefined ? "" : `\n  failed: ${response.error.code}: ${response.error.message}`)
    )
    return response.error === undefined
  })

const demo = Command.make("demo", globalOptions, (args) =>
  Effect.gen(function* () {
    const io = yield* CliIo
    const settings = yield* settingsOf(args)
    const started = yield* Clock.currentTimeMillis
    const ok = yield* withEngine(args, (engine, outputs) =>
      Effect.gen(function* () {
        const loaded = yield* Clock.currentTimeMillis
        const info = yield* Effect.flatMap(Engine, (e) => e.modelInfo).pipe(Effect.provide(engine))
        // what the engine was given: the flags, else the environment's configuration, else the defaults
        const config = yield* Effect.orElseSucceed(LlamaEngine.config, (): LlamaEngine.Options => ({}))
        const modelPath = settings.model ?? config.modelPath ?? LlamaEngine.bundledModelPath()
        yield* print(
          `model: ${info.name} (${path.relative(process.cwd(), path.resolve(modelPath))}), context ${info.contextWindow} tokens, ` +
            `${settings.threads ?? config.threads ?? 1} thread(s); loaded in ${seconds(loaded - started)}`
        )

        const chatOk = yield* demoPart(
          "chat with the calculator tool (AgentLoop)",
          `> ${DEMO_QUESTION}`,
          { mode: "chat", messages: [{ role: "user", content: DEMO_QUESTION }], hints: { temperature: 0 } },
          (response) =>
            print(`\n  stop: ${response.stopReason ?? "-"}; tool calls: ${response.toolCallsMade.map((c) => `${c.name}(${json(c.arguments)}) -> ${c.result}`).join(", ") || "none"}`),
          streamProgress(io)
        ).pipe(onSystem(engine, toolsFor.chat))

        const structuredOk = yield* demoPart(
          "structured extraction (SpecializedLoop: JSON-schema grammar, then validation)",
          `  review: ${DEMO_REVIEW}`,
          {
            mode: "structured",
            messages: messages(DEMO_REVIEW, Option.some(SENTIMENT_SYSTEM)),
            output: { schema: BUNDLED_SENTIMENT_SCHEMA },
            hints: { temperature: 0 }
          },
          (response) => print(`  output: ${json(response.structuredOutput)}`)
        ).pipe(onSystem(engine, toolsFor.structured))

        yield* Ref.set(outputs, [])
        const voteOk = yield* demoPart(
          `vote: 5 replicas at temperature ${DEMO_TEMPERATURE}, majority (RedundantLoop)`,
          `  review: ${DEMO_VOTE_REVIEW}`,
          {
            mode: "redundant",
            messages: messages(DEMO_VOTE_REVIEW, Option.some(SENTIMENT_SYSTEM)),
            output: { schema: BUNDLED_SENTIMENT_SCHEMA },
            hints: { temperature: DEMO_TEMPERATURE },
            redundancy: { n: 5, voting: "majority" }
          },
          (response) =>
            Effect.gen(function* () {
              const candidates = yield* Ref.get(outputs)
              yield* Effect.forEach(candidates, (c, i) => print(`  replica ${i + 1}: ${c}`))
              yield* print(`  winner: ${json(response.structuredOutput)}, confidence ${response.confidence?.toFixed(2) ?? "n/a"}`)
            })
        ).pipe(onSystem(engine, toolsFor.structured))

        const plan = Schema.decodeUnknownSync(ExecutionPlan)(demoPlan)
        const planOk = yield* demoPart(
          "plan: a tool step, then an inference step (PlanExecutor)",
          `  steps: ${demoPlan.steps.map((s) => `${s.name} (${s.type})`).join(" -> ")}`,
          { mode: "plan", messages: [], plan: demoPlan },
          (response) => printPlan(plan, response)
        ).pipe(onSystem(engine, toolsFor.plan))

        return chatOk && structuredOk && voteOk && planOk
      }))
    yield* print(`\ndone in ${seconds((yield* Clock.currentTimeMillis) - started)}, model load included`)
    if (!ok) return yield* fail("a part of the demo failed (see above)")
  })
).pipe(Command.withDescription("each loop on real inference: a tool-using chat, an extraction, a vote, a plan"))

// ---------------------------------------------------------------------------
// serve
// ---------------------------------------------------------------------------

/** The flags `serve` takes, as parsed. */
export interface ServeFlags {
  readonly port: Option.Option<number>
  readonly host: Option.Option<string>
}

/** The flags given, as overrides of the server's configuration (the flags not given are undefined). */
const serveOverrides = (flags: ServeFlags): Http.Options => ({
  port: Option.getOrUndefined(flags.port),
  host: Option.getOrUndefined(flags.host)
})

/**
 * The options `serve` listens with: each flag given wins, the others come from the
 * environment (PAGANTIC_PORT, PAGANTIC_HOST, PAGANTIC_API_KEY, ...) or the
 * defaults, as `Http.optionsConfig` reads them.
 */
export const serveOptions = (flags: ServeFlags): Config.Config<Http.Options> => Http.optionsConfig(serveOverrides(flags))

const serve = Command.make(
  "serve",
  {
    ...globalOptions,
    port: integerIn("port", 0, 65535).pipe(
      Options.withDescription("TCP port, 0 for any free one (default: PAGANTIC_PORT, else 8080)"),
      Options.optional
    ),
    host: textFlag("host").pipe(
      Options.withDescription("interface to listen on (default: PAGANTIC_HOST, else 127.0.0.1)"),
      Options.optional
    )
  },
  (args) =>
    Effect.gen(function* () {
      const engines = yield* CliEngine
      const settings = yield* settingsOf(args)
      // the engine as it is (not the recording one): a server runs for long
      return yield* Http.serve(Live.layer({ engine: engines.make(settings) }), serveOverrides(args))
    }).pipe(
      Effect.mapError((e) =>
        e._tag === "ServeError"
          ? new CliFailure({ message: `cannot listen: ${String(e.cause)}` })
          : fromLayerFailure(e)
      )
    )
).pipe(Command.withDescription("serve the HTTP API (/v1/run, /v1/chat/completions, /health) on the model, on 127.0.0.1"))

// ---------------------------------------------------------------------------
// The application
// ---------------------------------------------------------------------------

export const command = root.pipe(Command.withSubcommands([chat, extract, vote, planCommand, demo, serve]))

const cli = Command.run(command, { name: "pagantic", version: "0.1.0" })

// ---------------------------------------------------------------------------
// The command line, checked before @effect/cli parses it
// ---------------------------------------------------------------------------

/**
 * A command's options by name (lower case), each with the kind of value it takes,
 * if any: "integer", "float", "a | b" for choices, "text", or the option's pseudo
 * name (which replaces the kind: numeric options keep none, so they are checked).
 */
type Flags = ReadonlyMap<string, Option.Option<string>>

const flagsOf = (usage: Usage.Usage, into = new Map<string, Option.Option<string>>()): Flags => {
  switch (usage._tag) {
    case "Named":
      for (const name of usage.names) if (name.startsWith("-")) into.set(name.toLowerCase(), usage.acceptedValues)
      break
    case "Optional":
    case "Repeated":
      flagsOf(usage.usage, into)
      break
    case "Alternation":
    case "Concat":
      flagsOf(usage.left, into)
      flagsOf(usage.right, into)
      break
  }
  return into
}

/** @effect/cli's own options, accepted everywhere. */
const builtInFlags: Flags = new Map([
  ["--help", Option.none()],
  ["-h", Option.none()],
  ["--version", Option.none()],
  ["--wizard", Option.none()],
  ["--completions", Option.some("sh | bash | fish | zsh")],
  ["--log-level", Option.some("all | trace | debug | info | warning | error | fatal | none")]
])

const rootFlags = flagsOf(Command.getUsage(root))
const commandFlags: Record<string, Flags> = {
  chat: flagsOf(Command.getUsage(chat)),
  extract: flagsOf(Command.getUsage(extract)),
  vote: flagsOf(Command.getUsage(vote)),
  plan: flagsOf(Command.getUsage(planCommand)),
  demo: flagsOf(Command.getUsage(demo)),
  serve: flagsOf(Command.getUsage(serve))
}

/** The commands whose arguments are free text (a message). */
const takesText = new Set(["chat", "extract", "vote"])

/** A user's word quoted in a message: JSON-escaped, and cut short when long. */
const quote = (word: string) => JSON.stringify(word.length > 60 ? `${word.slice(0, 60)}…` : word)

const closest = (name: string, flags: Flags): string | undefined => {
  const ranked = [...flags.keys(), ...builtInFlags.keys()]
    .map((known) => [known, AutoCorrect.levensteinDistance(name.toLowerCase(), known, CliConfig.defaultConfig)] as const)
    .filter(([, distance]) => distance <= 2)
    .sort((a, b) => a[1] - b[1])
  return ranked[0]?.[0]
}

/** Why `value` is no value of this kind (integer, float or one of "a | b"), if it is not. */
const badValue = (flag: string, kind: string, value: string): string | undefined => {
  if (kind === "integer") {
    return !/^[+-]?\d+$/.test(value)
      ? `${flag} expects an integer, got ${quote(value)}`
      : Number.isSafeInteger(Number(value))
      ? undefined
      : `${flag} is out of range, got ${quote(value)}`
  }
  if (kind === "float") {
    return /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(value) ? undefined : `${flag} expects a number, got ${quote(value)}`
  }
  // (a pseudo name replaces the kind: `file.json | json` is a description, not choices)
  const choices = kind.split(" | ")
  return choices.length < 2 || !choices.every((c) => /^[a-z0-9-]+$/.test(c)) || choices.includes(value.toLowerCase())
    ? undefined
    : `${flag} expects one of ${choices.join(", ")}, got ${quote(value)}`
}

/**
 * What is wrong with a command line (the arguments after the executable) that
 * @effect/cli would misreport: an unknown option (it says "Invalid subcommand",
 * or takes the option as the message), an unknown command, an option without its
 * value, a value that is not a number or not one of the choices. Undefined when
 * none of these; anything else is left to @effect/cli. After `--` every word is text.
 */
export const checkCommandLine = (args: ReadonlyArray<string>): string | undefined => {
  let current: string | undefined = undefined
  for (let i = 0; i < args.length; i++) {
    const word = args[i]!
    if (word === "--") return undefined
    const where = current === undefined ? "pagantic" : `pagantic ${current}`
    if (/^--?[A-Za-z]/.test(word)) {
      const equals = word.startsWith("--") ? word.indexOf("=") : -1
      const name = equals < 0 ? word : word.slice(0, equals)
      if (/\s/.test(name)) return `${quote(word)} reads as an option: put text that starts with "-" after -- (${where} -- ${quote(word)})`
      const flags = current === undefined ? rootFlags : commandFlags[current]!
      const takes = flags.get(name.toLowerCase()) ?? builtInFlags.get(name.toLowerCase())
      if (takes === undefined) {
        const suggestion = closest(name, flags)
        return `unknown option ${quote(name).slice(1, -1)} for ${where}` +
          (suggestion === undefined ? "" : ` (did you mean ${suggestion}?)`) +
          `; see ${where} --help` +
          (current !== undefined && takesText.has(current) ? `; text that starts with "-" goes after --` : "")
      }
      if (Option.isNone(takes)) continue
      const value = equals < 0 ? args[++i] : word.slice(equals + 1)
      if (value === undefined) return `${name} needs a value (${takes.value})`
      const problem = badValue(name, takes.value, value)
      if (problem !== undefined) return problem
      continue
    }
    if (current === undefined) {
      if (!(word in commandFlags)) return `unknown command ${quote(word)}: the commands are ${Object.keys(commandFlags).join(", ")}`
      current = word
    }
  }
  return undefined
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

const ANSI_ESCAPE = /\x1b\[[0-9;]*[A-Za-z]/g

/** A message as one line on a terminal: no escapes, no line breaks, no control characters, bounded. */
const oneLine = (message: string): string => {
  const flat = message.replace(ANSI_ESCAPE, "").replace(/\s*[\r\n]+\s*/g, " ").replace(/[\x00-\x1f\x7f]/g, "?").trim()
  return flat.length > 1000 ? `${flat.slice(0, 1000)}…` : flat
}

/** What a ValidationError says, as plain text (its help document, without colours). */
const validationMessage = (error: ValidationError.ValidationError): string => {
  const text = oneLine(HelpDoc.toAnsiText(error.error)).replace(/^Expected to find option: '(.*)'$/, "missing option $1")
  return text.length > 0 ? text : `invalid command line (${error._tag})`
}

/** What a failure of `run` says (whatever reaches here: @effect/cli's prompts fail with errors of their own). */
const failureMessage = (error: unknown): string =>
  error instanceof CliFailure
    ? error.message
    : ValidationError.isValidationError(error)
    ? validationMessage(error)
    : `unexpected failure: ${error instanceof Error ? error.message : String(error)}`

/**
 * @effect/cli prints through the Console: the help and version go to `io.write`,
 * without colours unless `io.colors`; its error messages are dropped, since `run`
 * prints every failure itself, on one line.
 */
const throughIo = (io: Io) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
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
      Effect.fail(new CliFailure({ message: `unexpected failure: ${defect instanceof Error ? defect.message : String(defect)}` }))
    ),
    Effect.tapError((error) => Effect.flatMap(CliIo, (io) => io.error(`error: ${oneLine(failureMessage(error))}`)))
  )

export type RunError = CliFailure | ValidationError.ValidationError
