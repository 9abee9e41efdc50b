/**
 * Seeds 01-03 to the letter (issue #12), gaps 1 and 5 for the engines services
 * hold: a model reranker, a judged validator, a model planner, a task processor
 * and a query's llm responders make inferences no mode runner configures. Every
 * one of them gets the request's hints (where it sets none itself) and counts in
 * the response's token usage, whether the request succeeds or fails. And gap 7
 * in chat: a turn's confidence is the relevance of the context it retrieved.
 * And gap 4 for the same inferences: each emits its InferenceStart/InferenceEnd
 * once, with the request's correlation.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import type * as Event from "../src/domain/Event.js"
import { InferenceFailure } from "../src/domain/Failure.js"
import { Passage } from "../src/domain/Passage.js"
import { SystemRequest } from "../src/domain/System.js"
import { Task, TaskList, toJson } from "../src/domain/Task.js"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as MiniSearchRetriever from "../src/layers/MiniSearchRetriever.js"
import * as RetrieverContextProvider from "../src/layers/RetrieverContextProvider.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as ModelPlanner from "../src/layers/ModelPlanner.js"
import * as ModelReranker from "../src/layers/ModelReranker.js"
import * as RuleValidator from "../src/layers/RuleValidator.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import * as Engine from "../src/services/Engine.js"
import type { InferenceRequest } from "../src/services/Engine.js"
import { EventLog } from "../src/services/EventLog.js"
import * as Retriever from "../src/services/Retriever.js"
import * as Validator from "../src/services/Validator.js"

/** Tests that could wait forever on the TestClock end here instead. */
const bound = 20_000

const decode = Schema.decodeUnknownSync(SystemRequest)

const env = (script: ReadonlyArray<ScriptedEngine.Step>, options: ScriptedEngine.Options = {}) =>
  Layer.mergeAll(ScriptedEngine.layer(script, options), Constraint.layer, Observe.eventLogMemory)

/** A request run to its response with the TestClock moved on (retries wait on it). */
const respond = (request: Record<string, unknown>) =>
  Effect.gen(function* () {
    const system = yield* Facade.make()
    const fiber = yield* Effect.fork(system.run(decode(request)))
    yield* TestClock.adjust("1 minute")
    return yield* Fiber.join(fiber)
  })

const hints = { maxTokens: 77, temperature: 0.7, topP: 0.9, options: { mirostat: 2 } }

/** The hints a request carries: `own` are the fields the inference set itself (they stay). */
const hinted = (own: Partial<typeof hints> = {}) => ({ ...hints, ...own })

const sent = (r: InferenceRequest) => ({ maxTokens: r.maxTokens, temperature: r.temperature, topP: r.topP, options: r.options })

// ---------------------------------------------------------------------------
// A model reranker (plan mode)
// ---------------------------------------------------------------------------

const passages = [
  { content: "The Eiffel Tower was finished in 1889.", source: "a.txt", score: 0 },
  { content: "Paris is in France.", source: "b.txt", score: 0 }
]
const rerankThenAnswer = {
  mode: "plan",
  messages: [],
  hints,
  plan: {
    steps: [
      { name: "rank", type: "rerank", input: { query: "When was the Eiffel Tower finished?", candidates: passages } },
      { name: "answer", type: "infer" }
    ]
  }
}

describe("a ModelReranker's inferences follow the request", { timeout: bound }, () => {
  it.effect("they carry the hints the reranker leaves unset, and count in the answer's usage", () =>
    Effect.gen(function* () {
      const response = yield* respond(rerankThenAnswer)
      expect(response.error).toBeUndefined()
      const requests = yield* ScriptedEngine.requests
      expect(requests.map(sent)).toEqual([
        // the reranker's own temperature 0 and maxTokens 32 are more specific and stay
        hinted({ temperature: 0, maxTokens: 32 }),
        hinted({ temperature: 0, maxTokens: 32 }),
        hinted()
      ])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 30, calls: 3 })
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          ModelReranker.layer(),
          env([ScriptedEngine.reply('{"score":0.9}'), ScriptedEngine.reply('{"score":0.2}'), ScriptedEngine.reply("1889.")])
        )
      )
    ))

  it.effect("a failed request counts every reply the reranker got", () =>
    Effect.gen(function* () {
      const response = yield* respond(rerankThenAnswer)
      expect(response.error?.code).toBe("CONSTRAINT_JSON_INVALID")
      const answered = (yield* ScriptedEngine.requests).length
      expect(answered).toBeGreaterThan(0)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10 * answered, calls: answered })
    }).pipe(
      Effect.provide(
        Layer.provideMerge(ModelReranker.layer(), env([ScriptedEngine.reply("relevant, I think")], { whenExhausted: "repeat-last" }))
      )
    ))
})

// ---------------------------------------------------------------------------
// A judged validator (structured mode)
// ---------------------------------------------------------------------------

const context = "The Eiffel Tower is in Paris. It was finished in 1889."
const yearOutput = {
  schema: { type: "object", properties: { year: { type: "number" } }, required: ["year"] }
}
const isJudge = (r: InferenceRequest) => r.messages[0]?.content === RuleValidator.judgeInstruction
const judged = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.provideMerge(RuleValidator.layerJudged([Validator.followsFromContext(context)]), env(script))

describe("a judged Validator's inferences follow the request", { timeout: bound }, () => {
  it.effect("the judge carries the hints it leaves unset, and its verdicts count in the answer's usage", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "When was the Eiffel Tower finished?" }],
        output: yearOutput,
        hints
      })
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ year: 1889 })
      const requests = yield* ScriptedEngine.requests
      expect(requests.map((r) => isJudge(r) ? "judge" : "answer")).toEqual([
        "answer",
        "judge",
        "answer",
        "judge"
      ])
      expect(requests.map(sent)).toEqual([
        hinted(),
        hinted({ temperature: 0, maxTokens: 256 }),
        hinted(),
        hinted({ temperature: 0, maxTokens: 256 })
      ])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 40, calls: 4 })
    }).pipe(
      Effect.provide(
        judged([
          ScriptedEngine.reply('{"year":1920}'),
          ScriptedEngine.reply('{"verdict":"fail","reason":"the context says 1889"}'),
          ScriptedEngine.reply('{"year":1889}'),
          ScriptedEngine.reply('{"verdict":"pass","reason":"stated"}')
        ])
      )
    ))

  it.effect("strictValidation: a request the judge fails counts every answer and every verdict", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        messages: [{ role: "user", content: "When was the Eiffel Tower finished?" }],
        output: { ...yearOutput, strictValidation: true }
      })
      expect(response.error?.code).toBe("VALIDATION_SEMANTIC_FAILED")
      const requests = yield* ScriptedEngine.requests
      const verdicts = requests.filter(isJudge).length
      expect(verdicts).toBeGreaterThan(0)
      expect(requests.length).toBe(2 * verdicts)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10 * requests.length, calls: requests.length })
    }).pipe(
      Effect.provide(
        judged(
          Array.from({ length: 4 }, () => [
            ScriptedEngine.reply('{"year":1920}'),
            ScriptedEngine.reply('{"verdict":"fail","reason":"the context says 1889"}')
          ]).flat()
        )
      )
    ))
})

// ---------------------------------------------------------------------------
// A model planner (plan mode without a plan)
// ---------------------------------------------------------------------------

describe("a ModelPlanner's inferences follow the request", { timeout: bound }, () => {
  const plannedRequest = { mode: "plan", messages: [{ role: "user", content: "Say hi" }], hints }

  it.effect("the planner's call carries the hints it leaves unset, and counts in the answer's usage", () =>
    Effect.gen(function* () {
      const response = yield* respond(plannedRequest)
      expect(response.error).toBeUndefined()
      expect(response.content).toBe("hi")
      const requests = yield* ScriptedEngine.requests
      expect(requests.map(sent)).toEqual([hinted({ temperature: 0 }), hinted()])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 20, calls: 2 })
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          ModelPlanner.layer(),
          env([
            ScriptedEngine.reply('{"rationale":"one step","steps":[{"name":"answer","type":"infer","input":"Say hi"}]}'),
            ScriptedEngine.reply("hi")
          ])
        )
      )
    ))

  it.effect("a planner that never answers with a plan: its every reply counts in the failed response", () =>
    Effect.gen(function* () {
      const response = yield* respond(plannedRequest)
      expect(response.error?.code).toBe("CONSTRAINT_JSON_INVALID")
      // the first reply and the planner's 2 retries
      expect((yield* ScriptedEngine.requests).length).toBe(3)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 30, calls: 3 })
    }).pipe(
      Effect.provide(
        Layer.provideMerge(ModelPlanner.layer(), env([ScriptedEngine.reply("a plan? sure")], { whenExhausted: "repeat-last" }))
      )
    ))
})

// ---------------------------------------------------------------------------
// Task processors (mode task)
// ---------------------------------------------------------------------------

describe("task processors' inferences count", { timeout: bound }, () => {
  it.effect("a task list run by the default processor: every task's inference in the answer's usage", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "task",
        messages: [],
        hints,
        task: {
          tasks: new TaskList({
            analysis: "two",
            tasks: [
              new Task({ id: "a", type: "t", processor: "infer", description: "Name a colour" }),
              new Task({ id: "b", type: "t", processor: "infer", description: "Name a fruit" })
            ]
          })
        }
      })
      expect(response.error).toBeUndefined()
      const requests = yield* ScriptedEngine.requests
      expect(requests.map(sent)).toEqual([hinted(), hinted()])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 20, calls: 2 })
    }).pipe(Effect.provide(env([ScriptedEngine.reply("red"), ScriptedEngine.reply("apple")]))))
})

// ---------------------------------------------------------------------------
// Query mode (in memory): the llm responders
// ---------------------------------------------------------------------------

describe("a query's llm responders follow the request", { timeout: bound }, () => {
  const queryRequest = (extra: Record<string, unknown> = {}) => ({
    mode: "query",
    messages: [],
    hints,
    query: {
      kind: "infer.query.v1",
      input: { inline: "a grant proposal on protein folding" },
      responders: [{ kind: "llm", model: "judge-model" }],
      fold: { function: "best_of" },
      answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
    },
    ...extra
  })
  const withResponder = (script: ReadonlyArray<ScriptedEngine.Step>) =>
    Effect.gen(function* () {
      const { control, engine } = yield* ScriptedEngine.make(script)
      const responders = InMemoryResponders.layer({
        responders: [{ id: "judge", kind: "llm", model: "judge-model", engine }]
      })
      return { control, layer: Layer.mergeAll(responders, Constraint.layer, Observe.eventLogMemory) }
    })

  it.effect("the responder's inference carries the hints it leaves unset, counts in the answer's usage, and emits its events", () =>
    Effect.gen(function* () {
      const { control, layer } = yield* withResponder([ScriptedEngine.reply('{"category":"research"}')])
      const [response, events] = yield* Effect.provide(
        Effect.zip(respond(queryRequest({ requestId: "r-query" })), Effect.flatMap(EventLog, (log) => log.events)),
        layer
      )
      expect(response.error).toBeUndefined()
      expect(response.content).toBe("research")
      expect((yield* control.requests).map(sent)).toEqual([hinted()])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10, calls: 1 })
      // gap 4: the responder's inference has its events, with the request's correlation
      const inferenceEvents = events.filter((e) => e._tag === "InferenceStart" || e._tag === "InferenceEnd")
      expect(inferenceEvents.map((e) => [e._tag, e.correlation.requestId])).toEqual([
        ["InferenceStart", "r-query"],
        ["InferenceEnd", "r-query"]
      ])
    }))

  it.effect("a query that fails counts the replies its responders gave", () =>
    Effect.gen(function* () {
      const { control, layer } = yield* withResponder([ScriptedEngine.reply("research, surely")])
      const response = yield* Effect.provide(respond(queryRequest()), layer)
      expect(response.error).toBeDefined()
      expect((yield* control.requests)).toHaveLength(1)
      expect(response.tokenUsage).toMatchObject({ promptTokens: 10, calls: 1 })
    }))
})

// ---------------------------------------------------------------------------
// Engine.inRequest
// ---------------------------------------------------------------------------

describe("Engine.inRequest", { timeout: bound }, () => {
  it.effect("outside a request it is the engine itself; wrapped twice, a call is seen once", () =>
    Effect.gen(function* () {
      const { control, engine } = yield* ScriptedEngine.make([ScriptedEngine.reply("a"), ScriptedEngine.reply("b")])
      const following = Engine.inRequest(engine)
      expect(Engine.inRequest(following)).toBe(following)
      const plain = new Engine.InferenceRequest({ messages: [] })
      yield* following.infer(plain)
      let seen = 0
      const counting = (inner: Engine.Service): Engine.Service => ({
        ...inner,
        infer: (request) => Effect.zipRight(Effect.sync(() => seen++), inner.infer(request))
      })
      yield* Effect.locally(Engine.inRequest(following).infer(plain), Engine.currentRequest, counting)
      expect(seen).toBe(1)
      expect(yield* control.requests).toEqual([plain, plain])
      expect(yield* FiberRef.get(Engine.currentRequest)).toBeDefined()
    }))
})

// ---------------------------------------------------------------------------
// Gap 7 in chat: the retrieval confidence
// ---------------------------------------------------------------------------

describe("gap 7 in chat: the relevance of the retrieved context is the answer's confidence", { timeout: bound }, () => {
  const chatRequest = { mode: "chat", messages: [{ role: "user", content: "When was the Eiffel Tower finished?" }] }
  /** A retriever scoring on [0, 1] (as a model reranker does), or failing. */
  const retriever = (scores: ReadonlyArray<number> | "broken") =>
    Layer.succeed(Retriever.Retriever, {
      retrieve: () =>
        scores === "broken"
          ? Effect.fail(InferenceFailure.engineError("the index is down"))
          : Effect.succeed(scores.map((score, i) => new Passage({ content: `passage ${i}: finished in 1889`, source: `${i}.txt`, score })))
    })
  const withContext = (retrievers: Layer.Layer<Retriever.Retriever>) =>
    Layer.provideMerge(RetrieverContextProvider.layer(), Layer.merge(retrievers, env([ScriptedEngine.reply("In 1889.")])))

  it.effect("the best passage score on [0, 1], source retrieval; the context reached the engine once", () =>
    Effect.gen(function* () {
      const response = yield* respond(chatRequest)
      expect(response.error).toBeUndefined()
      expect(response).toMatchObject({ content: "In 1889.", confidence: 0.8, confidenceSource: "retrieval" })
      const [request, ...more] = yield* ScriptedEngine.requests
      expect(more).toHaveLength(0)
      expect(request!.messages.filter((m) => m.content.startsWith("Relevant context:"))).toHaveLength(1)
    }).pipe(Effect.provide(withContext(retriever([0.3, 0.8])))))

  it.effect("BM25 scores (not on [0, 1]) are no confidence, though the context is used", () =>
    Effect.gen(function* () {
      const response = yield* respond(chatRequest)
      expect(response.error).toBeUndefined()
      expect(response.confidence).toBeUndefined()
      expect(response.confidenceSource).toBeUndefined()
      const [request] = yield* ScriptedEngine.requests
      expect(request!.messages.some((m) => m.content.includes("Eiffel Tower was finished in 1889"))).toBe(true)
    }).pipe(
      Effect.provide(
        withContext(
          MiniSearchRetriever.layer([
            { id: "a", content: "The Eiffel Tower was finished in 1889.", source: "a.txt" },
            { id: "b", content: "Paris is in France.", source: "b.txt" }
          ])
        )
      )
    ))

  it.effect("no provider, nothing retrieved, or a failing provider: no confidence, and the turn is answered", () =>
    Effect.gen(function* () {
      const none = yield* Effect.provide(respond(chatRequest), env([ScriptedEngine.reply("In 1889.")]))
      const empty = yield* Effect.provide(respond(chatRequest), withContext(retriever([])))
      const broken = yield* Effect.provide(respond(chatRequest), withContext(retriever("broken")))
      for (const response of [none, empty, broken]) {
        expect(response).toMatchObject({ content: "In 1889." })
        expect(response.error).toBeUndefined()
        expect(response.confidence).toBeUndefined()
      }
    }))
})

// ---------------------------------------------------------------------------
// Gap 4 for the inferences no loop makes
// ---------------------------------------------------------------------------

describe("gap 4 for the inferences no loop makes: each emits its InferenceStart/InferenceEnd once, correlated", { timeout: bound }, () => {
  const pairs = Effect.map(Effect.flatMap(EventLog, (log) => log.events), (events) => {
    const starts = events.filter((e): e is Event.InferenceStart => e._tag === "InferenceStart")
    const ends = events.filter((e): e is Event.InferenceEnd => e._tag === "InferenceEnd")
    expect(ends).toHaveLength(starts.length)
    return starts.map((start) => ({ start, end: ends.find((e) => e.inferenceId === start.inferenceId) }))
  })
  const expectCorrelated = (found: ReadonlyArray<{ start: Event.InferenceStart; end: Event.InferenceEnd | undefined }>, requestId: string) => {
    for (const { end, start } of found) {
      expect(start.correlation.requestId).toBe(requestId)
      expect(end?.correlation.requestId).toBe(requestId)
      expect(start.correlation.spanId).toMatch(/\S/)
      expect(start.correlation.parentSpanId).toMatch(/\S/)
      expect(end?.correlation.spanId).toBe(start.correlation.spanId)
    }
  }

  it.effect("plan: each rerank call of a ModelReranker, and the infer step's call once", () =>
    Effect.gen(function* () {
      const response = yield* respond({ ...rerankThenAnswer, requestId: "r-rerank" })
      expect(response.error).toBeUndefined()
      const found = yield* pairs
      expect(found.map(({ start }) => start.schemaPresent)).toEqual([true, true, false])
      // the reranker's own temperature (the infer step's event shows the request as the step built it, before the hints)
      expect(found.slice(0, 2).map(({ start }) => start.temperature)).toEqual([0, 0])
      expectCorrelated(found, "r-rerank")
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          ModelReranker.layer(),
          env([ScriptedEngine.reply('{"score":0.9}'), ScriptedEngine.reply('{"score":0.2}'), ScriptedEngine.reply("1889.")])
        )
      )
    ))

  it.effect("structured: the judge's verdicts beside the loop's own replies, each once", () =>
    Effect.gen(function* () {
      const response = yield* respond({
        mode: "structured",
        requestId: "r-judge",
        messages: [{ role: "user", content: "When was the Eiffel Tower finished?" }],
        output: yearOutput
      })
      expect(response.error).toBeUndefined()
      const found = yield* pairs
      expect(found).toHaveLength(2)
      expectCorrelated(found, "r-judge")
    }).pipe(
      Effect.provide(judged([ScriptedEngine.reply('{"year":1889}'), ScriptedEngine.reply('{"verdict":"pass","reason":"stated"}')]))
    ))

  it.effect("task: the analyzer's reply and each processor's", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "task", requestId: "r-task", messages: [{ role: "user", content: "do it" }] })
      expect(response.error).toBeUndefined()
      const found = yield* pairs
      expect(found).toHaveLength(2)
      expect(found.every(({ end }) => end?.finishReason === "stop")).toBe(true)
      expectCorrelated(found, "r-task")
    }).pipe(
      Effect.provide(
        env([
          ScriptedEngine.reply(
            toJson(new TaskList({ analysis: "one", tasks: [new Task({ id: "a", type: "t", processor: "infer", description: "Name a colour" })] }))
          ),
          ScriptedEngine.reply("red")
        ])
      )
    ))

  it.effect("planner: the plan's own inference, then the step's", () =>
    Effect.gen(function* () {
      const response = yield* respond({ mode: "plan", requestId: "r-plan", messages: [{ role: "user", content: "Say hi" }] })
      expect(response.error).toBeUndefined()
      const found = yield* pairs
      expect(found).toHaveLength(2)
      expectCorrelated(found, "r-plan")
    }).pipe(
      Effect.provide(
        Layer.provideMerge(
          ModelPlanner.layer(),
          env([
            ScriptedEngine.reply('{"rationale":"one step","steps":[{"name":"answer","type":"infer","input":"Say hi"}]}'),
            ScriptedEngine.reply("hi")
          ])
        )
      )
    ))
})

// ---------------------------------------------------------------------------
// An engine's own sampling of many, through the request's engines
// ---------------------------------------------------------------------------

describe("an engine's sampleMany stays within a request: hinted, counted", { timeout: bound }, () => {
  it.effect("redundant replicas drawn by one sampleMany carry the hints, and each sample counts in the usage", () =>
    Effect.gen(function* () {
      const { engine } = yield* ScriptedEngine.make(Array.from({ length: 3 }, () => ScriptedEngine.reply('{"year":1889}')))
      const drawn: Array<{ readonly request: InferenceRequest; readonly n: number }> = []
      const sampling: Engine.Service = {
        ...engine,
        sampleMany: (request, n) =>
          Effect.zipRight(Effect.sync(() => drawn.push({ request, n })), Engine.independentSamples(engine, request, n))
      }
      const response = yield* respond({
        mode: "redundant",
        messages: [{ role: "user", content: "When was the Eiffel Tower finished?" }],
        output: yearOutput,
        redundancy: { n: 3 },
        hints
      }).pipe(Effect.provide(Layer.mergeAll(Layer.succeed(Engine.Engine, sampling), Constraint.layer, Observe.eventLogMemory)))
      expect(response.error).toBeUndefined()
      expect(response.structuredOutput).toEqual({ year: 1889 })
      expect(drawn.map(({ n, request }) => [n, sent(request)])).toEqual([[3, hinted()]])
      expect(response.tokenUsage).toMatchObject({ promptTokens: 30, calls: 3 })
    }))
})
