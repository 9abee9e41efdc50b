import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { InferenceFailure } from "../src/domain/Failure.js"
import * as Message from "../src/domain/Message.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { Engine, InferenceRequest, InferenceResult } from "../src/services/Engine.js"

const request = (text: string) => new InferenceRequest({ messages: [Message.user(text)] })

describe("ScriptedEngine", () => {
  it.effect("answers in order, records every request, fails typed when exhausted", () =>
    Effect.gen(function* () {
      const engine = yield* Engine
      expect((yield* engine.infer(request("a"))).content).toBe("one")
      const second = yield* engine.infer(request("b"))
      expect(second.toolCalls.map((c) => [c.id, c.name])).toEqual([["call_1", "calc"]])
      expect(second.finishReason).toBe("tool_calls")
      const error = yield* Effect.flip(engine.infer(request("c")))
      expect(error).toBeInstanceOf(InferenceFailure)
      expect(error.message).toContain("exhausted")
      const requests = yield* ScriptedEngine.requests
      expect(requests.map((r) => (r.messages[0] as Message.UserMessage).content)).toEqual(["a", "b", "c"])
    }).pipe(
      Effect.provide(
        ScriptedEngine.layer([
          ScriptedEngine.reply("one"),
          ScriptedEngine.toolCalls([{ name: "calc", arguments: { expression: "1+1" } }])
        ])
      )
    )
  )

  it.effect("delays run on the TestClock", () =>
    Effect.gen(function* () {
      const engine = yield* Engine
      const fiber = yield* Effect.fork(engine.infer(request("a")))
      yield* TestClock.adjust("999 millis")
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      expect((yield* Fiber.join(fiber)).content).toBe("slow")
    }).pipe(Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("slow", { delay: "1 second" })])))
  )

  it.effect("injects failures and computes answers from the request", () =>
    Effect.gen(function* () {
      const engine = yield* Engine
      const failure = yield* Effect.flip(engine.infer(request("a")))
      expect(failure.code).toBe("INFERENCE_MODEL_UNAVAILABLE")
      const echoed = yield* engine.infer(request("echo me"))
      expect(echoed.content).toBe("echo me")
    }).pipe(
      Effect.provide(
        ScriptedEngine.layer([
          ScriptedEngine.fail(InferenceFailure.modelUnavailable("no model")),
          ScriptedEngine.respond((r) =>
            Effect.succeed(
              new InferenceResult({
                content: (r.messages[0] as Message.UserMessage).content,
                toolCalls: [],
                usage: TokenUsage.make({}),
                finishReason: "stop"
              })
            )
          )
        ])
      )
    )
  )

  it.effect("streams deltas that concatenate to the content, then Finish", () =>
    Effect.gen(function* () {
      const engine = yield* Engine
      const parts = Chunk.toReadonlyArray(yield* Stream.runCollect(engine.stream(request("a"))))
      const text = parts.flatMap((p) => (p._tag === "TextDelta" ? [p.text] : [])).join("")
      expect(text).toBe("The quick  brown fox.")
      expect(parts.at(-1)?._tag).toBe("Finish")
      expect(parts.filter((p) => p._tag === "TextDelta").length).toBeGreaterThan(1)
    }).pipe(Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("The quick  brown fox.")])))
  )
})
