/**
 * The llama.cpp engine against the real bundled model file (models/pagantic-tiny.gguf).
 * Mechanics only (grammars, streaming, sequences, cancellation, limits): they hold
 * whether the model is well trained or not, and every generation is bounded.
 */
import { describe, expect, it, layer } from "@effect/vitest"
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
import type { ChatWrapperGenerateContextStateOptions } from "node-llama-cpp"
import type { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as LlamaEngine from "../src/layers/LlamaEngine.js"
import { toChatHistory } from "../src/layers/llama/ChatHistory.js"
import * as SequencePool from "../src/layers/llama/SequencePool.js"
import {
  BUNDLED_CALCULATOR_TOOL,
  BUNDLED_MODEL_NAME,
  PaganticChatWrapper
} from "../src/layers/llama/PaganticChatWrapper.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import type { StreamPart } from "../src/services/Engine.js"
import { IdGenerator } from "../src/services/IdGenerator.js"
import { writeTinyModel } from "./fixtures/llamaTinyModel.js"

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

  it.effect("a grammar llama.cpp rejects is a typed engine error", () =>
    Effect.gen(function*() {
      const failure = yield* Effect.flip((yield* Engine).infer(request({ grammar: "root ::= undefined-rule", maxTokens: 5 })))
      expect(failure.code).toBe("INFERENCE_ENGINE_ERROR")
      expect(failure.retryable).toBe(false)
      expect(failure.details["kind"]).toBe("grammar")
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

  it.effect("a tool call cut off by maxTokens is INFERENCE_MALFORMED_RESPONSE, not an empty answer", () =>
    Effect.gen(function*() {
      const failure = yield* Effect.flip((yield* Engine).infer(request({
        prompt: "What is 12 plus 7?",
        tools: [calculator],
        maxTokens: 4
      })))
      expect(failure.code).toBe("INFERENCE_MALFORMED_RESPONSE")
      expect(failure.details["kind"]).toBe("truncated_tool_call")
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
        context = result.usage.contextTokens
      }
      // Re-evaluating the history would cost the whole context at the last turn.
      expect(context).toBeGreaterThan(4 * prompts[0]!)
      expect(prompts.at(-1)!).toBeLessThan(2 * prompts[0]!)
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
      class CountingWrapper extends PaganticChatWrapper {
        rendered = 0
        override generateContextState(options: ChatWrapperGenerateContextStateOptions) {
          this.rendered++
          return super.generateContextState(options)
        }
      }
      const chatWrapper = new CountingWrapper()
      const engine = yield* Layer.build(LlamaEngine.layer({ sequences: 1, chatWrapper })).pipe(
        Effect.map((context) => Context.get(context, Engine))
      )
      yield* engine.infer(request({ maxTokens: 3 }))
      expect(chatWrapper.rendered).toBeGreaterThan(0)
    }).pipe(Effect.scoped))

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
})
