import { describe, expect, it, layer } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Gbnf from "../src/domain/Gbnf.js"
import * as Message from "../src/domain/Message.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import * as GrammarCheckerLive from "../src/layers/LlamaGrammarChecker.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { calculator } from "../src/layers/tools/Calculator.js"
import * as RunLoop from "../src/programs/RunLoop.js"
import { GrammarChecker } from "../src/services/GrammarChecker.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import * as Tool from "../src/services/ToolRegistry.js"
import { add } from "./support/tools.js"

const engine = ScriptedEngine.layer
const tools = (...ts: ReadonlyArray<Tool.Tool<any, any>>) => Registry.layer(ts)

// Plain describes first: @effect/vitest's layer() assigns its runtime to the shared it.effect.
describe("RunLoop strategies (scripted engine)", () => {
  describe("react", () => {
    it.effect("acts on a JSON tool action, feeds the result back as an observation, finishes with the answer", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("What is 2 + 3?")], { strategy: RunLoop.react() })
        expect(result.stopReason).toBe("finish")
        expect(result.output).toEqual(Option.some("5"))
        expect(result.toolCalls.map((r) => [r.name, r.result])).toEqual([["add", "5"]])
        expect(result.messages[1]!.metadata).toEqual({ thought: "I should add." })
        expect(result.messages[1]!.toolCalls[0]).toMatchObject({ id: "call_1", name: "add", arguments: { a: 2, b: 3 } })
        const requests = yield* ScriptedEngine.requests
        // no native tools: the tools are described in the system message, results come back as observations
        expect(requests[0]!.tools).toEqual([])
        expect(requests[0]!.messages[0]!.role).toBe("system")
        expect(requests[0]!.messages[0]!.content).toContain("- add: Adds two numbers")
        const second = requests[1]!.messages
        expect(second.at(-1)).toMatchObject({ role: "user", content: "Observation from add: 5" })
        expect(second.at(-2)).toMatchObject({ role: "assistant", toolCalls: [] })
      }).pipe(
        Effect.provide(Layer.mergeAll(
          engine([
            ScriptedEngine.reply(`{"thought": "I should add.", "tool": "add", "arguments": {"a": 2, "b": 3}}`),
            ScriptedEngine.reply(`{"thought": "done", "finish": "5"}`)
          ]),
          tools(add),
          IdGenerator.Test
        ))
      ))

    it.effect("sends a schema naming the tools and a grammar of exactly the two action shapes", () =>
      Effect.gen(function* () {
        yield* RunLoop.run([Message.user("hi")], { strategy: RunLoop.react() })
        const [request] = yield* ScriptedEngine.requests
        // a tool call or an answer, each with every key required
        expect(request!.schema?.anyOf).toEqual([
          {
            type: "object",
            properties: { thought: { type: "string" }, tool: { type: "string", enum: ["add"] }, arguments: { type: "object" } },
            required: ["thought", "tool", "arguments"]
          },
          { type: "object", properties: { thought: { type: "string" }, finish: { type: "string" } }, required: ["thought", "finish"] }
        ])
        expect(request!.grammar).toBe(RunLoop.reactGrammar(["add"]))
        expect(Either.isRight(Gbnf.check(request!.grammar!))).toBe(true)
      }).pipe(Effect.provide(Layer.merge(engine([ScriptedEngine.reply(`{"thought": "t", "finish": "hello"}`)]), tools(add)))))

    it.effect("the instructions join the caller's system prompt instead of adding a second one", () =>
      Effect.gen(function* () {
        yield* RunLoop.run([Message.system("You are terse."), Message.user("hi")], { strategy: RunLoop.react() })
        const [request] = yield* ScriptedEngine.requests
        expect(request!.messages.map((m) => m.role)).toEqual(["system", "user"])
        expect(request!.messages[0]!.content).toMatch(/^You are terse\.\n\nAnswer with one JSON object/)
      }).pipe(Effect.provide(engine([ScriptedEngine.reply(`{"thought": "t", "finish": "hello"}`)]))))

    it.effect("a reply that is no action is answered with a correction while iterations remain", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("hi")], { strategy: RunLoop.react() })
        expect(result.stopReason).toBe("finish")
        expect(result.output).toEqual(Option.some("hello"))
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.at(-1)!.content).toContain("CONSTRAINT_SCHEMA_INVALID")
      }).pipe(Effect.provide(engine([
        ScriptedEngine.reply(`{"thought": "t", "answer": "hello"}`),
        ScriptedEngine.reply(`{"thought": "t", "finish": "hello"}`)
      ]))))

    it.effect("a reply that is no action on the last iteration ends the run with the ConstraintFailure", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("hi")], { strategy: RunLoop.react(), maxIterations: 1 })
        expect(result.stopReason).toBe("error")
        expect(Option.map(result.error, (e) => e.code)).toEqual(Option.some("CONSTRAINT_SCHEMA_INVALID"))
      }).pipe(Effect.provide(engine([ScriptedEngine.reply("plain prose")]))))
  })

  describe("structured", () => {
    const Sum = Schema.Struct({ total: Schema.Number, unit: Schema.Literal("apples", "pears") })

    it.effect("decodes the answer into the schema's type; the schema goes on the request, no tools", () =>
      Effect.gen(function* () {
        const strategy = yield* RunLoop.structured(Sum)
        const result = yield* RunLoop.run([Message.user("How many?")], { strategy })
        expect(result.stopReason).toBe("finish")
        // enum normalised by the Constraint pipeline
        expect(result.output).toEqual(Option.some({ total: 3, unit: "apples" }))
        const [request] = yield* ScriptedEngine.requests
        expect(request!.schema).toMatchObject({ type: "object", properties: { unit: { enum: ["apples", "pears"] } } })
        expect(request!.tools).toEqual([])
      }).pipe(Effect.provide(Layer.mergeAll(
        engine([ScriptedEngine.reply(`{"total": 3, "unit": "Apples"}`)]),
        tools(add),
        ConstraintLive.layer
      ))))

    it.effect("a reply that breaks the schema is re-asked with what was wrong", () =>
      Effect.gen(function* () {
        const strategy = yield* RunLoop.structured(Sum)
        const result = yield* RunLoop.run([Message.user("How many?")], { strategy })
        expect(result.output).toEqual(Option.some({ total: 4, unit: "pears" }))
        expect(result.iterations).toBe(2)
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.at(-1)!.content).toContain("Your previous reply was rejected")
      }).pipe(Effect.provide(Layer.merge(
        engine([ScriptedEngine.reply(`{"total": "four"}`), ScriptedEngine.reply(`{"total": 4, "unit": "pears"}`)]),
        ConstraintLive.layer
      ))))
  })

  describe("tool use policy", () => {
    it.effect("'none' offers no tools", () =>
      Effect.gen(function* () {
        yield* RunLoop.run([Message.user("hi")], { strategy: RunLoop.nativeTools({ toolUsePolicy: "none" }) })
        const [request] = yield* ScriptedEngine.requests
        expect(request!.tools).toEqual([])
      }).pipe(Effect.provide(Layer.merge(engine([ScriptedEngine.reply("hello")]), tools(add)))))

    it.effect("'required' re-asks an answer given before any tool ran", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("2+3")], { strategy: RunLoop.nativeTools({ toolUsePolicy: "required" }) })
        expect(result.output).toEqual(Option.some("5"))
        expect(result.toolCalls).toHaveLength(1)
        const requests = yield* ScriptedEngine.requests
        expect(requests[1]!.messages.at(-1)!.content).toBe("Use one of the tools (add) before answering.")
      }).pipe(Effect.provide(Layer.merge(
        engine([
          ScriptedEngine.reply("probably 5"),
          ScriptedEngine.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }]),
          ScriptedEngine.reply("5")
        ]),
        tools(add)
      ))))
  })
})

describe("the ReAct grammar (llama.cpp's grammar checker)", () => {
  layer(GrammarCheckerLive.layer, { excludeTestServices: true })("accepts exactly the two action shapes", (it) => {
    it.effect("tool calls of offered tools and finishes match; anything else does not", () =>
      Effect.gen(function* () {
        const checker = yield* GrammarChecker
        const grammar = RunLoop.reactGrammar(["add", "calculator"])
        const yes = [
          `{"thought": "add them", "tool": "add", "arguments": {"a": 2, "b": 3}}`,
          `{"thought":"x","tool":"calculator","arguments":{"expression":"12 + 7"}}`,
          `{"thought": "ok", "finish": "19"}`
        ]
        const no = [
          `{"thought": "x", "tool": "rm", "arguments": {}}`,
          `{"thought": "x"}`,
          `{"finish": "19"}`,
          `{"thought": "x", "finish": 19}`,
          `The answer is 19.`
        ]
        for (const text of yes) expect(yield* checker.matches(text, grammar)).toBe(true)
        for (const text of no) expect(yield* checker.matches(text, grammar)).toBe(false)
        expect(yield* checker.matches(`{"thought": "x", "finish": "y"}`, RunLoop.reactGrammar([]))).toBe(true)
        expect(yield* checker.matches(`{"thought": "x", "tool": "add", "arguments": {}}`, RunLoop.reactGrammar([]))).toBe(false)
      }), 60_000)
  })
})

layer(Layer.mergeAll(LlamaEngine.layer({ sequences: 1 }), Registry.layer([calculator])), { excludeTestServices: true })(
  "RunLoop on the bundled model",
  (it) => {
    it.effect("the native strategy answers 'What is 12 plus 7?' through the calculator tool", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("What is 12 plus 7?")], {
          maxIterations: 4,
          request: { temperature: 0, maxTokens: 64 }
        })
        expect(result.stopReason).toBe("finish")
        expect(result.toolCalls.map((r) => r.name)).toContain("calculator")
        expect(result.toolCalls.find((r) => r.name === "calculator")!.result).toBe("19")
        expect(Option.getOrElse(result.output, () => "")).toContain("19")
      }), 120_000)

    it.effect("ReAct: llama.cpp decodes by the grammar and schema the strategy sends, so every reply is an action (the model is not trained for ReAct: only the shape is checked)", () =>
      Effect.gen(function* () {
        const result = yield* RunLoop.run([Message.user("What is 12 plus 7?")], {
          strategy: RunLoop.react(),
          maxIterations: 3,
          request: { temperature: 0, maxTokens: 200 }
        })
        expect(["finish", "max_iterations"]).toContain(result.stopReason)
        const replies = result.messages.filter((m) => m.role === "assistant")
        expect(replies.length).toBeGreaterThan(0)
        for (const reply of replies) {
          expect(Either.isRight(Schema.decodeUnknownEither(Schema.parseJson(RunLoop.ReactAction))(reply.content))).toBe(true)
        }
      }), 120_000)
  }
)
