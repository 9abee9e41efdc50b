/**
 * Grounded analysis: the tasks of `AnalyzerConfig.quoted` processors take one of
 * the passages the request quotes as their description, held to that by the
 * TaskList schema (an `anyOf` of two task shapes), so a constraining engine copies
 * the passage exactly. Unit tests on the schema and the passages, the schema that
 * reaches a scripted engine, and the bundled model, which misspells a long review
 * when it copies it alone.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import { Task, TaskList, taskListFor, toJson } from "../src/domain/Task.js"
import * as ConstraintLive from "../src/layers/JsonConstraint.js"
import { toGbnfSchema } from "../src/layers/llama/ChatHistory.js"
import { BUNDLED_ANALYZER } from "../src/layers/llama/PaganticChatWrapper.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Orchestrator from "../src/programs/Orchestrator.js"
import * as Analyzer from "../src/programs/orchestrator/Analyzer.js"
import * as TaskParser from "../src/programs/orchestrator/TaskParser.js"
import * as TaskProcessor from "../src/programs/orchestrator/TaskProcessor.js"
import * as Structured from "../src/programs/Structured.js"
import { Constraint } from "../src/services/Constraint.js"
import * as RetryPolicy from "../src/services/RetryPolicy.js"

describe("quotedPassages", () => {
  it("straight and curly quotes, in the order they appear, each once, trimmed, empty ones left out", () => {
    expect(
      Analyzer.quotedPassages(`Classify \u201c Lovely staff. \u201d and "Cold soup." then "" and "Cold soup." again, also " ok "`)
    ).toEqual(["Lovely staff.", "Cold soup.", "ok"])
  })

  it("an unclosed quote is no passage; a passage over the length bound is left out", () => {
    expect(Analyzer.quotedPassages(`Classify "Lovely staff.`)).toEqual([])
    const long = "a".repeat(Analyzer.maxQuotedPassageChars + 1)
    expect(Analyzer.quotedPassages(`"${long}" and "short"`)).toEqual(["short"])
  })

  it("groundingFor: only with quoted processors, at least one passage, at most maxQuotedPassages and maxQuotedChars", () => {
    expect(Analyzer.groundingFor(`Classify "a"`, {})).toBeUndefined()
    expect(Analyzer.groundingFor(`Classify "a"`, { quoted: [] })).toBeUndefined()
    expect(Analyzer.groundingFor(`Classify nothing`, { quoted: ["sentiment"] })).toBeUndefined()
    expect(Analyzer.groundingFor(`Classify "a" and "b"`, { quoted: ["sentiment"] })).toEqual({
      processors: ["sentiment"],
      passages: ["a", "b"]
    })
    const many = Array.from({ length: Analyzer.maxQuotedPassages + 1 }, (_, i) => `"r${i}"`).join(", ")
    expect(Analyzer.groundingFor(many, { quoted: ["sentiment"] })).toBeUndefined()
    const big = Array.from({ length: 9 }, (_, i) => `"${String(i).repeat(Analyzer.maxQuotedPassageChars)}"`).join(" ")
    expect(Analyzer.groundingFor(big, { quoted: ["sentiment"] })).toBeUndefined()
    const fits = Array.from({ length: 8 }, (_, i) => `"${String(i).repeat(Analyzer.maxQuotedPassageChars)}"`).join(" ")
    expect(Analyzer.groundingFor(fits, { quoted: ["sentiment"] })?.passages.length).toBe(8)
    expect(BUNDLED_ANALYZER.quoted).toEqual(["sentiment"])
  })
})

describe("taskListFor with a grounding", () => {
  const schema = taskListFor(["sentiment", "calculator"], { processors: ["sentiment"], passages: ["Great phone.", "Cold soup."] })
  const decode = (u: unknown) => Schema.decodeUnknownEither(schema)(u)
  const review = { id: "t1", type: "sentiment", processor: "sentiment", priority: 1, dependencies: [], description: "Great phone.", metadata: {} }
  const sum = { id: "t2", type: "calculation", processor: "calculator", priority: 2, dependencies: ["t1"], description: "Add 2 and 3", metadata: { expression: "2 + 3" } }

  it("a grounded task's description is one of the passages; the other processors' are free", () => {
    const ok = decode({ analysis: "a", tasks: [review, sum] })
    expect(Either.isRight(ok) && ok.right).toBeInstanceOf(TaskList)
    expect(Either.isRight(ok) && ok.right.tasks[0]).toBeInstanceOf(Task)
    expect(Either.isRight(decode({ analysis: "a", tasks: [{ ...review, description: "Great phone" }] }))).toBe(false)
    expect(Either.isRight(decode({ analysis: "a", tasks: [{ ...sum, description: "anything at all" }] }))).toBe(true)
    expect(Either.isRight(decode({ analysis: "a", tasks: [{ ...review, processor: "search" }] }))).toBe(false)
  })

  it("its JSON schema is an anyOf of the two task shapes, the passages an enum; llama.cpp gets a oneOf", () =>
    Effect.gen(function* () {
      const json = (yield* Constraint).toJsonSchema(schema)
      const items = json.properties?.tasks?.items
      expect(items?.anyOf?.map((m) => m.properties?.processor?.enum)).toEqual([["sentiment"], ["calculator"]])
      expect(items?.anyOf?.map((m) => m.properties?.description)).toEqual([
        { type: "string", enum: ["Great phone.", "Cold soup."] },
        { type: "string" }
      ])
      expect(Object.keys(items?.anyOf?.[0]?.properties ?? {})).toEqual(
        ["id", "type", "processor", "priority", "dependencies", "description", "metadata"]
      )
      const gbnf = toGbnfSchema(items!) as { oneOf?: ReadonlyArray<unknown> }
      expect(gbnf.oneOf?.length).toBe(2)
      // The raw subset validates the same way (an HTTP client's schema takes this path).
      const raw = Schema.decodeUnknownEither(JsonSchema.toEffectSchema(items!))
      expect(Either.isRight(raw(review))).toBe(true)
      expect(Either.isRight(raw({ ...review, description: "Great" }))).toBe(false)
      expect(Either.isRight(raw(sum))).toBe(true)
    }).pipe(Effect.provide(ConstraintLive.layer), Effect.runPromise))

  it("every processor grounded: one task shape, no anyOf", () =>
    Effect.gen(function* () {
      const only = taskListFor(["sentiment"], { processors: ["sentiment"], passages: ["x"] })
      const items = (yield* Constraint).toJsonSchema(only).properties?.tasks?.items
      expect(items?.anyOf).toBeUndefined()
      expect(items?.properties?.description?.enum).toEqual(["x"])
    }).pipe(Effect.provide(ConstraintLive.layer), Effect.runPromise))
})

describe("an orchestrator with quoted processors", () => {
  const noop = TaskProcessor.make((t) => Effect.succeed(t.description))
  const list = new TaskList({
    analysis: "one review",
    tasks: [new Task({ id: "t1", type: "sentiment", processor: "sentiment", priority: 1, description: "Cold soup." })]
  })

  it.effect("asks the engine under the grounded schema; without quotes in the request, under the plain one", () =>
    Effect.gen(function* () {
      const orchestrator = yield* Orchestrator.make({
        processors: { sentiment: noop, calculator: noop },
        analyzer: { quoted: ["sentiment"] }
      })
      const result = yield* orchestrator.process(`Classify "Cold soup." and add 2 and 3`)
      expect(result.completed.map((r) => r.output)).toEqual(["Cold soup."])
      yield* orchestrator.process("Classify nothing at all")
      const [grounded, plain] = yield* ScriptedEngine.requests
      const sentimentShape = grounded!.schema?.properties?.tasks?.items?.anyOf?.find((m) =>
        m.properties?.processor?.enum?.includes("sentiment")
      )
      expect(sentimentShape?.properties?.description?.enum).toEqual(["Cold soup."])
      expect(plain!.schema?.properties?.tasks?.items?.anyOf).toBeUndefined()
      expect(plain!.schema?.properties?.tasks?.items?.properties?.description).toEqual({ type: "string" })
    }).pipe(
      Effect.provide(
        Layer.merge(ScriptedEngine.layer([ScriptedEngine.reply(toJson(list)), ScriptedEngine.reply(toJson(list))]), ConstraintLive.layer)
      )
    ))

  it.effect("a reply whose description is not a quoted passage is rejected (an engine that does not constrain)", () =>
    Effect.gen(function* () {
      const orchestrator = yield* Orchestrator.make({
        processors: { sentiment: noop },
        analyzer: { quoted: ["sentiment"], retry: RetryPolicy.none }
      })
      const failure = yield* Effect.flip(orchestrator.process(`Classify "Cold soup."`))
      expect(failure.code).toBe("CONSTRAINT_ENUM_UNRECOGNIZED")
      expect("violations" in failure && failure.violations).toEqual(['$.tasks[0].description: Expected "Cold soup.", actual "Cold sop."'])
    }).pipe(
      Effect.provide(
        Layer.merge(
          ScriptedEngine.layer([
            ScriptedEngine.reply(
              toJson(new TaskList({ ...list, tasks: [new Task({ ...list.tasks[0]!, description: "Cold sop." })] }))
            )
          ]),
          ConstraintLive.layer
        )
      )
    ))
})

// ---------------------------------------------------------------------------
// On the bundled model
// ---------------------------------------------------------------------------

/** A held-out request (training/eval/decomposition.jsonl) whose review the model alone misspells greedily. */
const request = `Classify this review: "This tablet was absolutely uncomfortable. We were there in July.".`
const review = "This tablet was absolutely uncomfortable. We were there in July."

const analyze = (grounded: boolean) =>
  Structured.run(
    [
      Message.system(Analyzer.renderInstruction(BUNDLED_ANALYZER, TaskParser.json())),
      Message.user(Analyzer.renderRequest(request, {}, ["sentiment", "calculator"]))
    ],
    {
      schema: taskListFor(["sentiment", "calculator"], grounded ? Analyzer.groundingFor(request, BUNDLED_ANALYZER) : undefined),
      temperature: 0,
      maxTokens: 768,
      retry: RetryPolicy.none
    }
  ).pipe(Effect.map((r) => r.value.tasks.map((t) => [t.processor, t.description])))

layer(Layer.merge(LlamaEngine.layer({ sequences: 1 }), ConstraintLive.layer), { excludeTestServices: true })(
  "grounded analysis on the bundled model",
  (it) => {
    it.effect("alone the model misspells the review it copies; grounded, the grammar copies it exactly", () =>
      Effect.gen(function* () {
        const alone = yield* analyze(false)
        expect(alone.length).toBe(1)
        expect(alone[0]![0]).toBe("sentiment")
        expect(alone[0]![1]).not.toBe(review)
        expect(yield* analyze(true)).toEqual([["sentiment", review]])
      }), 120_000)
  }
)
