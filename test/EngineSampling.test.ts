/**
 * The sampling controls of an inference (stop, seed, presence and frequency
 * penalties, logprobs, topLogprobs), without a model: their bounds on the
 * request and the hints, the hints filled into every inference, the scripted
 * engine honouring them, and OpenAiEngine's wire mapping (a loopback server
 * records what was sent and answers with log-probabilities). The bundled model's
 * side is test/EngineSamplingLlama.test.ts.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import { ExecutionHints, SystemRequest } from "../src/domain/System.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as OpenAiEngine from "../src/layers/OpenAiEngine.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Hints from "../src/programs/facade/Hints.js"
import type { StreamPart } from "../src/services/Engine.js"
import { Engine, InferenceRequest, InferenceResult } from "../src/services/Engine.js"
import * as Loopback from "./support/loopback.js"

const ask = (text: string, fields: Partial<ConstructorParameters<typeof InferenceRequest>[0]> = {}) =>
  new InferenceRequest({ messages: [Message.user(text)], ...fields })

const decodeRequest = Schema.decodeUnknownEither(InferenceRequest)
const decodeHints = Schema.decodeUnknownEither(ExecutionHints)

/** The message of a refused decode (it names the field). */
const refusal = (either: Either.Either<unknown, unknown>): string =>
  Either.isLeft(either) ? String(either.left) : "accepted"

const sampling = {
  stop: ["\n\n", "END"],
  seed: 11,
  presencePenalty: 0.5,
  frequencyPenalty: -0.25,
  logprobs: true,
  topLogprobs: 2
} as const

describe("sampling controls: bounds", () => {
  it("the request accepts them within bounds", () => {
    const decoded = decodeRequest({ messages: [], ...sampling })
    expect(Either.isRight(decoded)).toBe(true)
    expect(Either.getOrThrow(decoded)).toMatchObject(sampling)
  })

  it.each([
    ["stop", { stop: [] }],
    ["stop", { stop: ["a", "b", "c", "d", "e"] }],
    ["stop", { stop: [""] }],
    ["stop", { stop: ["x".repeat(1_001)] }],
    ["presencePenalty", { presencePenalty: 2.5 }],
    ["frequencyPenalty", { frequencyPenalty: -3 }],
    ["topLogprobs", { topLogprobs: 21 }],
    ["topLogprobs", { topLogprobs: 1.5 }],
    ["seed", { seed: 0.5 }],
    ["logprobs", { logprobs: "yes" }]
  ])("the request refuses %s out of bounds (%j), naming it", (field, fields) => {
    expect(refusal(decodeRequest({ messages: [], ...fields }))).toContain(field)
  })

  it.each([
    ["stop", { stop: ["a", "b", "c", "d", "e"] }],
    ["presencePenalty", { presencePenalty: -2.01 }],
    ["topLogprobs", { topLogprobs: -1 }]
  ])("the hints refuse %s out of bounds (%j), naming it", (field, fields) => {
    expect(refusal(decodeHints(fields))).toContain(field)
  })
})

// ---------------------------------------------------------------------------
// Hints: every inference of a request gets them
// ---------------------------------------------------------------------------

describe("sampling controls: hints", () => {
  const hinted = Hints.effective(Schema.decodeUnknownSync(ExecutionHints)(sampling))

  it("fill sets each control an inference leaves unset", () => {
    expect(Hints.fill(ask("x"), hinted)).toMatchObject(sampling)
  })

  it("an inference's own value stays", () => {
    const own = ask("x", { stop: ["own"], seed: 1, presencePenalty: 0, frequencyPenalty: 0, logprobs: false, topLogprobs: 0 })
    expect(Hints.fill(own, hinted)).toMatchObject({
      stop: ["own"],
      seed: 1,
      presencePenalty: 0,
      frequencyPenalty: 0,
      logprobs: false,
      topLogprobs: 0
    })
  })

  it.effect("the hinted engine sends them on infer and on stream", () =>
    Effect.gen(function*() {
      const engine = Hints.engine(yield* Engine, hinted)
      yield* engine.infer(ask("a"))
      yield* Stream.runDrain(engine.stream(ask("b")))
      const requests = yield* ScriptedEngine.requests
      expect(requests).toHaveLength(2)
      for (const request of requests) expect(request).toMatchObject(sampling)
    }).pipe(Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("one"), ScriptedEngine.reply("two")]))))

  it.effect("a chat request's hints reach the engine, and its answer's logprobs the response", () =>
    Effect.gen(function*() {
      const system = yield* Facade.make()
      const response = yield* system.run(
        Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "hi" }], hints: sampling })
      )
      const [request] = yield* ScriptedEngine.requests
      expect(request).toMatchObject(sampling)
      expect(response.error).toBeUndefined()
      expect(response.content).toBe("Hello there")
      expect(response.logprobs).toEqual([
        { token: "Hello ", logprob: 0, topLogprobs: [{ token: "Hello ", logprob: 0 }] },
        { token: "there", logprob: 0, topLogprobs: [{ token: "there", logprob: 0 }] }
      ])
    }).pipe(
      Effect.provide(Layer.mergeAll(ScriptedEngine.layer([ScriptedEngine.reply("Hello there")]), Constraint.layer, Observe.eventLogMemory))
    ))

  it.effect("a chat request without logprobs has none on its response", () =>
    Effect.gen(function*() {
      const system = yield* Facade.make()
      const response = yield* system.run(
        Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", messages: [{ role: "user", content: "hi" }] })
      )
      expect(response.content).toBe("Hello there")
      expect(response.logprobs).toBeUndefined()
    }).pipe(
      Effect.provide(Layer.mergeAll(ScriptedEngine.layer([ScriptedEngine.reply("Hello there")]), Constraint.layer, Observe.eventLogMemory))
    ))
})

// ---------------------------------------------------------------------------
// ScriptedEngine
// ---------------------------------------------------------------------------

const parts = (stream: Stream.Stream<StreamPart, unknown>) => Effect.map(Stream.runCollect(stream), Chunk.toReadonlyArray)

describe("sampling controls: ScriptedEngine", () => {
  it.effect("a reply is cut before the first stop text it holds, finish reason stop; streamed too", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const cut = yield* engine.infer(ask("x", { stop: ["END", " is"] }))
      expect(cut.content).toBe("The answer")
      expect(cut.finishReason).toBe("stop")
      const streamed = yield* parts(engine.stream(ask("x", { stop: ["4"] })))
      const text = streamed.flatMap((part) => (part._tag === "TextDelta" ? [part.text] : [])).join("")
      expect(text).toBe("The answer is ")
      expect(streamed.at(-1)).toMatchObject({ _tag: "Finish", result: { content: "The answer is ", finishReason: "stop" } })
      const untouched = yield* engine.infer(ask("x", { stop: ["absent"] }))
      expect(untouched).toMatchObject({ content: "The answer is 4.", finishReason: "length" })
    }).pipe(
      Effect.provide(ScriptedEngine.layer([ScriptedEngine.reply("The answer is 4.", { finishReason: "length" })], {
        whenExhausted: "repeat-last"
      }))
    ))

  it.effect("logprobs come when asked: the step's own, else each streamed word certain with up to topLogprobs alternatives", () =>
    Effect.gen(function*() {
      const engine = yield* Engine
      const none = yield* engine.infer(ask("x"))
      expect(none.logprobs).toBeUndefined()
      const words = yield* engine.infer(ask("x", { logprobs: true }))
      expect(words.logprobs).toEqual([
        { token: "two ", logprob: 0, topLogprobs: [] },
        { token: "words", logprob: 0, topLogprobs: [] }
      ])
      const own = yield* engine.infer(ask("x", { logprobs: true }))
      expect(own.logprobs).toEqual([{ token: "x", logprob: -0.5, topLogprobs: [] }])
    }).pipe(
      Effect.provide(ScriptedEngine.layer([
        ScriptedEngine.reply("two words"),
        ScriptedEngine.reply("two words"),
        ScriptedEngine.reply("x", { logprobs: [{ token: "x", logprob: -0.5, topLogprobs: [] }] })
      ]))
    ))
})

// ---------------------------------------------------------------------------
// OpenAiEngine on the wire
// ---------------------------------------------------------------------------

const openAi = (url: string) =>
  Effect.flatMap(Layer.build(NodeHttpClient.layerUndici), (context) =>
    OpenAiEngine.make({ baseUrl: url, model: "test-model", timeout: "3 seconds", retry: { times: 0, base: "10 millis" } }).pipe(
      Effect.provide(context)
    ))

const wireLogprobs = [
  { token: "Hi", logprob: -0.1, bytes: [72, 105], top_logprobs: [{ token: "Hi", logprob: -0.1, bytes: [72, 105] }, { token: "Hello", logprob: -2.4, bytes: null }] },
  { token: "!", logprob: -0.7, bytes: [33], top_logprobs: [{ token: "!", logprob: -0.7, bytes: [33] }, { token: ".", logprob: -0.9, bytes: [46] }] }
]

const expectedLogprobs = [
  { token: "Hi", logprob: -0.1, topLogprobs: [{ token: "Hi", logprob: -0.1 }, { token: "Hello", logprob: -2.4 }] },
  { token: "!", logprob: -0.7, topLogprobs: [{ token: "!", logprob: -0.7 }, { token: ".", logprob: -0.9 }] }
]

describe("sampling controls: OpenAiEngine", () => {
  it.scopedLive("sends stop, seed, penalties, logprobs and top_logprobs by OpenAI's names, and reads logprobs back", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.json(res, 200, {
          id: "c",
          object: "chat.completion",
          choices: [{ index: 0, message: { role: "assistant", content: "Hi!" }, finish_reason: "stop", logprobs: { content: wireLogprobs, refusal: null } }],
          usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
        })
      )
      const engine = yield* openAi(server.url)
      const result = yield* engine.infer(ask("hi", sampling))
      expect(result.content).toBe("Hi!")
      expect(result.logprobs).toEqual(expectedLogprobs)
      expect(server.requests[0]!.json).toMatchObject({
        stop: ["\n\n", "END"],
        seed: 11,
        presence_penalty: 0.5,
        frequency_penalty: -0.25,
        logprobs: true,
        top_logprobs: 2
      })
    }))

  it.scopedLive("sends none of them when unset; top_logprobs only with logprobs; no logprobs sent back, none on the result", () =>
    Effect.gen(function*() {
      const server = yield* Loopback.make((_, res) =>
        Loopback.json(res, 200, {
          choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop", logprobs: null }]
        })
      )
      const engine = yield* openAi(server.url)
      const plain = yield* engine.infer(ask("hi"))
      expect(plain.logprobs).toBeUndefined()
      yield* engine.infer(ask("hi", { topLogprobs: 3 }))
      for (const sent of server.requests) {
        const body = sent.json as Record<string, unknown>
        for (const key of ["stop", "seed", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs"]) {
          expect(body).not.toHaveProperty(key)
        }
      }
    }))

  it.scopedLive("a stream's chunks' logprobs are gathered onto its Finish result", () =>
    Effect.gen(function*() {
      const chunk = (content: string, logprobs: unknown, finish: string | null = null) => ({
        id: "c",
        object: "chat.completion.chunk",
        choices: [{ index: 0, delta: { content }, finish_reason: finish, logprobs }]
      })
      const server = yield* Loopback.make((_, res) =>
        Loopback.sse(res, [
          chunk("Hi", { content: [wireLogprobs[0]] }),
          chunk("!", { content: [wireLogprobs[1]] }, "stop")
        ])
      )
      const engine = yield* openAi(server.url)
      const streamed = yield* parts(engine.stream(ask("hi", { logprobs: true, topLogprobs: 2 })))
      const finish = streamed.at(-1)
      expect(finish?._tag).toBe("Finish")
      const result = (finish as Extract<StreamPart, { _tag: "Finish" }>).result
      expect(result).toBeInstanceOf(InferenceResult)
      expect(result.content).toBe("Hi!")
      expect(result.logprobs).toEqual(expectedLogprobs)
      expect(server.requests[0]!.json).toMatchObject({ stream: true, logprobs: true, top_logprobs: 2 })
    }))
})
