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
  /**
   * Whether the loop's caller runs one turn on it at a time, has set the turn's correlation and commits the turn's
   * store itself (a facade request's loop, under its session's lock, on a staged copy of its session: agent/TurnScope
   * takes no lock, sets nothing and shields no commit for it).
   */
  readonly exclusive: boolean
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
  const loop = loopNow(options, services, runtime, store, sessionId, false)
  return typeof loop === "string" ? Effect.dieMessage(loop) : Effect.succeed(loop)
}

/**
 * `environment` made now, for a caller that gives the loop its session (`options.sessionId`) and its store:
 * the loop, or the defect it is (a tool choice that names no tool).
 */
export const environmentNow = (
  options: Options & { readonly sessionId: string },
  services: Context.Context<Engine.Engine>,
  store: ConversationStore.Service,
  exclusive: boolean
): Loop | string => loopNow(options, services, Run.runtimeOf(services), store, options.sessionId, exclusive)

/** `loopOf`, made now: the loop, or the message of its defect. */
const loopNow = (
  options: Options,
  services: Context.Context<Engine.Engine>,
  runtime: Run.Runtime,
  store: ConversationStore.Service,
  sessionId: string,
  exclusive: boolean
): Loop | string => {
  // without a SessionState, one private to the loop, made if the loop ever uses it (LoopEnvironment `state`)
  const state = services.unsafeMap.get(SessionState.SessionState.key) as SessionState.Service | undefined
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
  const settings = new TurnSettings(
    strategy,
    // a tool round per model call, and one more call to answer the last round
    Math.max(0, options.maxToolIterations ?? 20) + 1,
    options.allowTools,
    Math.max(1, options.toolConcurrency ?? 4),
    options.toolTimeout,
    options.toolRetry ?? RetryPolicy.tool,
    options.inferenceRetry ?? RetryPolicy.inference,
    options.toolErrorMode === "fail",
    Option.fromNullable(options.turnTokenBudget),
    offer.definitions
  )
  return new LoopEnvironment(
    runtime,
    settings,
    Context.getOption(services, ContextProvider.ContextProvider),
    store,
    Context.getOption(services, PromptProvider.PromptProvider),
    state,
    sessionId,
    options,
    offer.clientNames,
    options.maxTokens ?? 2048,
    exclusive
  )
}

/*
 * The loop and its settings are built per turn by a facade request (a loop per request): classes whose fields are
 * set by their constructors, not `kept` records (an Object.assign of 13 and 18 fields onto an empty instance grows
 * its property store step by step). Like `kept`'s,
 * a `new` has no allocation site V8 could pretenure.
 */

// shared by every loop: nobody writes to them (a literal per loop would be an allocation site V8 may pretenure)
const noRequest: Run.Settings<string, never>["request"] = Object.freeze({})
const noSteps: Run.Settings<string, never>["steps"] = Object.freeze({})

/** The run-loop settings every turn of a loop starts from, and a turn's (its request defaults, context and events). */
class TurnSettings implements Run.Settings<string, never> {
  readonly costBudget = Option.none()
  readonly abort = Option.none()
  readonly abortedAlready = false
  readonly steps: Run.Settings<string, never>["steps"] = noSteps
  constructor(
    readonly strategy: Run.Settings<string, never>["strategy"],
    readonly maxIterations: number,
    readonly allowTools: ReadonlyArray<string> | undefined,
    readonly toolConcurrency: number,
    readonly toolTimeout: Run.Settings<string, never>["toolTimeout"],
    readonly toolRetry: Run.Settings<string, never>["toolRetry"],
    readonly inferenceRetry: Run.Settings<string, never>["inferenceRetry"],
    readonly stopOnToolError: boolean,
    readonly tokenBudget: Option.Option<number>,
    readonly definitions: Run.Settings<string, never>["definitions"],
    readonly request: Run.Settings<string, never>["request"] = noRequest,
    readonly transformContext: Run.Settings<string, never>["transformContext"] = Option.none(),
    readonly onEvent: Run.Settings<string, never>["onEvent"] = Option.none()
  ) {}
}

/** A turn's settings: the loop's, with the turn's request defaults, context transform and events (a record per turn). */
export const turnSettings = (
  loop: Loop,
  request: Run.Settings<string, never>["request"],
  transformContext: Run.Settings<string, never>["transformContext"],
  onEvent: Run.Settings<string, never>["onEvent"]
): Run.Settings<string, never> => {
  const s = loop.settings
  return new TurnSettings(
    s.strategy,
    s.maxIterations,
    s.allowTools,
    s.toolConcurrency,
    s.toolTimeout,
    s.toolRetry,
    s.inferenceRetry,
    s.stopOnToolError,
    s.tokenBudget,
    s.definitions,
    request,
    transformContext,
    onEvent
  )
}

/** A loop's environment (see `Loop`). */
class LoopEnvironment implements Loop {
  readonly nextId: Ids.NextId
  readonly observe: Context.Context<never>
  private lock: Permits.Permits | undefined = undefined
  constructor(
    readonly runtime: Run.Runtime,
    readonly settings: Run.Settings<string, never>,
    readonly contextProvider: Option.Option<ContextProvider.Service>,
    readonly store: ConversationStore.Service,
    readonly prompts: Option.Option<PromptProvider.Service>,
    private readonly provided: SessionState.Service | undefined,
    readonly sessionId: string,
    readonly options: Options,
    readonly clientNames: ReadonlySet<string>,
    readonly maxTokens: number,
    readonly exclusive: boolean
  ) {
    this.nextId = runtime.nextId
    this.observe = runtime.observe
  }

  /** Made when a turn first takes it: an exclusive loop (a facade request's) never does. */
  get turnLock(): Permits.Permits {
    return this.lock ??= Permits.unsafeMake(1)
  }

  private own: SessionState.Service | undefined = undefined

  /** The provided SessionState, else one private to the loop, made when first used (most loops never use it). */
  get state(): SessionState.Service {
    return this.provided ?? (this.own ??= SessionState.unsafeMakeInMemory())
  }
}
