import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import { execFile, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Cli from "../src/adapters/Cli.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { SystemResponse } from "../src/domain/System.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Engine, independentSamples } from "../src/services/Engine.js"
import * as ServeLog from "./support/serve-log.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const launcher = path.join(root, "bin", "pagantic.js")

const sentimentSchema = JSON.stringify({
  type: "object",
  properties: { sentiment: { type: "string", enum: ["positive", "negative", "neutral"] } },
  required: ["sentiment"]
})

const tempFile = (name: string, content: string): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-cli-"))
  const file = path.join(dir, name)
  fs.writeFileSync(file, content)
  return file
}

// ---------------------------------------------------------------------------
// In process: the command handlers on a ScriptedEngine, output captured
// ---------------------------------------------------------------------------

interface Run {
  readonly exit: Exit.Exit<void, Cli.RunError>
  readonly out: string
  readonly err: ReadonlyArray<string>
  /** What the live status line showed, in order (undefined: cleared); only with `tty`. */
  readonly status: ReadonlyArray<string | undefined>
  readonly requests: ReadonlyArray<import("../src/services/Engine.js").InferenceRequest>
  /** The engine settings each model load was asked for. */
  readonly loads: ReadonlyArray<Cli.EngineSettings>
}

const runCli = (
  args: ReadonlyArray<string>,
  options: {
    readonly script?: ReadonlyArray<ScriptedEngine.Step>
    readonly stdin?: ReadonlyArray<string>
    readonly loadFailure?: InferenceFailure
    /** The engine's construction dies with this defect (a bug, not a failure). */
    readonly loadDefect?: unknown
    readonly whenExhausted?: "fail" | "repeat-last"
    readonly colors?: boolean
    /** Standard error is a terminal: progress goes to a live status line. */
    readonly tty?: boolean
    /** The engine draws a vote's replicas together (its own sampleMany), as LlamaEngine does. */
    readonly sampleMany?: boolean
  } = {}
): Effect.Effect<Run> =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const status = yield* Ref.make<ReadonlyArray<string | undefined>>([])
    const loads = yield* Ref.make<ReadonlyArray<Cli.EngineSettings>>([])
    const input = [...(options.stdin ?? [])]
    const { control, engine } = yield* ScriptedEngine.make(
      options.script ?? [],
      options.whenExhausted === undefined ? {} : { whenExhausted: options.whenExhausted }
    )
    const io = Cli.CliIo.of({
      write: (text) => Ref.update(out, (o) => o + text),
      error: (line) => Ref.update(err, (e) => [...e, line]),
      readLine: (prompt) =>
        Effect.zipRight(
          Ref.update(out, (o) => o + prompt),
          Effect.sync(() => Option.fromNullable(input.shift()))
        ),
      colors: options.colors ?? false,
      ...(options.tty === true ? { status: (line: string | undefined) => Ref.update(status, (s) => [...s, line]) } : {})
    })
    const engines = Cli.CliEngine.of({
      make: (settings) =>
        Layer.effect(
          Engine,
          Effect.zipRight(
            Ref.update(loads, (l) => [...l, settings]),
            options.loadDefect !== undefined
              ? Effect.die(options.loadDefect)
              : options.loadFailure === undefined
              ? Effect.succeed(
                options.sampleMany === true
                  ? Engine.of({ ...engine, sampleMany: (request, n) => independentSamples(engine, request, n) })
                  : engine
              )
              : Effect.fail(options.loadFailure)
          )
        )
    })
    const exit = yield* Effect.exit(
      Cli.run(["node", "pagantic", ...args]).pipe(
        Effect.provideService(Cli.CliIo, io),
        Effect.provideService(Cli.CliEngine, engines),
        Effect.provide(NodeContext.layer)
      )
    )
    return {
      exit,
      out: yield* Ref.get(out),
      err: yield* Ref.get(err),
      status: yield* Ref.get(status),
      requests: yield* control.requests,
      loads: yield* Ref.get(loads)
    }
  })

/** The durable runs' state file in a temporary folder (PAGANTIC_STATE), not the working directory's. */
const withTempState = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.withConfigProvider(
    self,
    ConfigProvider.orElse(
      ConfigProvider.fromMap(new Map([["PAGANTIC_STATE", path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-state-")), "state.db")]])),
      () => ConfigProvider.fromEnv()
    )
  )

const failureOf = (run: Run) =>
  Exit.isFailure(run.exit) ? Option.getOrUndefined(Cause.failureOption(run.exit.cause)) : undefined

/** A failure the loops do not retry (a retryable one would back off on the TestClock). */
const boom = new InferenceFailure({
  code: "INFERENCE_ENGINE_ERROR",
  retryable: false,
  message: "llama.cpp generation failed: boom",
  details: {}
})

const calculatorTurn = [
  ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "12 + 7" } }]),
  ScriptedEngine.reply("The answer is 19.")
]

describe("Cli (in process, ScriptedEngine)", () => {
  it.effect("chat: one-shot, streams text, shows the tool call and its result, offers the calculator", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "What is 12 plus 7?"], { script: calculatorTurn })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain(`[tool call] calculator({"expression":"12 + 7"})\n`)
      expect(run.out).toContain("[tool result] 19\n")
      expect(run.out).toContain("The answer is 19.")
      expect(run.out).toContain("(finish; 2 inference(s)")
      expect(run.requests).toHaveLength(2)
      expect(run.requests[0]!.tools.map((t) => t.name)).toEqual(["calculator"])
      expect(run.requests[0]!.messages.at(-1)).toMatchObject({ role: "user", content: "What is 12 plus 7?" })
      // the tool result went back to the model
      expect(run.requests[1]!.messages.at(-1)).toMatchObject({ role: "tool", content: "19" })
      expect(run.loads).toEqual([{}])
    }))

  it.effect("chat: words of an unquoted prompt, a system prompt and a temperature reach the request", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "--system", "Be brief.", "--temperature", "0.5", "Hello", "there"], {
        script: [ScriptedEngine.reply("Hello!")]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests[0]!.messages.map((m) => [m.role, m.content])).toEqual([
        ["system", "Be brief."],
        ["user", "Hello there"]
      ])
      expect(run.requests[0]!.temperature).toBe(0.5)
    }))

  it.effect("chat: interactive, one session across turns, /exit leaves", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat"], {
        stdin: ["Hello!", "", "What is 12 plus 7?", "/exit", "never read"],
        script: [ScriptedEngine.reply("Hello! How can I help you today?"), ...calculatorTurn]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain("> Hello! How can I help you today?")
      expect(run.out).toContain("The answer is 19.")
      expect(run.requests).toHaveLength(3)
      // the second turn carries the first: one session
      const second = run.requests[1]!.messages.map((m) => m.content)
      expect(second).toContain("Hello!")
      expect(second).toContain("Hello! How can I help you today?")
      expect(second.at(-1)).toBe("What is 12 plus 7?")
      expect(run.requests.every((r) => r.sessionKey === run.requests[0]!.sessionKey)).toBe(true)
      // one model load for the whole session
      expect(run.loads).toHaveLength(1)
    }))

  it.effect("chat: interactive ends at the end of input, and an error does not end the session", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat"], {
        stdin: ["first", "second"],
        script: [
          ScriptedEngine.fail(boom),
          ScriptedEngine.reply("fine")
        ]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.err).toEqual(["INFERENCE_ENGINE_ERROR: llama.cpp generation failed: boom"])
      expect(run.out).toContain("fine")
    }))

  it.effect("chat: a SystemError in the response prints code and message and fails", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "hi"], {
        script: [ScriptedEngine.fail(boom)]
      })
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err).toEqual(["error: INFERENCE_ENGINE_ERROR: llama.cpp generation failed: boom"])
    }))

  it.effect("extract: inline schema; prints the structured output, the raw content and usage; no tools offered", () =>
    Effect.gen(function* () {
      const run = yield* runCli(
        ["extract", "--system", "Classify the sentiment of the review.", "--schema", sentimentSchema, "Great", "pasta!"],
        { script: [ScriptedEngine.reply(`{"sentiment": "positive"}`)] }
      )
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain(`{\n  "sentiment": "positive"\n}\n`)
      expect(run.out).toContain(`raw: {"sentiment": "positive"}`)
      expect(run.out).toContain("usage: 1 inference(s)")
      expect(run.requests).toHaveLength(1)
      expect(run.requests[0]!.schema).toEqual(JSON.parse(sentimentSchema))
      expect(run.requests[0]!.tools).toEqual([])
      expect(run.requests[0]!.messages.map((m) => [m.role, m.content])).toEqual([
        ["system", "Classify the sentiment of the review."],
        ["user", "Great pasta!"]
      ])
    }))

  it.effect("extract --json: the encoded SystemResponse, which decodes back", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["extract", "--json", "--schema", sentimentSchema, "Great pasta!"], {
        script: [ScriptedEngine.reply(`{"sentiment": "positive"}`)]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      const response = Schema.decodeUnknownSync(SystemResponse)(JSON.parse(run.out))
      expect(response.structuredOutput).toEqual({ sentiment: "positive" })
      expect(response.content).toBe(`{"sentiment": "positive"}`)
      expect(response.tokenUsage.calls).toBe(1)
    }))

  it.effect("chat --json: no streaming, the response with its tool calls", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "--json", "What is 12 plus 7?"], { script: calculatorTurn })
      expect(run.out).not.toContain("[tool call]")
      const response = Schema.decodeUnknownSync(SystemResponse)(JSON.parse(run.out))
      expect(response.content).toBe("The answer is 19.")
      expect(response.toolCallsMade.map((c) => [c.name, c.result])).toEqual([["calculator", "19"]])
    }))

  it.effect("extract: a schema file", () =>
    Effect.gen(function* () {
      const file = tempFile("schema.json", sentimentSchema)
      const run = yield* runCli(["extract", "--schema", file, "Awful."], {
        script: [ScriptedEngine.reply(`{"sentiment": "negative"}`)]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain(`"sentiment": "negative"`)
      expect(run.requests[0]!.schema).toEqual(JSON.parse(sentimentSchema))
    }))

  it.effect("extract: a schema file that is not JSON fails before any model is loaded", () =>
    Effect.gen(function* () {
      const file = tempFile("bad.json", "{ this is not json")
      const run = yield* runCli(["extract", "--schema", file, "text"])
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err).toHaveLength(1)
      expect(run.err[0]).toContain(`the schema file ${file} is not JSON`)
      expect(run.loads).toEqual([])
    }))

  it.effect("extract: JSON that is not a schema, and a missing schema file, are refused", () =>
    Effect.gen(function* () {
      const notSchema = yield* runCli(["extract", "--schema", `{"type": "banana"}`, "text"])
      expect(notSchema.err[0]).toContain("the inline schema is not a schema")
      const empty = yield* runCli(["extract", "--schema", `{"title": "x"}`, "text"])
      expect(empty.err[0]).toContain(`needs a "type", "properties", "enum" or "anyOf"`)
      const missing = yield* runCli(["extract", "--schema", "/nonexistent/schema.json", "text"])
      expect(missing.err[0]).toContain("cannot read the schema file /nonexistent/schema.json")
      expect([...notSchema.loads, ...empty.loads, ...missing.loads]).toEqual([])
    }))

  // live clock: the repair retries back off for real (briefly)
  it.live("extract: an output that never fits the schema is the response's error", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["extract", "--schema", sentimentSchema, "text"], {
        script: [ScriptedEngine.reply(`{"sentiment": "ecstatic"}`)],
        whenExhausted: "repeat-last"
      })
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err[0]).toMatch(/^error: CONSTRAINT_ENUM_UNRECOGNIZED: /)
      expect(run.requests.length).toBeGreaterThan(1)
    }))

  it.effect("vote: --n replicas at the temperature, winner, confidence and every candidate", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["vote", "--schema", sentimentSchema, "--n", "3", "--temperature", "0.9", "Fine."], {
        script: [
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          ScriptedEngine.reply(`{ "sentiment":"neutral" }`)
        ]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests).toHaveLength(3)
      expect(run.requests.every((r) => r.temperature === 0.9 && r.tools.length === 0)).toBe(true)
      expect(run.out).toContain(`winner: {"sentiment":"neutral"}`)
      expect(run.out).toContain("confidence: 0.67 (voting)")
      expect(run.out).toContain("candidates (3):")
      for (const c of [`{"sentiment": "neutral"}`, `{"sentiment": "positive"}`, `{ "sentiment":"neutral" }`]) {
        expect(run.out).toContain(c)
      }
    }))

  it.effect("vote: replicas the engine draws together (sampleMany) are each a candidate and advance the progress", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["vote", "--schema", sentimentSchema, "--n", "3", "Fine."], {
        sampleMany: true,
        script: [
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          ScriptedEngine.reply(`{"sentiment": "neutral"}`)
        ]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain("candidates (3):")
      expect(run.out).toContain(`{"sentiment": "positive"}`)
      expect(run.err.at(-1)).toBe("vote [####################] 3/3 answers 0.0 s")
    }))

  it.effect("vote: unanimity without agreement is ORCHESTRATION_NO_CONSENSUS, exit with an error", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["vote", "--schema", sentimentSchema, "-n", "2", "--voting", "unanimity", "Fine."], {
        script: [ScriptedEngine.reply(`{"sentiment": "neutral"}`), ScriptedEngine.reply(`{"sentiment": "positive"}`)]
      })
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      // the progress lines first, then the error
      expect(run.err.slice(0, -1)).toEqual(["vote [##########----------] 1/2 answers 0.0 s", "vote [####################] 2/2 answers 0.0 s"])
      expect(run.err.at(-1)).toMatch(/^error: ORCHESTRATION_NO_CONSENSUS: /)
    }))

  it.effect("vote: progress on a terminal is a live line, redrawn per answer and cleared at the end; standard output is the result alone", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["vote", "--schema", sentimentSchema, "--n", "3", "Fine."], {
        tty: true,
        script: [
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          ScriptedEngine.reply(`{"sentiment": "neutral"}`)
        ]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.err).toEqual([])
      expect(run.status.filter((line) => line !== undefined && line.includes("answers"))).toEqual(
        expect.arrayContaining(["vote [#######-------------] 1/3 answers 0.0 s", "vote [####################] 3/3 answers 0.0 s"])
      )
      expect(run.status.at(-1)).toBeUndefined()
      expect(run.out).not.toContain("answers")
    }))

  it.effect("vote: a bad envelope (n out of range) is refused before loading a model", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["vote", "--schema", sentimentSchema, "--n", "99", "Fine."])
      expect(run.err[0]).toContain("invalid request")
      expect(run.loads).toEqual([])
    }))

  it.effect("plan: runs examples/plan.json and prints each step's output", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["plan", path.join(root, "examples", "plan.json")], {
        script: [ScriptedEngine.reply(`{"sentiment": "positive"}`)]
      })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain("  sum (tool): 19\n")
      expect(run.out).toContain(`  classify (infer): {"sentiment": "positive"}\n`)
      expect(run.requests).toHaveLength(1)
      expect(run.requests[0]!.messages.map((m) => m.role)).toEqual(["system", "user"])
      expect(run.requests[0]!.schema).toEqual(JSON.parse(sentimentSchema))
    }))

  it.effect("plan: a failing step shows the completed steps, then the error", () =>
    Effect.gen(function* () {
      const calc = (name: string, expression: string) => ({
        name,
        type: "tool",
        input: { name: "calculator", arguments: { expression } }
      })
      const file = tempFile("plan.json", JSON.stringify({ steps: [calc("sum", "12 + 7"), calc("broken", "12 +"), calc("after", "1 + 1")] }))
      const run = yield* runCli(["plan", file])
      expect(run.out).toContain("  sum (tool): 19\n  broken (tool): not completed\n  after (tool): not completed\n")
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err[0]).toMatch(/^error: TOOL_EXECUTION_FAILED: /)
    }))

  it("examples/plan.json is the demo's plan", () => {
    expect(JSON.parse(fs.readFileSync(path.join(root, "examples", "plan.json"), "utf8"))).toEqual(Cli.demoPlan)
  })

  it.effect("plan: a file that is not a plan is refused", () =>
    Effect.gen(function* () {
      const file = tempFile("plan.json", JSON.stringify({ steps: [{ type: "tool" }] }))
      const run = yield* runCli(["plan", file])
      expect(run.err[0]).toContain(`the plan file ${file} is not a plan`)
      expect(run.loads).toEqual([])
    }))

  it.effect("--model and --threads choose the engine, before or after the command", () =>
    Effect.gen(function* () {
      const before = yield* runCli(["--model", "/m/a.gguf", "--threads", "2", "chat", "hi"], {
        script: [ScriptedEngine.reply("Hello!")]
      })
      expect(before.loads).toEqual([{ model: "/m/a.gguf", threads: 2 }])
      const after = yield* runCli(["--threads", "2", "chat", "--model", "/m/b.gguf", "hi"], {
        script: [ScriptedEngine.reply("Hello!")]
      })
      expect(after.loads).toEqual([{ model: "/m/b.gguf", threads: 2 }])
    }))

  it.effect("a model that does not load: its code and message, no request", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["--model", "/nope.gguf", "chat", "hi"], {
        loadFailure: InferenceFailure.modelUnavailable("model file not found or not readable: /nope.gguf", {})
      })
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err).toEqual(["error: INFERENCE_MODEL_UNAVAILABLE: model file not found or not readable: /nope.gguf"])
      expect(run.requests).toEqual([])
    }))

  it.effect("unknown flags are named, wherever they are, and never become prompt text", () =>
    Effect.gen(function* () {
      const demo = yield* runCli(["demo", "--bogus"])
      expect(failureOf(demo)).toMatchObject({ _tag: "CliFailure" })
      expect(demo.err).toEqual(["error: unknown option --bogus for pagantic demo; see pagantic demo --help"])
      const chat = yield* runCli(["chat", "--bogus", "hi"])
      expect(chat.err[0]).toContain("unknown option --bogus for pagantic chat")
      expect(chat.requests).toEqual([])
    }))

  it.live("demo: every part runs through the facade and reports what happened", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["demo"], {
        script: [
          ...calculatorTurn,
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          ...Array.from({ length: 5 }, () => ScriptedEngine.reply(`{"sentiment": "neutral"}`)),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          // the tasks: the analyzer's TaskList, then one classification per review
          ScriptedEngine.reply(JSON.stringify({
            analysis: "2 reviews to classify, 1 calculation, in 2 steps",
            tasks: [
              { id: "t1", type: "sentiment", processor: "sentiment", priority: 1, dependencies: [], description: "The room was spotless.", metadata: {} },
              { id: "t2", type: "sentiment", processor: "sentiment", priority: 1, dependencies: [], description: "The waiter ignored us.", metadata: {} },
              { id: "t3", type: "calculation", processor: "calculator", priority: 2, dependencies: ["t1", "t2"], description: "Add up 12, 30 and 7", metadata: { expression: "12 + 30 + 7" } }
            ]
          })),
          ScriptedEngine.reply(`{"sentiment": "negative"}`),
          ScriptedEngine.reply(`{"sentiment": "negative"}`),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          // the waterfall: stage 1's two responders disagree, stage 2's three samples vote
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "positive"}`),
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "neutral"}`),
          ScriptedEngine.reply(`{"sentiment": "negative"}`),
          // the escalation's first tier: the greedy model
          ScriptedEngine.reply(`{"sentiment": "negative"}`)
        ]
      }).pipe(withTempState)
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.out).toContain("model: scripted")
      expect(run.out).toContain(`[tool call] calculator({"expression":"12 + 7"})`)
      expect(run.out).toContain(`output: {"sentiment":"positive"}`)
      expect(run.out.match(/replica \d: \{"sentiment": "neutral"\}/g)).toHaveLength(5)
      expect(run.out).toContain(`winner: {"sentiment":"neutral"}, confidence 1.00`)
      expect(run.out).toContain("sum (tool): 19")
      expect(run.out).toContain(`classify (infer): {"sentiment": "positive"}`)
      // the durable run: the calculator's step, the model's step, then its thread
      expect(run.out).toMatch(/run \S+ on \S+state\.db: completed/)
      expect(run.out).toContain("DO sum: 19")
      expect(run.out).toContain("DO classify: positive")
      expect(run.out).toContain(`KNOW result: {"sum":"19","sentiment":"positive"}`)
      // the tasks: analyzed under the bundled model's short instruction, run by phase
      expect(run.out).toContain("phases: [t1, t2] -> [t3]")
      expect(run.out).toContain(`t1 (sentiment): {"sentiment":"negative"}`)
      expect(run.out).toContain("t3 (calculator): 49")
      expect(run.requests[9]!.messages[0]).toMatchObject({ role: "system", content: "Break the request into tasks." })
      // the waterfall query: stage 1 did not agree, stage 2 voted; the answers as the model gave them
      expect(run.out).toContain("accept_expression: fold.answer.confidence > 0.5")
      expect(run.out).toMatch(/stage 1 \(greedy, warm\): (greedy neutral, warm positive|warm positive, greedy neutral) -> not accepted/)
      expect(run.out).toMatch(/stage 2 \(hot x3, temperature 2\): hot-\d \w+, hot-\d \w+, hot-\d \w+/)
      expect(run.out).toContain("stages tried: 2 of 2")
      expect(run.out).toContain(`answer: {"category":"neutral"}, confidence 0.67 (consensus, 3 of 3 valid); waterfall accepted, from stage 2, 5 CALLs`)
      // the responders are asked the way the bundled model was trained, at their own sampling
      expect(run.requests.slice(13, 18).every((r) => r.messages[0]?.content === "Classify the sentiment of the review.")).toBe(true)
      expect(run.requests.slice(13, 18).map((r) => r.temperature).sort()).toEqual([0, 1, 2, 2, 2])
      // the escalation: the model's tier, then the human's slot, answered by a child pagantic respond; the KNOW read back
      const waiting = run.out.match(/run (\S+) waits for the human did:example:reviewer on slot (\S+)/)
      expect(waiting).not.toBeNull()
      const [, runId, slot] = waiting!
      expect(run.out).toMatch(new RegExp(`\\$ pagantic respond ${runId} ${slot.replace(/\//g, "\\/")} --secret \\S+ --submit '\\{"kind":"core.classification.v1","category":"neutral"`))
      expect(run.out).toContain(`| submit: Accepted (run ${runId}, slot ${slot})`)
      expect(run.out).toContain("|   status: completed")
      expect(run.out).toMatch(new RegExp(`run ${runId} on \\S+state\\.db: completed`))
      expect(run.out).toMatch(/DO tier-0\/do\/0: \{"kind":"core.classification.v1".*"category":"negative"/)
      expect(run.out).toContain("answer: {\"category\":\"neutral\"}, confidence 0.95 (best_of, 1 of 1 valid); escalate accepted, from tier 2, 2 CALLs")
      expect(run.out).toContain("rationale: a clean room, unfriendly staff: mixed, so neutral")
      expect(run.requests).toHaveLength(19)
      // the structured parts are asked with the system prompt the bundled model was trained on
      expect(run.requests[2]!.messages[0]).toMatchObject({ role: "system", content: "Classify the sentiment of the review." })
      expect(run.requests.slice(3, 8).every((r) => r.temperature === 0.8)).toBe(true)
      expect(run.loads).toHaveLength(1)
    }), 90_000)

  it.live("demo: a failing part makes the demo fail", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["demo"], { script: Array.from({ length: 10 }, () => ScriptedEngine.fail(boom)) }).pipe(withTempState)
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.out).toContain("failed: INFERENCE_ENGINE_ERROR")
    }), 60_000)
})

// ---------------------------------------------------------------------------
// Bad input: one clear line on stderr, a failure, no model loaded
// ---------------------------------------------------------------------------

/** Runs a command line that must be refused, and returns its one error line. */
const refused = (args: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const run = yield* runCli(args)
    expect(Exit.isFailure(run.exit), args.join(" ")).toBe(true)
    expect(run.err, args.join(" ")).toHaveLength(1)
    expect(run.loads, args.join(" ")).toEqual([])
    expect(run.requests).toEqual([])
    return run.err[0]!
  })

describe("Cli: bad input (in process)", () => {
  it.effect("an empty or blank message is refused by every command that sends one; chat does not turn interactive", () =>
    Effect.gen(function* () {
      for (
        const args of [
          ["chat", ""],
          ["chat", "   "],
          ["chat", "", ""],
          ["chat", "--json", "\t"],
          ["extract", "--schema", sentimentSchema, ""],
          ["extract", "--schema", sentimentSchema, " ", " "],
          ["vote", "--schema", sentimentSchema, ""],
          ["vote", "--schema", sentimentSchema, "-n", "3", "  "]
        ]
      ) {
        const run = yield* runCli(args, { stdin: ["hello"] })
        expect(run.err, args.join(" ")).toEqual(["error: the message is empty"])
        expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
        expect(run.out).not.toContain("pagantic chat:")
        expect(run.loads).toEqual([])
      }
      // no argument at all is still the interactive session
      const interactive = yield* runCli(["chat"], { stdin: [], script: [] })
      expect(Exit.isSuccess(interactive.exit)).toBe(true)
      expect(interactive.out).toContain("pagantic chat:")
    }))

  it.effect("empty text options are refused: --system, --model, --schema, --host", () =>
    Effect.gen(function* () {
      expect(yield* refused(["chat", "--system", "", "hi"])).toBe("error: --system is empty")
      expect(yield* refused(["--model", "", "chat", "hi"])).toBe("error: --model is empty")
      expect(yield* refused(["extract", "--schema", " ", "text"])).toBe("error: --schema is empty")
      expect(yield* refused(["serve", "--host", ""])).toBe("error: --host is empty")
    }))

  it.effect("an unknown option before the command is named (not 'Invalid subcommand'), with a suggestion when close", () =>
    Effect.gen(function* () {
      expect(yield* refused(["--frobnicate", "chat", "hi"])).toBe(
        "error: unknown option --frobnicate for pagantic; see pagantic --help"
      )
      expect(yield* refused(["--modle", "m.gguf", "chat", "hi"])).toContain(
        "unknown option --modle for pagantic (did you mean --model?)"
      )
      expect(yield* refused(["chat", "--jsno", "hi"])).toContain("unknown option --jsno for pagantic chat (did you mean --json?)")
      expect(yield* refused(["plan", "--bogus", "plan.json"])).toContain("unknown option --bogus for pagantic plan")
      expect(yield* refused(["frob", "hi"])).toBe(
        `error: unknown command "frob": the commands are chat, extract, vote, plan, task, query, demo, serve, migrate, runs, thread, respond, trace, keys`
      )
      expect(yield* refused(["chat", "-x marks the spot"])).toContain(`put text that starts with "-" after --`)
    }))

  it.effect("after --, words that look like options are the message", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "--", "--json", "--n", "-x marks the spot"], { script: [ScriptedEngine.reply("ok")] })
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests[0]!.messages.at(-1)).toMatchObject({ role: "user", content: "--json --n -x marks the spot" })
    }))

  it.effect("numeric flags: not a number, out of range, or missing their value, each named", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["--threads", "-1", "chat", "hi"], "--threads must be from 1 to 1024, got -1"],
        [["chat", "--threads", "0", "hi"], "--threads must be from 1 to 1024, got 0"],
        [["--threads", "x", "chat", "hi"], `--threads expects an integer, got "x"`],
        [["--threads=1.5", "chat", "hi"], `--threads expects an integer, got "1.5"`],
        [["chat", "hi", "--threads"], "--threads needs a value (integer)"],
        [["chat", "--max-tokens", "0", "hi"], "--max-tokens must be at least 1, got 0"],
        [["chat", "--max-tokens", "99999999999999999999", "hi"], `--max-tokens is out of range, got "99999999999999999999"`],
        [["extract", "--schema", sentimentSchema, "--max-tokens", "-3", "t"], "--max-tokens must be at least 1, got -3"],
        [["chat", "--temperature", "abc", "hi"], `--temperature expects a number, got "abc"`],
        [["chat", "--temperature", "NaN", "hi"], `--temperature expects a number, got "NaN"`],
        [["chat", "--temperature", "5", "hi"], "invalid request: --temperature: expected a number between 0 and 2, got 5"],
        [["vote", "--schema", sentimentSchema, "-n", "0", "t"], "invalid request: -n: expected a number between 1 and 32, got 0"],
        [["vote", "--schema", sentimentSchema, "--n", "x", "t"], `-n expects an integer, got "x"`],
        [["vote", "--schema", sentimentSchema, "--quorum", "0", "t"], "invalid request: --quorum: expected a positive number, got 0"],
        [["vote", "--schema", sentimentSchema, "-n", "3", "--quorum", "4", "t"], "--quorum 4 is more than the 3 replicas (-n) that vote"],
        [["vote", "--schema", sentimentSchema, "--voting", "most", "t"], `--voting expects one of majority, unanimity, got "most"`],
        [["serve", "--port", "70000"], "--port must be from 0 to 65535, got 70000"],
        [["serve", "--port", "-1"], "--port must be from 0 to 65535, got -1"]
      ]
      for (const [args, message] of cases) {
        expect(yield* refused(args), args.join(" ")).toBe(`error: ${message}`)
      }
    }))

  it.effect("schema and plan files: a directory, an empty file, a huge one, a device, not UTF-8, nested too deeply", () =>
    Effect.gen(function* () {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-cli-"))
      const huge = tempFile("huge.json", `{"type":"string","description":"${"x".repeat(1024 * 1024)}"}`)
      const empty = tempFile("empty.json", "  \n")
      const binary = path.join(dir, "binary.json")
      fs.writeFileSync(binary, Buffer.from([0xff, 0xfe, 0x00, 0x7b]))
      const deep = tempFile("deep.json", "[".repeat(5000) + "]".repeat(5000))
      for (const [what, args] of [["the schema file", ["extract", "--schema"]], ["the plan file", ["plan"]]] as const) {
        const tail = what === "the plan file" ? [] : ["text"]
        expect(yield* refused([...args, dir, ...tail])).toBe(`error: cannot read ${what} ${dir}: it is a directory`)
        expect(yield* refused([...args, empty, ...tail])).toBe(`error: ${what} ${empty} is empty`)
        expect(yield* refused([...args, huge, ...tail])).toBe(`error: ${what} ${huge} is larger than 1 MiB`)
        if (fs.existsSync("/dev/zero")) {
          expect(yield* refused([...args, "/dev/zero", ...tail])).toBe(`error: ${what} /dev/zero is larger than 1 MiB`)
        }
        expect(yield* refused([...args, binary, ...tail])).toBe(`error: ${what} ${binary} is not UTF-8 text`)
        expect(yield* refused([...args, deep, ...tail])).toBe(
          `error: ${what} ${deep} is nested too deeply (more than 64 levels of objects and arrays)`
        )
        expect(yield* refused([...args, path.join(dir, "missing.json"), ...tail])).toBe(
          `error: cannot read ${what} ${path.join(dir, "missing.json")}: no such file`
        )
      }
      expect(yield* refused(["extract", "--schema", "[".repeat(100) + "]".repeat(100), "t"])).toContain(
        "the inline schema is nested too deeply"
      )
    }))

  it.effect("a missing option or argument: @effect/cli's message, one plain line", () =>
    Effect.gen(function* () {
      expect(yield* refused(["extract", "text"])).toBe("error: missing option --schema")
      expect(yield* refused(["plan"])).toBe("error: Missing argument <plan.json>")
    }))

  it.effect("a defect (a bug) is one line too, without a stack", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["chat", "hi"], { loadDefect: new Error("native crash\n    at somewhere (file.ts:1:1)") })
      expect(failureOf(run)).toMatchObject({ _tag: "CliFailure" })
      expect(run.err).toEqual(["error: unexpected failure: native crash at somewhere (file.ts:1:1)"])
    }))

  it.effect("--wizard, whose prompts are drawn in colour, is refused where colours are not allowed (it hung or failed silently)", () =>
    Effect.gen(function* () {
      expect(yield* refused(["--wizard"])).toBe(
        "error: --wizard needs a terminal that allows colours (standard output a terminal, NO_COLOR unset)"
      )
      // after --, it is text
      const text = yield* runCli(["chat", "--", "--wizard"], { script: [ScriptedEngine.reply("ok")] })
      expect(text.requests[0]!.messages.at(-1)).toMatchObject({ content: "--wizard" })
    }))

  it.effect("help is plain text unless colours are allowed (a terminal, NO_COLOR unset)", () =>
    Effect.gen(function* () {
      for (const args of [["--help"], ["chat", "--help"], ["serve", "-h"]]) {
        const plain = yield* runCli(args)
        expect(Exit.isSuccess(plain.exit)).toBe(true)
        expect(plain.out).toContain("USAGE")
        expect(plain.out).not.toContain("\x1b")
        const coloured = yield* runCli(args, { colors: true })
        expect(coloured.out).toContain("\x1b[")
        expect(coloured.out.replace(/\x1b\[[0-9;]*m/g, "")).toBe(plain.out)
      }
    }))
})

describe("Cli.serveOptions: each flag given wins, the rest from the environment", () => {
  const resolve = (flags: { readonly port?: number; readonly host?: string }, env: Record<string, string>) =>
    Cli.serveOptions({ port: Option.fromNullable(flags.port), host: Option.fromNullable(flags.host) }).pipe(
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )

  it.effect("--host without --port: the host is honoured, the port from PAGANTIC_PORT, else 8080", () =>
    Effect.gen(function* () {
      expect(yield* resolve({ host: "0.0.0.0" }, {})).toMatchObject({ host: "0.0.0.0", port: 8080 })
      expect(yield* resolve({ host: "0.0.0.0" }, { PAGANTIC_PORT: "9090", PAGANTIC_HOST: "127.0.0.1" })).toMatchObject({
        host: "0.0.0.0",
        port: 9090
      })
    }))

  it.effect("--port without --host: the host from PAGANTIC_HOST, the rest (limits, key) from the environment", () =>
    Effect.gen(function* () {
      const options = yield* resolve({ port: 0 }, {
        PAGANTIC_HOST: "::1",
        PAGANTIC_PORT: "9090",
        PAGANTIC_MAX_BODY_BYTES: "2048",
        PAGANTIC_REQUEST_TIMEOUT: "90 seconds",
        PAGANTIC_API_KEY: "secret"
      })
      expect(options).toMatchObject({ port: 0, host: "::1", maxBodyBytes: 2048, requestTimeout: Duration.seconds(90) })
      expect(options.apiKey === undefined ? undefined : Redacted.value(options.apiKey)).toBe("secret")
      expect(yield* resolve({}, {})).toMatchObject({ port: 8080, host: "127.0.0.1" })
    }))

  it.effect("both flags win over the environment", () =>
    Effect.gen(function* () {
      expect(yield* resolve({ port: 1234, host: "localhost" }, { PAGANTIC_PORT: "9090", PAGANTIC_HOST: "::1" })).toMatchObject({
        port: 1234,
        host: "localhost"
      })
    }))
})

// ---------------------------------------------------------------------------
// The real launcher, as a subprocess
// ---------------------------------------------------------------------------

interface Completed {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const launch = (
  args: ReadonlyArray<string>,
  timeout = 30_000,
  env: Record<string, string | undefined> = { NO_COLOR: "1" }
): Promise<Completed> =>
  new Promise((resolve) => {
    execFile(
      process.execPath,
      [launcher, ...args],
      { cwd: root, timeout, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null
        resolve({ code, stdout, stderr })
      }
    )
  })

describe("bin/pagantic.js (subprocess)", () => {
  it("a missing model file: exit 1 with INFERENCE_MODEL_UNAVAILABLE and the path", async () => {
    const run = await launch(["--model", "/nonexistent/model.gguf", "chat", "hi"])
    expect(run.code).toBe(1)
    expect(run.stderr).toContain("error: INFERENCE_MODEL_UNAVAILABLE: model file not found or not readable: /nonexistent/model.gguf")
  })

  it("an unknown flag: non-zero exit, the flag named", async () => {
    const run = await launch(["demo", "--bogus"])
    expect(run.code).not.toBe(0)
    expect(run.stderr).toContain("--bogus")
  })

  it("bad command lines: exit 1, one line on stderr naming the problem, no stack, nothing on stdout", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["--frobnicate", "chat", "hi"], "error: unknown option --frobnicate for pagantic; see pagantic --help"],
      [["--threads", "-1", "chat", "hi"], "error: --threads must be from 1 to 1024, got -1"],
      // with stdin left open: an empty message must not wait for interactive input
      [["chat", ""], "error: the message is empty"],
      [["plan", os.tmpdir()], `error: cannot read the plan file ${os.tmpdir()}: it is a directory`]
    ]
    // one at a time: each is a Node process compiling the CLI
    for (const [args, message] of cases) {
      const run = await launch(args)
      expect({ args, code: run.code, stderr: run.stderr, stdout: run.stdout }).toEqual({
        args,
        code: 1,
        stderr: `${message}\n`,
        stdout: ""
      })
    }
  }, 150_000)

  it("help has no ANSI escapes with NO_COLOR=1, nor when stdout is not a terminal", async () => {
    const noColor = await launch(["--help"], 30_000, { NO_COLOR: "1" })
    const piped = await launch(["chat", "--help"], 30_000, { NO_COLOR: undefined, FORCE_COLOR: undefined })
    const error = await launch(["chat", "--threads", "x", "hi"], 30_000, { NO_COLOR: undefined })
    expect(noColor.code).toBe(0)
    expect(noColor.stdout).toContain("USAGE")
    expect(noColor.stdout).not.toContain("\x1b")
    expect(piped.code).toBe(0)
    expect(piped.stdout).toContain("USAGE")
    expect(piped.stdout).not.toContain("\x1b")
    expect(error.stderr).toBe(`error: --threads expects an integer, got "x"\n`)
  }, 100_000)

  /** The address a `pagantic serve` child logs and the admin key of its page link, within 40 s. */
  const listening = async (child: ReturnType<typeof spawn>) => {
    const { address, key } = await ServeLog.listening(child, { withKey: true, withinMs: 40_000 })
    return { address, key: key! }
  }

  // 127.0.0.2 is loopback on Linux (not on macOS): a host other than the default, without leaving the machine
  it.runIf(process.platform === "linux")("serve --host without --port listens on that host (the port from PAGANTIC_PORT)", async () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-home-"))
    // a principal added before the start, to the keys file serve reads by default ($PAGANTIC_HOME/keys.json)
    const added = await launch(["keys", "add", "alice", "--role", "client"], 30_000, { NO_COLOR: "1", PAGANTIC_HOME: home })
    expect(added.code, added.stderr).toBe(0)
    const alice = added.stdout.trim()
    expect(alice).toMatch(/^pgk_[A-Za-z0-9_-]{43}$/)
    expect(added.stderr).toContain(`added alice (client) to ${path.join(home, "keys.json")}: the key above is shown only now`)
    const file = fs.readFileSync(path.join(home, "keys.json"), "utf8")
    expect(file).not.toContain(alice)
    expect(fs.statSync(path.join(home, "keys.json")).mode & 0o777).toBe(0o600)
    const child = spawn(process.execPath, [launcher, "serve", "--host", "127.0.0.2"], {
      cwd: root,
      env: { ...process.env, NO_COLOR: "1", PAGANTIC_PORT: "0", PAGANTIC_HOME: home },
      stdio: ["ignore", "pipe", "pipe"]
    })
    try {
      const { address, key } = await listening(child)
      expect(address).toMatch(/^http:\/\/127\.0\.0\.2:\d+$/)
      // it answers there; /health needs no key, everything else the one it made and kept in $PAGANTIC_HOME
      expect((await fetch(`${address}/health`)).status).toBe(200)
      expect(fs.readFileSync(path.join(home, "serve.key"), "utf8").trim()).toBe(key)
      expect(fs.statSync(path.join(home, "serve.key")).mode & 0o777).toBe(0o600)
      expect((await fetch(`${address}/v1/runs`)).status).toBe(401)
      expect((await fetch(`${address}/v1/events`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200)
      expect((await fetch(`${address}/v1/events`, { headers: { authorization: `Bearer ${alice}` } })).status).toBe(200)
      expect((await fetch(`${address}/v1/events`, { headers: { authorization: `Bearer ${alice}x` } })).status).toBe(401)
    } finally {
      child.kill("SIGTERM")
    }
  }, 60_000)

  it("serve --state: a query is a durable run of the state file, on the served model, read back under /v1/runs", async () => {
    const state = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-state-")), "state.db")
    const child = spawn(process.execPath, [launcher, "serve", "--threads", "1", "--state", state], {
      cwd: root,
      env: { ...process.env, NO_COLOR: "1", PAGANTIC_PORT: "0", PAGANTIC_HOME: path.dirname(state) },
      stdio: ["ignore", "pipe", "pipe"]
    })
    try {
      const { address, key } = await listening(child)
      // the key is kept with the state
      expect(fs.readFileSync(`${state}.key`, "utf8").trim()).toBe(key)
      const reply = await fetch(`${address}/v1/queries`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({
          kind: "infer.query.v1",
          input: { inline: "The soup was cold." },
          responders: [{ kind: "llm", model: "~model" }],
          answer_shape: { kind: "core.classification.v1", labels: ["positive", "negative", "neutral"] }
        }),
        signal: AbortSignal.timeout(30_000)
      })
      const body = await reply.json() as { query?: { runId?: string; pattern?: string }; error?: unknown }
      expect(reply.status, JSON.stringify(body).slice(100, 900)).toBe(200)
      const runId = body.query?.runId
      expect(runId).toEqual(expect.any(String))
      const shown = await fetch(`${address}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(10_000) })
      expect(shown.status).toBe(200)
      expect(await shown.json()).toMatchObject({ id: runId, status: "completed" })
    } finally {
      child.kill("SIGTERM")
    }
  }, 90_000)

  it("serve --no-auth beyond loopback: exit 1 before listening, saying why", async () => {
    const run = await launch(["serve", "--no-auth", "--host", "0.0.0.0"], 30_000, { NO_COLOR: "1", PAGANTIC_PORT: "0" })
    expect(run.code).toBe(1)
    expect(run.stderr).toContain("error: --no-auth is refused on 0.0.0.0: anyone who reaches it could run the model and its tools")
    expect(run.stdout + run.stderr).not.toContain("Listening on")
  }, 40_000)

  it("keys add: a role it does not know and a name that has a key are exit 1, naming them, and the file is left as it was", async () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-home-"))
    const env = { NO_COLOR: "1", PAGANTIC_HOME: home }
    const bogus = await launch(["keys", "add", "bob", "--role", "owner"], 30_000, env)
    expect(bogus.code).toBe(1)
    expect(bogus.stderr).toContain(`error: role: a role is "admin", "client" or "responder:<id>", not "owner"`)
    expect(bogus.stdout).toBe("")
    const first = await launch(["keys", "add", "bob", "--role", "client"], 30_000, env)
    expect(first.code).toBe(0)
    expect(first.stdout).toMatch(/^pgk_[A-Za-z0-9_-]{43}\n$/)
    const before = fs.readFileSync(path.join(home, "keys.json"), "utf8")
    const again = await launch(["keys", "add", "bob", "--role", "admin"], 30_000, env)
    expect(again.code).toBe(1)
    expect(again.stderr).toContain(`error: name: bob already has a key in ${path.join(home, "keys.json")}`)
    expect(again.stdout).toBe("")
    expect(fs.readFileSync(path.join(home, "keys.json"), "utf8")).toBe(before)
  }, 60_000)

  it("a schema file that is not JSON: exit 1 with a clear message", async () => {
    const file = tempFile("schema.json", "sentiment: positive | negative")
    const run = await launch(["extract", "--schema", file, "Great pasta!"])
    expect(run.code).toBe(1)
    expect(run.stderr).toContain(`error: the schema file ${file} is not JSON`)
  })

  it("task on the bundled model: its analyzer breaks the request up, the reviews and the sum run by phase", async () => {
    const run = await launch(
      ["task", "--threads", "1", 'Is this review positive or negative: "The soup was cold." and then add 5 and 8.'],
      30_000,
      { NO_COLOR: "1" }
    )
    expect(run.stderr).not.toContain("error:")
    expect(run.code).toBe(0)
    expect(run.stdout).toContain("phases: [t1] -> [t2]")
    expect(run.stdout).toMatch(/t1 \(sentiment\): \{"sentiment":"(positive|negative|neutral)"\}/)
    expect(run.stdout).toContain("t2 (calculator): 13")
  }, 40_000)

  it("demo on the bundled model, end to end", async () => {
    const started = Date.now()
    const state = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-state-")), "state.db")
    const run = await launch(["demo", "--threads", "1"], 50_000, { NO_COLOR: "1", PAGANTIC_STATE: state })
    expect(run.stderr).not.toContain("error:")
    expect(run.code).toBe(0)
    expect(run.stdout).toContain("model: pagantic-tiny")
    // the tool-using chat: the model calls the calculator and reads its result
    expect(run.stdout).toContain(`[tool call] calculator({"expression":"12 + 7"})`)
    expect(run.stdout).toContain("[tool result] 19")
    expect(run.stdout).toContain("The answer is 19.")
    // the extraction and the vote give labels the schema allows, the vote with a confidence
    expect(run.stdout).toMatch(/output: \{"sentiment":"(positive|negative|neutral)"\}/)
    expect(run.stdout.match(/replica \d: /g)).toHaveLength(5)
    expect(run.stdout).toMatch(/winner: \{"sentiment":"(positive|negative|neutral)"\}, confidence (0|1)\.\d\d/)
    expect(run.stdout).toContain("sum (tool): 19")
    expect(run.stdout).toMatch(/classify \(infer\): \{"sentiment": "(positive|negative|neutral)"\}/)
    // the tasks: the model's TaskList for the demo's request, run by phase
    expect(run.stdout).toContain("phases: [t1, t2] -> [t3]")
    expect(run.stdout).toMatch(/t1 \(sentiment\): \{"sentiment":"(positive|negative|neutral)"\}/)
    expect(run.stdout).toContain("t3 (calculator): 49")
    expect(run.stdout).toMatch(/done in \d+\.\d\ds/)
    // the durable run on the state file: two journaled steps, the model's label
    expect(run.stdout).toMatch(/run \S+ on \S+state\.db: completed/)
    expect(run.stdout).toMatch(/DO classify: (positive|negative|neutral)\n/)
    // the waterfall query: the model's labels per stage, then the committed answer
    expect(run.stdout).toMatch(/stage 1 \(greedy, warm\): (greedy|warm) (positive|negative|neutral), (greedy|warm) (positive|negative|neutral)/)
    expect(run.stdout).toMatch(/stages tried: [12] of 2/)
    expect(run.stdout).toMatch(/answer: \{"category":"(positive|negative|neutral)"\}, confidence \d\.\d\d \(consensus, \d of \d valid\); waterfall (accepted|not_accepted), from stage [12], [25] CALLs/)
    // the escalation: the model's tier, the human's slot answered by a child `pagantic respond`, the KNOW read back
    expect(run.stdout).toMatch(/run \S+ waits for the human did:example:reviewer on slot tier-1\/slot\/0\/1/)
    expect(run.stdout).toMatch(/\$ pagantic respond \S+ tier-1\/slot\/0\/1 --secret \S+ --submit '/)
    expect(run.stdout).toMatch(/\| submit: Accepted \(run \S+, slot tier-1\/slot\/0\/1\)/)
    expect(run.stdout).toMatch(/DO tier-0\/do\/0: \{"kind":"core.classification.v1","category":"(positive|negative|neutral)"\}/)
    expect(run.stdout).toContain(`answer: {"category":"neutral"}, confidence 0.95 (best_of, 1 of 1 valid); escalate accepted, from tier 2, 2 CALLs`)
    expect(Date.now() - started).toBeLessThan(50_000)
  }, 60_000)
})
