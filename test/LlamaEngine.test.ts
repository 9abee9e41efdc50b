/**
 * The llama.cpp engine against the real bundled model file (models/pagantic-tiny.gguf).
 * Mechanics only (grammars, streaming, sequences, cancellation, limits): they hold
 * whether the model is well trained or not, and every generation is bounded.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import { vi } from "vitest"
import * as Either from "effect/Either"
import * as Chunk from "effect/Chunk"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { getLlama, LlamaGrammar, LlamaLogLevel } from "node-llama-cpp"
import type { ChatWrapperGenerateContextStateOptions, Llama } from "node-llama-cpp"
import * as Schema from "effect/Schema"
import { InferenceFailure as InferenceFailureSchema } from "../src/domain/Failure.js"
import type { InferenceFailure } from "../src/domain/Failure.js"
import * as JsonSchema from "../src/domain/JsonSchema.js"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { toChatHistory } from "../src/layers/llama/ChatHistory.js"
import * as Gguf from "../src/layers/llama/Gguf.js"
import * as Grammars from "../src/layers/llama/Grammars.js"
import { Lru } from "../src/layers/llama/Lru.js"
import * as SequencePool from "../src/layers/llama/SequencePool.js"
import {
  BUNDLED_CALCULATOR_TOOL,
  BUNDLED_MODEL_NAME,
  PaganticChatWrapper
} from "../src/layers/llama/PaganticChatWrapper.js"
import { Engine, InferenceRequest, runParts } from "../src/services/Engine.js"
import type { StreamPart } from "../src/services/Engine.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import { writeTinyModel } from "./fixtures/llamaTinyModel.js"

/** The bundled model's chat wrapper, counting its renders. */
class CountingWrapper extends PaganticChatWrapper {
  rendered = 0
  override generateContextState(options: ChatWrapperGenerateContextStateOptions) {
    this.rendered++
    return super.generateContextState(options)
  }
}

/** A grammar with no accepting end: generation can only stop at maxTokens or by interruption. */
const ENDLESS = "root ::= [a-z] root"

const request = (fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> & { readonly prompt?: string }) =>
  new InferenceRequest({ messages: [Message.user(fields.prompt ?? "Tell me a story.")], ...fields })

const calculator = new Message.ToolDefinition({
  name: BUNDLED_CALCULATOR_TOOL.name,
  description: BUNDLED_CALCULATOR_TOOL.description,
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] }
})

const now = Effect.sync(() => performance.now())

/** Runs streams at once; returns, per stream, when its first text arrived and when it finished. */
const overlap = (engine: Engine["Type"], n: number) =>
  Effect.forEach(
    Array.from({ length: n }, (_, i) => i),
    (i) =>
      Effect.gen(function*() {
        let first = Infinity
        yield* engine.stream(request({ prompt: `story ${i}`, grammar: ENDLESS, maxTokens: 80 })).pipe(
          Stream.runForEach((part) =>
            Effect.sync(() => {
              if (part._tag === "TextDelta" && first === Infinity) first = performance.now()
            })
          )
        )
        return { first, finished: yield* now }
      }),
    { concurrency: "unbounded" }
  )

// ---------------------------------------------------------------------------
// History conversion (pure)
// ---------------------------------------------------------------------------

describe("LlamaEngine chat history", () => {
  it("keeps a tool round in one model item, results attached to their calls", () => {
    const call = new Message.ToolCall({ id: "c1", name: "calculator", arguments: { expression: "1 + 2" } })
    const converted = toChatHistory([
      Message.system("sys"),
      Message.user("What is 1 plus 2?"),
      Message.assistant("", [call]),
      Message.toolResult(new Message.ToolResult({ callId: "c1", name: "calculator", content: "3", isError: false })),
      Message.assistant("It is 3."),
      Message.user("Thanks")
    ])
    expect(converted).toEqual({
      history: [
        { type: "system", text: "sys" },
        { type: "user", text: "What is 1 plus 2?" },
        {
          type: "model",
          response: [
            { type: "functionCall", name: "calculator", params: { expression: "1 + 2" }, result: "3", startsNewChunk: true },
            "It is 3."
          ]
        },
        { type: "user", text: "Thanks" },
        { type: "model", response: [] }
      ]
    })
  })

  it("rejects a tool result that answers no call", () => {
    const converted = toChatHistory([
      Message.user("hi"),
      Message.toolResult(new Message.ToolResult({ callId: "nope", name: "calculator", content: "3", isError: false }))
    ])
    expect(converted).toEqual({ _tag: "OrphanToolResult", toolCallId: "nope", name: "calculator" })
  })
})

// ---------------------------------------------------------------------------
// The sequence pool (pure)
// ---------------------------------------------------------------------------

describe("LlamaEngine sequence pool", () => {
  const take = (pool: SequencePool.SequencePool<string>, session?: string, affinity?: (value: string) => number) =>
    pool.withSlot(session, affinity, (slot) => Effect.succeed(slot.value))

  it.effect("a session returns to its sequence although others used the pool in between", () =>
    Effect.gen(function*() {
      const pool = yield* SequencePool.make(["a", "b", "c"], { maxPinnedSessions: 2 })
      const first = yield* take(pool, "s1")
      for (let i = 0; i < 5; i++) {
        expect(yield* take(pool)).not.toBe(first)
        expect(yield* take(pool, "s1")).toBe(first)
      }
    }))

  it.effect("without a session, the sequence with the best affinity wins", () =>
    Effect.gen(function*() {
      const pool = yield* SequencePool.make(["a", "b", "c"], { maxPinnedSessions: 2 })
      expect(yield* take(pool, undefined, (v) => (v === "b" ? 10 : 0))).toBe("b")
      expect(yield* take(pool, undefined, (v) => (v === "c" ? 10 : 0))).toBe("c")
    }))

  it.effect("pins are bounded: the least recently used session loses its sequence", () =>
    Effect.gen(function*() {
      const pool = yield* SequencePool.make(["a", "b", "c"], { maxPinnedSessions: 2 })
      yield* take(pool, "s1")
      yield* take(pool, "s2")
      yield* take(pool, "s3")
      const { sessions } = yield* pool.snapshot
      expect(sessions.filter((s) => s !== undefined).sort()).toEqual(["s2", "s3"])
    }))

  it.effect("when all sequences are busy, callers wait; an interrupted waiter takes nothing", () =>
    Effect.gen(function*() {
      const pool = yield* SequencePool.make(["only"], { maxPinnedSessions: 0 })
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(pool.withSlot(undefined, undefined, () => Deferred.await(release)))
      yield* Effect.yieldNow()
      const waiter = yield* Effect.fork(take(pool))
      const interrupted = yield* Effect.fork(take(pool))
      yield* Effect.yieldNow()
      expect((yield* pool.snapshot).busy).toBe(1)
      expect(waiter.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(interrupted)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      expect(yield* Fiber.join(waiter)).toBe("only")
      expect((yield* pool.snapshot).busy).toBe(0)
      expect(yield* take(pool)).toBe("only")
    }))
})

// ---------------------------------------------------------------------------
// Request grammars: checked, compiled quietly, cached in a bounded LRU
// ---------------------------------------------------------------------------

describe("LlamaEngine request grammars", () => {
  it("the LRU keeps its capacity, refreshes what is read and drops the stalest", () => {
    const lru = new Lru<string, number>(3)
    for (const [i, key] of ["a", "b", "c"].entries()) lru.set(key, i)
    expect(lru.get("a")).toBe(0)
    lru.set("d", 3)
    expect(lru.size).toBe(3)
    expect(lru.get("b")).toBeUndefined()
    expect([lru.get("a"), lru.get("c"), lru.get("d")]).toEqual([0, 2, 3])
  })

  const withLlama = <A, E>(use: (llama: Llama, logs: Array<string>) => Effect.Effect<A, E>) => {
    const logs: Array<string> = []
    return Effect.acquireUseRelease(
      Effect.promise(() =>
        getLlama({
          gpu: false,
          build: "never",
          logLevel: LlamaLogLevel.error,
          progressLogs: false,
          logger: (_level, message) => logs.push(message)
        })
      ),
      (llama) => use(llama, logs),
      (llama) => Effect.promise(() => llama.dispose())
    )
  }

  // First of the file to create a binding: once a Llama has been disposed, node-llama-cpp
  // no longer routes native log lines to the loggers of later ones in the process.
  it.live("llama.cpp's error log stays quiet while a grammar is parsed; the log level is restored", () =>
    withLlama((llama, logs) =>
      Effect.gen(function*() {
        const grammars = Grammars.make(llama)
        // Passes the pre-check; llama.cpp refuses it (no such token) and would log so.
        const rejected = yield* Effect.flip(grammars.gbnf("root ::= <think>"))
        expect(rejected.problem).toMatch(/llama\.cpp cannot parse the grammar/)
        expect(llama.logLevel).toBe(LlamaLogLevel.error)
        yield* Effect.sleep("100 millis")
        expect(logs).toEqual([])
        // The same grammar parsed without the guard does log: the check above can fail.
        expect(() => new LlamaGrammar(llama, { grammar: "root ::= <think>" })).toThrow()
        yield* Effect.sleep("100 millis")
        expect(logs.join("\n")).toMatch(/failed to parse grammar/)
      })
    ))

  it.live("the cache stays bounded after 500 distinct grammars; a failed compile stores nothing", () =>
    withLlama((llama) =>
      Effect.gen(function*() {
        const grammars = Grammars.make(llama)
        for (let i = 0; i < 500; i++) yield* grammars.gbnf(`root ::= "answer ${i}"`)
        for (let i = 0; i < 500; i++) yield* grammars.schema(JsonSchema.enumOf([`a${i}`, "b"]))
        expect(grammars.size()).toBe(Grammars.DEFAULT_CAPACITY)
        // The most recent one is served from the cache: the same compiled object.
        expect(yield* grammars.gbnf('root ::= "answer 499"')).toBe(yield* grammars.gbnf('root ::= "answer 499"'))

        const small = Grammars.make(llama, { capacity: 4 })
        yield* small.gbnf('root ::= "kept"')
        for (const grammar of ['root ::= root "a"', "root ::= <think>", "root ::= (", "", 'root ::= "a"\u0000']) {
          const rejected = yield* Effect.flip(small.gbnf(grammar))
          expect(rejected._tag).toBe("Rejected")
        }
        yield* Effect.flip(small.schema(JsonSchema.enumOf(["a\u0000"])))
        expect(small.size()).toBe(1)
      })
    ))
})

// ---------------------------------------------------------------------------
// Against the bundled model
// ---------------------------------------------------------------------------

layer(Layer.provideMerge(LlamaEngine.layer({ sequences: 3 }), IdGenerator.Test), { excludeTestServices: true })("LlamaEngine (bundled model)", (it) => {
  it.effect("describes the bundled model", () =>
    Effect.gen(function*() {
      const info = yield* (yield* Engine).modelInfo
      expect(info.name).toBe(BUNDLED_MODEL_NAME)
      expect(info.contextWindow).toBeGreaterThan(0)
    }))

  it.effect("a JSON schema yields JSON that follows it", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const result = yield* engine.infer(request({
        prompt: "The food was wonderful and the staff were kind.",
        schema: {
          type: "object",
          properties: {
            sentiment: { type: "string", enum: ["positive", "negative", "neutral"] },
            sure: { type: "boolean" }
          },
          required: ["sentiment", "sure"]
        },
        maxTokens: 60
      }))
      const parsed = JSON.parse(result.content)
      expect(["positive", "negative", "neutral"]).toContain(parsed.sentiment)
      expect(typeof parsed.sure).toBe("boolean")
      expect(Object.keys(parsed).sort()).toEqual(["sentiment", "sure"])
      expect(result.finishReason).toBe("stop")
      expect(result.usage.outputTokens).toBeGreaterThan(0)
      expect(result.usage.promptTokens).toBeGreaterThan(0)
    }))

  it.effect("a GBNF grammar constrains the answer", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      for (const prompt of ["Is the sky blue?", "Is fire cold?", "What is 2 + 2?"]) {
        const result = yield* engine.infer(request({
          prompt,
          grammar: `root ::= "answer: " ("yes" | "no") "." | [0-9] [0-9]? " items"`,
          maxTokens: 20
        }))
        expect(result.content).toMatch(/^(answer: (yes|no)\.|[0-9][0-9]? items)$/)
      }
    }))

  it.effect("a grammar that does not parse is a typed, non-retryable failure that names the problem", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const failure = yield* Effect.flip(engine.infer(request({ grammar: "root ::= undefined-rule", maxTokens: 5 })))
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(false)
      expect(failure.details).toMatchObject({ kind: "grammar", source: "gbnf", bytes: 23 })
      expect(failure.message).toMatch(/uses the rule "undefined-rule", which it does not define/)
      // Caught by the pre-check or by llama.cpp itself: each one refused, none retryable.
      for (const grammar of ["", "hello", 'root ::= "a\u0000b"', "root ::= (unclosed", 'root ::= root "a"']) {
        const refused = yield* Effect.flip(engine.infer(request({ grammar, maxTokens: 5 })))
        expect(refused).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: false, details: { kind: "grammar" } })
      }
      const recursive = yield* Effect.flip(engine.infer(request({ grammar: 'root ::= root "a"', maxTokens: 5 })))
      expect(recursive.message).toMatch(/rule "root" is left-recursive/)
      // Past the pre-check, refused by llama.cpp itself: the same failure, in other words.
      const unknownToken = yield* Effect.flip(engine.infer(request({ grammar: "root ::= <no-such-token>", maxTokens: 5 })))
      expect(unknownToken).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: false, details: { kind: "grammar" } })
      expect(unknownToken.message).toMatch(/llama\.cpp cannot parse the grammar although it passes the pre-check/)
    }))

  it.effect("parentheses nested 20,000 deep are refused before llama.cpp (whose parser would crash the process)", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const grammar = "root ::= " + "(".repeat(20_000) + "\"a\"" + ")".repeat(20_000)
      const failure = yield* Effect.flip(engine.infer(request({ grammar, maxTokens: 5 })))
      expect(failure).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: false, details: { kind: "grammar" } })
      expect(failure.message).toMatch(/nests parentheses more than 64 deep/)
      // The process lives and the engine answers.
      const next = yield* engine.infer(request({ grammar: 'root ::= "yes" | "no"', maxTokens: 3 }))
      expect(["yes", "no"]).toContain(next.content)
    }))

  it.effect("a 10 MB grammar or a 700-level schema is refused without being echoed", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const grammar = 'root ::= "' + "a".repeat(10 * 1024 * 1024) + '"'
      const failure = yield* Effect.flip(engine.infer(request({ grammar, maxTokens: 5 })))
      expect(failure.message).toMatch(/larger than 64\.0 KiB/)
      expect(failure.details["bytes"]).toBe(grammar.length)
      expect(JSON.stringify(failure).length).toBeLessThan(1_000)
      expect(JSON.stringify(Schema.encodeSync(InferenceFailureSchema)(failure)).length).toBeLessThan(1_000)

      let schema: JsonSchema.JsonSchema = { type: "string" }
      for (let i = 0; i < 700; i++) schema = { type: "object", properties: { a: schema } }
      const deep = yield* Effect.flip(engine.infer(request({ schema, maxTokens: 5 })))
      expect(deep).toMatchObject({ code: "INFERENCE_ENGINE_ERROR", retryable: false, details: { kind: "grammar", source: "schema" } })
      expect(deep.message).toMatch(/nested more than 64 levels/)
      expect(JSON.stringify(deep).length).toBeLessThan(1_000)

      const nul = yield* Effect.flip(engine.infer(request({ schema: JsonSchema.enumOf(["ok", "a\u0000b"]), maxTokens: 5 })))
      expect(nul.message).toMatch(/NUL character/)
      const control = yield* Effect.flip(engine.infer(request({ schema: JsonSchema.enumOf(["ok", "a\u0001b"]), maxTokens: 5 })))
      expect(control.message).toMatch(/control character U\+0001/)
      // Tabs and line breaks are escaped in the grammar: the answer is JSON.
      const escaped = yield* engine.infer(request({ schema: JsonSchema.enumOf(["a\nb", "c\td"]), maxTokens: 20 }))
      expect(["a\nb", "c\td"]).toContain(JSON.parse(escaped.content))
    }))

  it.effect("maxTokens bounds the output and reports length", () =>
    Effect.gen(function*() {
      const result = yield* (yield* Engine).infer(request({ grammar: ENDLESS, maxTokens: 7 }))
      expect(result.finishReason).toBe("length")
      expect(result.usage.outputTokens).toBe(7)
      expect(result.content).toMatch(/^[a-z]+$/)
    }))

  it.effect("maxTokens 0 generates nothing", () =>
    Effect.gen(function*() {
      const result = yield* (yield* Engine).infer(request({ maxTokens: 0 }))
      expect(result).toMatchObject({ content: "", finishReason: "length", toolCalls: [] })
      expect(result.usage.outputTokens).toBe(0)
    }))

  it.effect("streams deltas that concatenate to the final content, then one Finish", () =>
    Effect.gen(function*() {
      const parts = Chunk.toReadonlyArray(
        yield* Stream.runCollect((yield* Engine).stream(request({ grammar: ENDLESS, maxTokens: 30 })))
      )
      const deltas = parts.filter((p): p is Extract<StreamPart, { _tag: "TextDelta" }> => p._tag === "TextDelta")
      const last = parts.at(-1)
      expect(deltas.length).toBeGreaterThan(1)
      expect(parts.filter((p) => p._tag === "Finish")).toHaveLength(1)
      expect(last?._tag).toBe("Finish")
      if (last?._tag !== "Finish") return
      expect(deltas.map((d) => d.text).join("")).toBe(last.result.content)
      expect(last.result.usage.outputTokens).toBe(30)
    }))

  it.effect("tools come back as calls with generated ids, not executed", () =>
    Effect.gen(function*() {
      const result = yield* (yield* Engine).infer(request({
        prompt: "What is 12 plus 7?",
        tools: [calculator],
        maxTokens: 40
      }))
      // The bundled model was trained to call the calculator for arithmetic.
      expect(result.finishReason).toBe("tool_calls")
      expect(result.toolCalls).toHaveLength(1)
      const call = result.toolCalls[0]!
      expect(call.name).toBe("calculator")
      expect(call.id).toMatch(/^call_\d+$/)
      expect(typeof call.arguments["expression"]).toBe("string")
    }))

  it.effect("a tool call cut off by maxTokens is an answer with finish reason length, no calls and the text before it", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const result = yield* engine.infer(request({ prompt: "What is 12 plus 7?", tools: [calculator], maxTokens: 4 }))
      expect(result.finishReason).toBe("length")
      expect(result.toolCalls).toEqual([])
      expect(result.content).not.toMatch(/calculator|expression/)
      expect(result.usage.outputTokens).toBe(4)
      // Every budget short of a whole call: an answer, never a failure.
      for (let maxTokens = 1; maxTokens <= 16; maxTokens++) {
        const cut = yield* engine.infer(request({ prompt: "What is 12 plus 7?", tools: [calculator], maxTokens }))
        expect(cut.finishReason === "length" || cut.finishReason === "tool_calls").toBe(true)
        if (cut.finishReason === "length") expect(cut.toolCalls).toEqual([])
      }
      // Streamed, the same: deltas, then one Finish with finish reason length.
      const parts = Chunk.toReadonlyArray(yield* Stream.runCollect(engine.stream(request({
        prompt: "What is 12 plus 7?",
        tools: [calculator],
        maxTokens: 4
      }))))
      const last = parts.at(-1)
      expect(last?._tag).toBe("Finish")
      if (last?._tag === "Finish") expect(last.result).toMatchObject({ finishReason: "length", toolCalls: [] })
    }))

  it.effect("a streamed tool call arrives as a ToolCallPart before Finish", () =>
    Effect.gen(function*() {
      const parts = Chunk.toReadonlyArray(yield* Stream.runCollect((yield* Engine).stream(request({
        prompt: "What is 12 plus 7?",
        tools: [calculator],
        maxTokens: 40
      }))))
      const tags = parts.map((p) => p._tag)
      expect(tags.slice(-2)).toEqual(["ToolCallPart", "Finish"])
      const last = parts.at(-1)
      if (last?._tag !== "Finish") return
      expect(last.result.finishReason).toBe("tool_calls")
      const deltas = parts.flatMap((p) => (p._tag === "TextDelta" ? [p.text] : []))
      expect(deltas.join("")).toBe(last.result.content)
    }))

  it.effect("a session reuses its evaluated prefix: a turn costs its new tokens", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const messages: Array<Message.Message> = [Message.system("You are a helpful assistant.")]
      const prompts: Array<number> = []
      const lengths: Array<number> = []
      let context = 0
      for (let turn = 1; turn <= 8; turn++) {
        messages.push(Message.user(`Question number ${turn}: what is ${turn} plus ${turn}?`))
        // Another caller in between must not take the session's sequence.
        yield* engine.infer(request({ prompt: `noise ${turn}`, maxTokens: 3 }))
        const result = yield* engine.infer(
          new InferenceRequest({ messages, maxTokens: 12, sessionKey: "session-1" })
        )
        messages.push(Message.assistant(result.content))
        prompts.push(result.usage.promptTokens)
        lengths.push(result.usage.promptTokens + (result.usage.cachedPromptTokens ?? 0))
        context = result.usage.contextTokens
      }
      // Re-evaluating the history would cost the whole context at the last turn.
      expect(context).toBeGreaterThan(4 * prompts[0]!)
      expect(prompts.at(-1)!).toBeLessThan(2 * prompts[0]!)
      // what was not evaluated is counted as cached: evaluated + cached is the whole prompt, which grows each turn
      for (let i = 1; i < lengths.length; i++) expect(lengths[i]!).toBeGreaterThan(lengths[i - 1]!)
      expect(lengths.at(-1)! - prompts.at(-1)!).toBeGreaterThan(3 * prompts[0]!)
    }))

  it.effect("concurrent calls decode together on parallel sequences", () =>
    Effect.gen(function*() {
      const runs = yield* overlap(yield* Engine, 3)
      // Every stream started before any of them finished: none waited for another.
      expect(Math.max(...runs.map((r) => r.first))).toBeLessThan(Math.min(...runs.map((r) => r.finished)))
    }))
})

// ---------------------------------------------------------------------------
// One sequence: waiting, cancellation, limits
// ---------------------------------------------------------------------------

layer(LlamaEngine.layer({ sequences: 1 }), { excludeTestServices: true })("LlamaEngine (one sequence)", (it) => {
  it.effect("with one sequence, concurrent calls wait for each other (the overlap check can fail)", () =>
    Effect.gen(function*() {
      const runs = yield* overlap(yield* Engine, 2)
      expect(Math.max(...runs.map((r) => r.first))).toBeGreaterThan(Math.min(...runs.map((r) => r.finished)))
    }))

  it.effect("interrupting a generation stops it and frees its sequence", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const fiber = yield* Effect.fork(engine.infer(request({ grammar: ENDLESS, maxTokens: 100_000 })))
      yield* Effect.sleep("300 millis")
      const start = yield* now
      yield* Fiber.interrupt(fiber)
      expect((yield* now) - start).toBeLessThan(2_000)
      expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
      // The only sequence is free again: the next call runs at once.
      const next = yield* engine.infer(request({ grammar: ENDLESS, maxTokens: 5 })).pipe(Effect.timeout("5 seconds"))
      expect(next.usage.outputTokens).toBe(5)
    }))

  it.effect("by callback (Engine.runParts), the same parts as the stream: deltas, the tool call, the finish", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const ask = request({ prompt: "What is 12 plus 7?", tools: [calculator], maxTokens: 40 })
      const byCallback: Array<StreamPart> = []
      yield* runParts(engine.stream(ask), (part) => Effect.sync(() => byCallback.push(part)))
      const byStream = Chunk.toReadonlyArray(yield* Stream.runCollect(engine.stream(ask)))
      // tool call ids are drawn per call; the rest is the same greedy generation
      const shape = (ps: ReadonlyArray<StreamPart>) =>
        ps.map((p) =>
          p._tag === "TextDelta"
            ? p.text
            : p._tag === "ToolCallPart"
            ? `call ${p.toolCall.name} ${JSON.stringify(p.toolCall.arguments)}`
            : `finish ${p.result.finishReason} ${p.result.content}`
        )
      expect(shape(byCallback)).toEqual(shape(byStream))
      expect(byCallback.map((p) => p._tag).slice(-2)).toEqual(["ToolCallPart", "Finish"])
    }))

  it.effect("a callback consumer that stops stops the generation", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      let deltas = 0
      const stopped = yield* Effect.flip(runParts(
        engine.stream(request({ grammar: ENDLESS, maxTokens: 100_000 })),
        () => ++deltas === 5 ? Effect.fail("enough" as const) : Effect.void
      ))
      expect(stopped).toBe("enough")
      const next = yield* engine.infer(request({ grammar: ENDLESS, maxTokens: 5 })).pipe(Effect.timeout("5 seconds"))
      expect(next.finishReason).toBe("length")
    }))

  it.effect("interrupting a callback consumer mid-generation stops it and frees its sequence", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const first = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(runParts(
        engine.stream(request({ grammar: ENDLESS, maxTokens: 100_000 })),
        () => Deferred.succeed(first, undefined)
      ))
      yield* Deferred.await(first).pipe(Effect.timeout("10 seconds"))
      yield* Fiber.interrupt(fiber).pipe(Effect.timeout("2 seconds"))
      expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
      const next = yield* engine.infer(request({ grammar: ENDLESS, maxTokens: 5 })).pipe(Effect.timeout("5 seconds"))
      expect(next.finishReason).toBe("length")
    }))

  it.effect("a consumer that stops reading a stream stops the generation", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const taken = yield* Stream.runCollect(
        engine.stream(request({ grammar: ENDLESS, maxTokens: 100_000 })).pipe(Stream.take(5))
      )
      expect(Chunk.size(taken)).toBe(5)
      const next = yield* engine.infer(request({ grammar: ENDLESS, maxTokens: 5 })).pipe(Effect.timeout("5 seconds"))
      expect(next.finishReason).toBe("length")
    }))

})

layer(LlamaEngine.layer({ sequences: 1, contextSize: 256 }), { excludeTestServices: true })("LlamaEngine (256-token context)", (it) => {
  it.effect("a prompt larger than the context is INFERENCE_CONTEXT_EXCEEDED", () =>
    Effect.gen(function*() {
      const long = Array.from({ length: 400 }, (_, i) => `word${i}`).join(" ")
      const failure = yield* Effect.flip((yield* Engine).infer(request({ prompt: long, maxTokens: 10 })))
      expect(failure.code).toBe("INFERENCE_CONTEXT_EXCEEDED")
      expect(failure.details["promptTokens"]).toBeGreaterThan(256)
    }))

  it.effect("output is capped at the room left in the context", () =>
    Effect.gen(function*() {
      const result = yield* (yield* Engine).infer(request({ grammar: ENDLESS, maxTokens: 10_000 }))
      expect(result.finishReason).toBe("length")
      expect(result.usage.contextTokens).toBeLessThanOrEqual(256)
    }))
})

// ---------------------------------------------------------------------------
// Loading and disposal
// ---------------------------------------------------------------------------

describe("LlamaEngine loading", () => {
  const buildFailure = (options: LlamaEngine.Options) =>
    Effect.scoped(Layer.build(LlamaEngine.layer(options))).pipe(Effect.flip)

  it.live("a missing model file fails the layer with INFERENCE_MODEL_UNAVAILABLE", () =>
    Effect.gen(function*() {
      const failure: InferenceFailure = yield* buildFailure({ modelPath: "/nonexistent/model.gguf" })
      expect(failure._tag).toBe("InferenceFailure")
      expect(failure.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      expect(failure.retryable).toBe(false)
    }))

  it.live("a file that is not a GGUF model fails with INFERENCE_MODEL_UNAVAILABLE", () =>
    Effect.gen(function*() {
      const file = path.join(os.tmpdir(), `pagantic-not-a-model-${process.pid}.gguf`)
      fs.writeFileSync(file, "this is not a model")
      const failure = yield* buildFailure({ modelPath: file })
      fs.rmSync(file, { force: true })
      expect(failure.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
    }))

  /** Runs `effect` and returns what reached the console or stderr meanwhile (llama.cpp logs through both). */
  const captureLogs = <A, E>(effect: Effect.Effect<A, E>) =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const record = (...args: Array<unknown>) => {
        lines.push(args.map(String).join(" "))
      }
      const spies = [
        vi.spyOn(console, "warn").mockImplementation(record),
        vi.spyOn(console, "error").mockImplementation(record),
        vi.spyOn(console, "log").mockImplementation(record),
        vi.spyOn(process.stderr, "write").mockImplementation((chunk: unknown) => {
          record(chunk)
          return true
        })
      ]
      const exit = yield* Effect.exit(effect)
      yield* Effect.sleep("100 millis") // llama.cpp's log lines arrive on a later tick
      for (const spy of spies) spy.mockRestore()
      return { exit, lines }
    })

  const modelCopy = (name: string, bytes: Buffer) => {
    const file = path.join(os.tmpdir(), `pagantic-${name}-${process.pid}.gguf`)
    fs.writeFileSync(file, bytes)
    return file
  }

  it.live("a truncated copy of the bundled model is not a valid GGUF file, and llama.cpp logs nothing", () =>
    Effect.gen(function*() {
      const model = fs.readFileSync(LlamaEngine.bundledModelPath())
      for (const [name, length, reason] of [
        ["half", Math.floor(model.length / 2), /it is truncated: it has [\d,]+ bytes, its tensors need at least [\d,]+$/],
        ["last-bytes", model.length - 100, /it is truncated/],
        ["metadata", 20_000, /runs past the end of the file|ends inside/],
        ["header", 10, /fewer than a GGUF header/]
      ] as const) {
        const file = modelCopy(`truncated-${name}`, model.subarray(0, length))
        const { exit, lines } = yield* captureLogs(buildFailure({ modelPath: file, sequences: 1 }))
        fs.rmSync(file, { force: true })
        expect(Exit.isSuccess(exit)).toBe(true)
        if (!Exit.isSuccess(exit)) continue
        expect(exit.value.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
        expect(exit.value.message).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is not a valid GGUF file: `))
        expect(exit.value.message).toMatch(reason)
        expect(lines.filter((line) => /llama|gguf/i.test(line))).toEqual([])
      }
    }))

  it.live("a GGUF header followed by random bytes is not a valid GGUF file (no allocation of what it claims)", () =>
    Effect.gen(function*() {
      const model = fs.readFileSync(LlamaEngine.bundledModelPath())
      for (const seed of [1, 2, 3, 4, 5]) {
        // A seeded generator: the same bytes on every run.
        let state = seed
        const random = Buffer.alloc(100_000)
        for (let i = 0; i < random.length; i++) {
          state = (state * 1103515245 + 12345) >>> 0
          random[i] = state >>> 24
        }
        for (const header of [model.subarray(0, 24), model.subarray(0, 8)]) {
          const file = modelCopy(`random-${seed}`, Buffer.concat([header, random]))
          const { exit, lines } = yield* captureLogs(buildFailure({ modelPath: file, sequences: 1 }))
          fs.rmSync(file, { force: true })
          expect(Exit.isSuccess(exit)).toBe(true)
          if (!Exit.isSuccess(exit)) continue
          expect(exit.value.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
          expect(exit.value.message).toContain(" is not a valid GGUF file: ")
          expect(exit.value.message).not.toMatch(/out of range/)
          expect(lines.filter((line) => /llama|gguf/i.test(line))).toEqual([])
        }
      }
    }))

  it("the bundled model and a foreign one pass the GGUF check whole", () => {
    expect(Gguf.inspect(LlamaEngine.bundledModelPath())).toEqual(
      Either.right({ version: 3, tensors: 39, keys: 27, complete: true })
    )
    expect(Either.isRight(Gguf.inspect(writeTinyModel({ name: "gguf-check" })))).toBe(true)
  })

  it.live("the model is disposed when the layer's scope closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(LlamaEngine.layer({ sequences: 1 }), scope)
      const engine = Context.get(context, Engine)
      const before = yield* engine.infer(request({ grammar: ENDLESS, maxTokens: 3 }))
      expect(before.usage.outputTokens).toBe(3)
      yield* Scope.close(scope, Exit.void)
      const after = yield* Effect.flip(engine.infer(request({ grammar: ENDLESS, maxTokens: 3 })))
      expect(after.code).toBe("INFERENCE_ENGINE_ERROR")
    }))

  it.live("any GGUF model works: a foreign model gets the chat wrapper of its template", () =>
    Effect.gen(function*() {
      const modelPath = writeTinyModel({ name: "some-other-model" })
      const engine = yield* Layer.build(LlamaEngine.layer({ modelPath, sequences: 1 })).pipe(
        Effect.map((context) => Context.get(context, Engine))
      )
      expect((yield* engine.modelInfo).name).toBe("some-other-model")
      const result = yield* engine.infer(request({ grammar: `root ::= "yes" | "no"`, maxTokens: 5 }))
      expect(["yes", "no"]).toContain(result.content)
    }).pipe(Effect.scoped))

  it.live("an explicit chat wrapper is the one used", () =>
    Effect.gen(function*() {
      const chatWrapper = new CountingWrapper()
      const engine = yield* Layer.build(LlamaEngine.layer({ sequences: 1, chatWrapper })).pipe(
        Effect.map((context) => Context.get(context, Engine))
      )
      yield* engine.infer(request({ maxTokens: 3 }))
      expect(chatWrapper.rendered).toBeGreaterThan(0)
    }).pipe(Effect.scoped))

  it.live("a prompt is rendered once per generation: LlamaChat's render of it comes from memory (llama/RenderMemo)", () =>
    Effect.gen(function*() {
      const chatWrapper = new CountingWrapper()
      const engine = yield* Layer.build(LlamaEngine.layer({ sequences: 2, chatWrapper })).pipe(
        Effect.map((context) => Context.get(context, Engine))
      )
      const first = yield* engine.infer(request({ prompt: "Name a colour.", maxTokens: 6 }))
      // the engine's plan renders it; LlamaChat asks for the same render and gets it from memory
      expect(chatWrapper.rendered).toBe(1)
      yield* engine.infer(request({ prompt: "Name a fruit.", maxTokens: 6 }))
      expect(chatWrapper.rendered).toBe(2)
      // the same prompt as new objects: rendered again, and the answer is the same (greedy)
      const again = yield* engine.infer(request({ prompt: "Name a colour.", maxTokens: 6 }))
      expect(chatWrapper.rendered).toBe(3)
      expect(again.content).toBe(first.content)
      // a tool call: the calls the model makes come back as before
      const called = yield* engine.infer(new InferenceRequest({
        messages: [Message.user("What is 12 plus 7?")],
        tools: [calculator],
        maxTokens: 24
      }))
      expect(chatWrapper.rendered).toBe(4)
      expect(called.toolCalls.map((c) => c.name)).toEqual(["calculator"])
    }).pipe(Effect.scoped), 60_000)

  it.live("the config layer reads PAGANTIC_MODEL_PATH", () =>
    Effect.gen(function*() {
      const failure = yield* Effect.scoped(Layer.build(LlamaEngine.layerConfig())).pipe(
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["PAGANTIC_MODEL_PATH", "/nonexistent/configured.gguf"]]))),
        Effect.flip
      )
      expect(failure._tag).toBe("InferenceFailure")
      if (failure._tag !== "InferenceFailure") return
      expect(failure.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      expect(failure.details["modelPath"]).toBe("/nonexistent/configured.gguf")
    }))

  it.live("the config layer refuses PAGANTIC_THREADS below 1 before loading anything", () =>
    Effect.gen(function*() {
      for (const threads of ["0", "-2"]) {
        const failure = yield* Effect.scoped(Layer.build(LlamaEngine.layerConfig())).pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["PAGANTIC_THREADS", threads]]))),
          Effect.flip
        )
        expect(failure._tag).not.toBe("InferenceFailure")
        expect(String(failure)).toContain("PAGANTIC_THREADS must be at least 1")
      }
    }))
})
