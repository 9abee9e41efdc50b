/**
 * The demo's query responders and its durable query definition.
 *
 * An llm responder is an engine configuration: here the one loaded bundled model
 * at a given sampling, asked the way it was trained for sentiment (its system
 * prompt and `{"sentiment": ...}` schema) and its label answered as the
 * classification's `category`. The library's own query prompt is one the bundled
 * model was never taught (`npm run eval` measures both). Beside them, a human:
 * the actor `did:example:reviewer`, who answers through a durable slot
 * (`pagantic respond`).
 *
 * `definition` is the run definition of the demo's queries, registered by every
 * command that opens the runs, so that `pagantic respond` (another process)
 * carries a demo query on after its human answers. Its responders are provided
 * inside the program from the Engine the runs layer gives (loaded only when a
 * responder infers), so the definition needs nothing else.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type { Failure } from "../../../domain/Failure.js"
import * as Message from "../../../domain/Message.js"
import * as InMemoryResponders from "../../../layers/InMemoryResponders.js"
import * as LexicalReranker from "../../../layers/LexicalReranker.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../../layers/llama/PaganticChatWrapper.js"
import * as Orchestration from "../../../programs/Orchestration.js"
import { Engine, InferenceRequest, InferenceResult } from "../../../services/Engine.js"
import type * as EngineService from "../../../services/Engine.js"
import type { Responder } from "../../../services/ResponderRegistry.js"
import { SENTIMENT_SYSTEM } from "./DemoData.js"

/** How one llm responder samples. */
export interface Sampling {
  readonly temperature: number
  readonly topP?: number | undefined
  readonly seed?: number | undefined
}

/**
 * `engine` asked at `sampling` in the bundled model's trained sentiment form: the
 * query's input (its last user message) under the trained system prompt and
 * schema; the answer's `sentiment` comes back as `{"category": ...}`.
 */
export const bundledSentiment = (engine: EngineService.Service, sampling: Sampling): EngineService.Service => ({
  ...engine,
  infer: (request) => {
    const input = request.messages.filter((m) => m.role === "user").at(-1)?.content ?? ""
    const asked = new InferenceRequest({
      messages: [Message.system(SENTIMENT_SYSTEM), Message.user(input)],
      schema: BUNDLED_SENTIMENT_SCHEMA as unknown as EngineService.InferenceRequest["schema"],
      maxTokens: 24,
      ...sampling
    })
    return Effect.map(engine.infer(asked), (result) => {
      const parsed = Either.try(() => JSON.parse(result.content) as { readonly sentiment?: unknown })
      const category = Either.isRight(parsed) ? parsed.right.sentiment : undefined
      // not a label: passed on as it came, so the query's shape check says what was wrong
      return typeof category === "string" ? new InferenceResult({ ...result, content: JSON.stringify({ category }) }) : result
    })
  }
})

/** The demo's human. */
export const DEMO_HUMAN = "did:example:reviewer"

/** The demo's llm responders (the model at four samplings) and its human. */
export const responders = (engine: EngineService.Service): ReadonlyArray<Responder> => [
  { id: "greedy", kind: "llm", model: "greedy", description: "the bundled model, greedy", engine: bundledSentiment(engine, { temperature: 0 }) },
  { id: "warm", kind: "llm", model: "warm", description: "the bundled model at temperature 1", engine: bundledSentiment(engine, { temperature: 1, seed: 1 }) },
  { id: "hot-1", kind: "llm", model: "hot", description: "the bundled model at temperature 2", engine: bundledSentiment(engine, { temperature: 2, topP: 1, seed: 2 }) },
  { id: "hot-2", kind: "llm", model: "hot", description: "the bundled model at temperature 2", engine: bundledSentiment(engine, { temperature: 2, topP: 1, seed: 3 }) },
  { id: "hot-3", kind: "llm", model: "hot", description: "the bundled model at temperature 2", engine: bundledSentiment(engine, { temperature: 2, topP: 1, seed: 4 }) },
  { id: "reviewer", kind: "actor", did: DEMO_HUMAN, name: "the demo's reviewer", availability: { typicalResponseDelaySecs: 60 } }
]

/** `~greedy`, `~warm`, `~hot`. */
export const aliases = { greedy: "greedy", warm: "warm", hot: "hot" }

/** The responders on `engine`, with the lexical reranker: what a query of the demo needs. */
export const registry = (engine: EngineService.Service) =>
  Layer.merge(
    // the ids are distinct and the descriptors well formed: registering cannot fail
    Layer.orDie(InMemoryResponders.layer({ responders: responders(engine), aliases })),
    LexicalReranker.layer()
  )

/** The name of the demo's query runs. */
export const name = "pagantic.demo.query"

/**
 * The run definition of the demo's queries; `notify` hands a human slot (its key
 * and secret) to whoever answers it (the demo prints the `pagantic respond`
 * command). Without it a human CALL is logged as unnotified.
 */
export const definition = (notify?: ((notice: Orchestration.Notice) => Effect.Effect<void, Failure>) | undefined) => {
  const base = Orchestration.definition({ name, aliases, notify })
  return {
    ...base,
    program: (query: Parameters<typeof base.program>[0]) =>
      Effect.flatMap(Engine, (engine) => base.program(query).pipe(Effect.provide(registry(engine))))
  }
}
