/**
 * `pagantic query q.json` (issue #16): the query from a file, its llm responders
 * served by the command's engine (a ScriptedEngine here, output captured), the
 * KNOW printed for people or as JSON; wrong queries and files are one clear line.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Cli from "../src/adapters/Cli.js"
import { llmModelsOf } from "../src/adapters/cli/CommandRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Engine } from "../src/services/Engine.js"

const runCli = (args: ReadonlyArray<string>, script: ReadonlyArray<ScriptedEngine.Step>) =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const { control, engine } = yield* ScriptedEngine.make(script)
    const io = Cli.CliIo.of({
      write: (text) => Ref.update(out, (o) => o + text),
      error: (line) => Ref.update(err, (e) => [...e, line]),
      readLine: () => Effect.succeed(Option.none()),
      colors: false
    })
    const engines = Cli.CliEngine.of({ make: () => Layer.succeed(Engine, engine) })
    const exit = yield* Effect.exit(
      Cli.run(["node", "pagantic", ...args]).pipe(
        Effect.provideService(Cli.CliIo, io),
        Effect.provideService(Cli.CliEngine, engines),
        Effect.provide(NodeContext.layer)
      )
    )
    return { exit, out: yield* Ref.get(out), err: yield* Ref.get(err), requests: yield* control.requests }
  })

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-query-"))
const write = (name: string, value: unknown) => {
  const file = path.join(dir, name)
  fs.writeFileSync(file, typeof value === "string" ? value : JSON.stringify(value))
  return file
}

const classify = (category: string, confidence: number) => ScriptedEngine.reply(JSON.stringify({ category, _confidence: confidence }))

const query = (fields: Record<string, unknown> = {}) => ({
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  responders: [{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }],
  fold: { function: "best_of" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
  ...fields
})

describe("pagantic query", { timeout: 20_000 }, () => {
  it.effect("runs the query on the engine (an llm responder per alias) and prints the KNOW", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["query", write("q.json", query())], [classify("research", 0.9), classify("news", 0.4)])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests).toHaveLength(2)
      expect(run.requests[0]!.messages.map((m) => m.content).join("\n")).toContain("a grant proposal on protein folding")
      expect(run.out).toContain("answer: research\n")
      expect(run.out).toContain("confidence: 0.90 (best_of, 2 of 2 valid)\n")
      expect(run.out).toContain("pattern: single_shot (accepted), 2 calls")
    }))

  it.effect("--json prints the SystemResponse with the KNOW under query", () =>
    Effect.gen(function* () {
      const run = yield* runCli(["query", "--json", write("q2.json", query())], [classify("news", 0.7), classify("news", 0.6)])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      const printed = JSON.parse(run.out)
      expect(printed).toMatchObject({
        content: "news",
        confidenceSource: "fold",
        query: { status: "completed", pattern: "single_shot", calls: 2, know: { kind: "KNOW", body: { category: "news" } } }
      })
    }))

  it.effect("a verify query on one engine: primary and verifier agree in 2 calls", () =>
    Effect.gen(function* () {
      const file = write("verify.json", query({
        responders: undefined,
        orchestration: { pattern: "verify", primary: [{ kind: "llm", model: "~a" }], verifier: { kind: "llm", model: "~b" }, tiebreaker: { kind: "llm", model: "~c" } }
      }))
      const run = yield* runCli(["query", file], [classify("research", 0.9), classify("research", 0.8)])
      expect(Exit.isSuccess(run.exit)).toBe(true)
      expect(run.requests).toHaveLength(2)
      expect(run.out).toContain("pattern: verify (accepted), 2 calls")
    }))

  it.effect("a wrong query, a human responder and a bad file are one clear line each", () =>
    Effect.gen(function* () {
      const wrong = yield* runCli(["query", write("wrong.json", query({ top_k: 0 }))], [])
      expect(Exit.isFailure(wrong.exit)).toBe(true)
      expect(wrong.err.join("\n")).toContain("CONFIG_INVALID_REQUEST")
      expect(wrong.err.join("\n")).toContain("top_k")

      const human = yield* runCli(["query", write("human.json", query({ responders: [{ kind: "actor", did: "did:example:alice" }] }))], [])
      expect(Exit.isFailure(human.exit)).toBe(true)
      expect(human.err.join("\n")).toContain("responders.0: a human (actor) responder needs durable runs")

      const notJson = yield* runCli(["query", write("bad.json", "{ nope")], [])
      expect(Exit.isFailure(notJson.exit)).toBe(true)
      expect(notJson.err.join("\n")).toContain("bad.json")

      const missing = yield* runCli(["query", path.join(dir, "absent.json")], [])
      expect(Exit.isFailure(missing.exit)).toBe(true)
      expect(missing.err.join("\n")).toContain("absent.json")
    }))

  it("llmModelsOf: every llm predicate's model, aliases without the tilde, once each, not inside an answer schema", () => {
    expect(llmModelsOf({
      responders: [{ kind: "llm", model: "~a" }, { kind: "pattern", capability: "x" }],
      orchestration: { tiers: [{ responders: [{ kind: "llm", model: "b" }, { kind: "llm", model: "~a" }] }] },
      answer_shape: { kind: "core.json.v1", schema: { properties: { x: { kind: "llm", model: "~ghost" } } } }
    })).toEqual(["a", "b"])
  })
})
