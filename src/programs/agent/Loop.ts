/**
 * The environment every turn of an AgentLoop runs with: the services taken once
 * when the loop is made (the Engine; ToolRegistry, ContextProvider,
 * ConversationStore, IdGenerator and the observability services when present)
 * and its settings with their defaults applied.
 */
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import type { InferenceFailure, ToolFailure } from "../../domain/Failure.js"
import type * as Message from "../../domain/Message.js"
import * as ContextProvider from "../../services/ContextProvider.js"
import * as ConversationStore from "../../services/ConversationStore.js"
import * as Engine from "../../services/Engine.js"
import * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Ids from "../internal/Ids.js"
import * as Observed from "../internal/Observed.js"
import * as Spans from "../internal/Spans.js"
import * as RetryPolicy from "../../services/RetryPolicy.js"
import type { AgentEvent, Options } from "./Types.js"

/** What every turn of a loop runs with: its services, taken once in `make`, and its settings. */
export interface Loop {
  readonly engine: Engine.Service
  readonly registry: Option.Option<ToolRegistry.Service>
  readonly contextProvider: Option.Option<ContextProvider.Service>
  readonly store: ConversationStore.Service
  readonly nextId: Ids.NextId
  /** EventLog, Metrics and CostTracker when present, provided to every turn. */
  readonly observe: Context.Context<never>
  readonly model: Effect.Effect<string>
  readonly sessionId: string
  readonly options: Options
  readonly maxToolIterations: number
  readonly maxTokens: number
  readonly toolConcurrency: number
  readonly toolRetry: Schedule.Schedule<unknown, ToolFailure>
  readonly inferenceRetry: Schedule.Schedule<unknown, InferenceFailure>
  readonly definitions: ReadonlyArray<Message.ToolDefinition>
  /** One turn at a time per loop. */
  readonly turnLock: Effect.Semaphore
}

/** Where a streamed turn sends its events. */
export type Emit = (event: AgentEvent) => Effect.Effect<void>
export const noEmit: Emit = () => Effect.void

/** Takes the services from the context and applies the defaults. */
export const environment = (options: Options): Effect.Effect<Loop, never, Engine.Engine> =>
  Effect.gen(function* () {
    const engine = yield* Engine.Engine
    const registry = yield* Effect.serviceOption(ToolRegistry.ToolRegistry)
    const contextProvider = yield* Effect.serviceOption(ContextProvider.ContextProvider)
    const storeOption = yield* Effect.serviceOption(ConversationStore.ConversationStore)
    const store = Option.isSome(storeOption) ? storeOption.value : yield* ConversationStore.makeInMemory()
    const nextId = yield* Ids.nextId
    const observe = yield* Observed.services
    const model = yield* Spans.modelName(engine.modelInfo)
    const sessionId = options.sessionId ?? (yield* nextId("session"))
    return {
      engine,
      registry,
      contextProvider,
      store,
      nextId,
      observe,
      model,
      sessionId,
      options,
      maxToolIterations: options.maxToolIterations ?? 20,
      maxTokens: options.maxTokens ?? 2048,
      toolConcurrency: Math.max(1, options.toolConcurrency ?? 4),
      toolRetry: options.toolRetry ?? RetryPolicy.tool,
      inferenceRetry: options.inferenceRetry ?? RetryPolicy.inference,
      definitions: Option.isSome(registry) ? registry.value.definitions(options.allowTools) : [],
      turnLock: yield* Effect.makeSemaphore(1)
    }
  })
