/**
 * What every request of a facade runs with: the services taken once when the
 * facade is made (the Engine when present, the ToolRegistry, Planner and
 * FileSystem when present, the ConversationStore or a private one), the plan
 * handlers those services allow, an id source, and the context the loops run in.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Tracer from "effect/Tracer"
import type { Constraint } from "../../services/Constraint.js"
import * as ConversationStore from "../../services/ConversationStore.js"
import * as Engine from "../../services/Engine.js"
import * as Planner from "../../services/Planner.js"
import { Reranker } from "../../services/Reranker.js"
import { Retriever } from "../../services/Retriever.js"
import * as ToolRegistry from "../../services/ToolRegistry.js"
import { Validator } from "../../services/Validator.js"
import * as Ids from "../internal/Ids.js"
import * as Observed from "../internal/Observed.js"
import * as PlanExecutor from "../PlanExecutor.js"
import * as SessionLocks from "./SessionLocks.js"
import * as Local from "../../services/internal/Local.js"
import type { Options } from "./Types.js"

/** The services and settings every request of one facade shares. */
export interface Environment {
  readonly options: Options
  /**
   * The facade's Engine when present, following the request in progress (`Engine.inRequest`, made once here: it
   * reads the request's wrapper when called), the engine every mode but a query runs on.
   */
  readonly engine: Option.Option<Engine.Service>
  readonly registry: Option.Option<ToolRegistry.Service>
  readonly planner: Option.Option<Planner.Service>
  readonly fileSystem: Option.Option<FileSystem.FileSystem>
  /** Chat sessions continue by session id here: the provided ConversationStore, else one private to the facade. */
  readonly store: ConversationStore.Service
  readonly planHandlers: ReadonlyArray<PlanExecutor.StepHandler>
  readonly nextId: Ids.NextId
  /** The context the loops run in: the facade's own (without its parent span) and the store. */
  readonly context: Context.Context<Constraint | ConversationStore.ConversationStore>
  /** `context` with `engine` as the Engine (when there is one): what every mode but a query runs in, made once. */
  readonly contextWithEngine: Context.Context<Constraint | ConversationStore.ConversationStore>
  /** Whether the facade's own services record what is observed (an EventLog that keeps events, Metrics). */
  readonly recording: boolean
  /** One chat turn at a time per session, across the facade's requests. */
  readonly sessionLocks: SessionLocks.SessionLocks
  /** The context a request's fiber starts with, merged once for requests from one caller's context. */
  readonly requestContexts: Local.MergeMemo
}

/** Takes the services once, from the context the facade is made in. */
export const make = (options: Options): Effect.Effect<Environment, never, Constraint> =>
  Effect.gen(function* () {
    // the span the facade is made in (if any) is not the parent of its requests' spans; the scope it is made in (a
    // layer's) is not theirs either, nor is the memo map of a layer build: a request runs in its caller's
    const context = Context.omit(Tracer.ParentSpan, Scope.Scope, Layer.CurrentMemoMap)(
      yield* Effect.context<Constraint>()
    ) as Context.Context<Constraint>
    const engine = yield* Effect.serviceOption(Engine.Engine)
    const nextId = yield* Ids.nextId
    const shared = yield* Effect.serviceOption(ConversationStore.ConversationStore)
    const store = Option.isSome(shared) ? shared.value : yield* ConversationStore.makeInMemory()
    const planner = yield* Effect.serviceOption(Planner.Planner)
    const fileSystem = yield* Effect.serviceOption(FileSystem.FileSystem)
    const registry = yield* Effect.serviceOption(ToolRegistry.ToolRegistry)
    const present = {
      tool: Option.isSome(registry),
      retrieve: Option.isSome(yield* Effect.serviceOption(Retriever)),
      rerank: Option.isSome(yield* Effect.serviceOption(Reranker)),
      validate: Option.isSome(yield* Effect.serviceOption(Validator))
    }
    const planHandlers: ReadonlyArray<PlanExecutor.StepHandler> = options.planHandlers ?? [
      PlanExecutor.infer(),
      ...(present.tool ? [PlanExecutor.tool()] : []),
      ...(present.retrieve ? [PlanExecutor.retrieve()] : []),
      ...(present.rerank ? [PlanExecutor.rerank()] : []),
      ...(present.validate ? [PlanExecutor.validate()] : [])
    ]
    const following = Option.map(engine, Engine.inRequest)
    const loopContext = Context.add(context, ConversationStore.ConversationStore, store)
    return {
      options,
      engine: following,
      registry,
      planner,
      fileSystem,
      store,
      planHandlers,
      nextId,
      context: loopContext,
      contextWithEngine: Option.isSome(following) ? Context.add(loopContext, Engine.Engine, following.value) : loopContext,
      recording: yield* Observed.recording,
      sessionLocks: SessionLocks.make(),
      requestContexts: new Local.MergeMemo()
    }
  })
