/**
 * The environment every turn of an AgentLoop runs with: the services taken once
 * when the loop is made (the Engine; ToolRegistry, ContextProvider,
 * ConversationStore, SessionState, PromptProvider, CostTracker, IdGenerator and
 * the observability services when present), its settings with their defaults
 * applied, the tools offered (registered and the caller's, see ClientTools), and
 * the run-loop settings each turn starts from.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ContextProvider from "../../services/ContextProvider.js"
import * as ConversationStore from "../../services/ConversationStore.js"
import * as PromptProvider from "../../services/PromptProvider.js"
import * as SessionState from "../../services/SessionState.js"
import type * as Engine from "../../services/Engine.js"
import * as RetryPolicy from "../../services/RetryPolicy.js"
import * as Permits from "../../services/internal/Permits.js"
import * as Ids from "../internal/Ids.js"
import * as Run from "../run/Loop.js"
import { nativeTools } from "../run/Strategies.js"
import * as ClientTools from "./ClientTools.js"
import type { AgentEvent, Options } from "./Types.js"
import { kept } from "../../services/internal/Kept.js"

/** What every turn of a loop runs with: its services, taken once in `make`, and its settings. */
export interface Loop {
  readonly runtime: Run.Runtime
  /** The run-loop settings of every turn; a turn adds its request defaults, context and events. */
  readonly settings: Run.Settings<string, never>
  readonly contextProvider: Option.Option<ContextProvider.Service>
  readonly store: ConversationStore.Service
  /** The PromptProvider, when present: the system prompt of a loop without one, and where context goes. */
  readonly prompts: Option.Option<PromptProvider.Service>
  /** Key-value decisions of the session: the provided SessionState, else one private to the loop. */
  readonly state: SessionState.Service
  readonly nextId: Ids.NextId
  /** EventLog, Metrics and CostTracker when present, provided to every turn. */
  readonly observe: Context.Context<never>
  readonly sessionId: string
  readonly options: Options
  /** The names of the client tools (never run here). */
  readonly clientNames: ReadonlySet<string>
  readonly maxTokens: number
  /** One turn at a time per loop. */
  readonly turnLock: Permits.Permits
}

/** Where a streamed turn sends its events. */
export type Emit = (event: AgentEvent) => Effect.Effect<void>
export const noEmit: Emit = () => Effect.void

/** The native-tools strategy of each tool-use policy (plain functions, shared by every loop). */
const native = {
  auto: nativeTools({ toolUsePolicy: "auto" }),
  none: nativeTools({ toolUsePolicy: "none" }),
  required: nativeTools({ toolUsePolicy: "required" })
}

/**
 * Takes the services from `services` (the context the loop is made in) and
 * applies the defaults. With a ConversationStore in the context and a session
 * id given (a facade request's loop), there is nothing to run: the loop is a
 * value (or a defect, for a tool choice that names no tool).
 */
export const environment = (options: Options, services: Context.Context<Engine.Engine>): Effect.Effect<Loop> => {
  const runtime = Run.runtimeOf(services)
  const storeOption = Context.getOption(services, ConversationStore.ConversationStore)
  if (Option.isSome(storeOption) && options.sessionId !== undefined) {
    return loopOf(options, services, runtime, storeOption.value, options.sessionId)
  }
  // a new session's id, drawn when the loop is made (each run of the effect makes another): a capability, random
  // whatever the IdGenerator (internal/Ids)
  return Option.isSome(storeOption)
    ? Effect.suspend(() => loopOf(options, services, runtime, storeOption.value, Ids.unsafeSessionId()))
    : Effect.flatMap(
      ConversationStore.makeInMemory(),
      (store) => loopOf(options, services, runtime, store, options.sessionId ?? Ids.unsafeSessionId())
    )
}

/** The loop on its store and session, the defaults applied. */
const loopOf = (
  options: Options,
  services: Context.Context<Engine.Engine>,
  runtime: Run.Runtime,
  store: ConversationStore.Service,
  sessionId: string
): Effect.Effect<Loop> => {
  const loop = loopNow(options, services, runtime, store, sessionId)
  return typeof loop === "string" ? Effect.dieMessage(loop) : Effect.succeed(loop)
}

/**
 * `environment` made now, for a caller that gives the loop its session (`options.sessionId`) and its store:
 * the loop, or the defect it is (a tool choice that names no tool).
 */
export const environmentNow = (
  options: Options & { readonly sessionId: string },
  services: Context.Context<Engine.Engine>,
  store: ConversationStore.Service
): Loop | string => loopNow(options, services, Run.runtimeOf(services), store, options.sessionId)

/** `loopOf`, made now: the loop, or the message of its defect. */
const loopNow = (
  options: Options,
  services: Context.Context<Engine.Engine>,
  runtime: Run.Runtime,
  store: ConversationStore.Service,
  sessionId: string
): Loop | string => {
  const stateOption = Context.getOption(services, SessionState.SessionState)
  // without a SessionState, one private to the loop, made if the loop ever uses it
  const state = Option.isSome(stateOption) ? stateOption.value : SessionState.lazyInMemory()
  const registered = Option.isSome(runtime.registry) ? runtime.registry.value.definitions(options.allowTools) : []
  const client = options.clientTools ?? []
  const unknown = ClientTools.unknownChoice(registered, client, options.toolChoice)
  if (unknown !== undefined) {
    return `AgentLoop: toolChoice names "${unknown}", which is neither a registered tool nor a client tool`
  }
  const offer = ClientTools.offer(registered, client, options.toolChoice)
  const strategy = ClientTools.strategy(
    native[offer.policy],
    offer.clientNames,
    options.parallelToolCalls ?? true
  )
  const settings: Run.Settings<string, never> = kept({
    strategy,
    // a tool round per model call, and one more call to answer the last round
    maxIterations: Math.max(0, options.maxToolIterations ?? 20) + 1,
    transformContext: Option.none(),
    onEvent: Option.none(),
    request: {},
    allowTools: options.allowTools,
    toolConcurrency: Math.max(1, options.toolConcurrency ?? 4),
    toolTimeout: options.toolTimeout,
    toolRetry: options.toolRetry ?? RetryPolicy.tool,
    inferenceRetry: options.inferenceRetry ?? RetryPolicy.inference,
    stopOnToolError: options.toolErrorMode === "fail",
    tokenBudget: Option.fromNullable(options.turnTokenBudget),
    costBudget: Option.none(),
    abort: Option.none(),
    abortedAlready: false,
    definitions: offer.definitions,
    steps: {}
  })
  return kept({
    runtime,
    settings,
    contextProvider: Context.getOption(services, ContextProvider.ContextProvider),
    store,
    prompts: Context.getOption(services, PromptProvider.PromptProvider),
    state,
    nextId: runtime.nextId,
    observe: runtime.observe,
    sessionId,
    options,
    clientNames: offer.clientNames,
    maxTokens: options.maxTokens ?? 2048,
    turnLock: Permits.unsafeMake(1)
  })
}
