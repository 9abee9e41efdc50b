/**
 * AgentLoop: multi-turn chat with a tool loop.
 *
 * Each `chat(message)` appends the user message, asks the Engine, runs the tool
 * calls the model requests (concurrently under a cap, each under a timeout,
 * idempotent ones retried on a Schedule), feeds every result back (a failed,
 * timed-out or unknown tool becomes an error result the model can react to, never
 * an abort) and repeats until the model answers without tools or a limit is hit.
 * Why it stopped is a value (`StopReason`), and the turn's transcript is kept.
 *
 * Memory: the conversation is stored per session in the ConversationStore (or a
 * private buffer when none is provided); a turn is committed atomically when it
 * ends (all its messages, or with `history: "compact"` only the user message and
 * the final answer, tool traffic being the turn's working memory), so an
 * interrupted or timed-out turn leaves the history as it was. Context from a
 * ContextProvider is ephemeral: placed in the request where the PromptProvider's
 * policy says (without one, just before the user message), never stored. A
 * failing provider degrades to no context and is recorded as an event.
 *
 * Prompts and session state: a loop without a `systemPrompt` of its own, when a
 * PromptProvider is present, starts every request of a session that has no
 * system message with the provider's system prompt, built each turn with the
 * loop's `promptVariables` and the session state's values (not stored, so a
 * decision set in the state shows in the next turn's prompt). `state` is the
 * session's key-value state (the SessionState when one is provided).
 *
 * A turn is a RunLoop run with the native-tools strategy: the loop's history
 * and the user message in, the run's new messages committed (agent/Turn).
 *
 * Client tools (`clientTools`, agent/ClientTools): tools the caller runs itself,
 * offered to the model but never run here. A reply calling one ends the turn
 * with stop reason "tool_calls" and the calls in `pendingToolCalls` (registered
 * tools the same reply called are run first); `resume(results)` answers them
 * and the model goes on, in the same session.
 *
 * `chatStructured(schema, message)` is a turn whose answer must have the
 * schema's shape: the history, the turn's context and the message go to
 * ChatStructured (Structured.run: the schema and the loop's grammar sent to the
 * engine, repair, enum normalization, validation, re-prompts on a Schedule), and
 * only the user message and the accepted answer (as compact JSON) join the history;
 * rejected replies and corrections are the turn's working memory. It needs the
 * Constraint service where the loop is made.
 *
 * Services: Engine is required; ToolRegistry, ContextProvider, ConversationStore,
 * SessionState, PromptProvider, EventLog, Metrics and IdGenerator are used when
 * present. What each inference
 * and tool call records (events, metrics, spans) is internal/Observed.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { ValidationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import { Constraint } from "../services/Constraint.js"
import type { OutputSchema } from "../services/Constraint.js"
import type * as Engine from "../services/Engine.js"
import type * as ConversationStore from "../services/ConversationStore.js"
import type { Loop } from "./agent/Loop.js"
import { environment, environmentNow, noEmit } from "./agent/Loop.js"
import { promptSystem, type TurnInput, turnEffect, userInput } from "./agent/Turn.js"
import { withTurnScope } from "./agent/TurnScope.js"
import type {
  AgentEvent,
  AgentLoopError,
  Options,
  StructuredTurnError,
  StructuredTurnOptions,
  TurnOptions,
  TurnResult
} from "./agent/Types.js"
import * as EphemeralContext from "./internal/EphemeralContext.js"
import * as EventStream from "./internal/EventStream.js"
import * as Observed from "./internal/Observed.js"
import * as Prompt from "./internal/Prompt.js"
import * as Spans from "./internal/Spans.js"
import * as Structured from "./Structured.js"

export type {
  AgentEvent,
  AgentLoopError,
  Options,
  StopReason,
  StructuredTurnError,
  StructuredTurnOptions,
  ToolChoice,
  TurnOptions,
  TurnResult
} from "./agent/Types.js"

export interface AgentLoop {
  readonly sessionId: string
  /** One turn: the user message in, the final answer (and why it stopped) out. */
  readonly chat: (message: string, options?: TurnOptions) => Effect.Effect<TurnResult, AgentLoopError>
  /** One turn as a stream of events: text deltas, tool calls, tool results, then `TurnFinished`. */
  readonly chatStream: (message: string, options?: TurnOptions) => Stream.Stream<AgentEvent, AgentLoopError>
  /**
   * Continues a turn that stopped on client tool calls ("tool_calls"): the
   * caller's results join the history in the order of the calls (a call left
   * unanswered is answered "not executed") and the model goes on. A result that
   * answers no waiting call is a defect (the caller's bug).
   */
  readonly resume: (
    results: ReadonlyArray<Message.ToolResult>,
    options?: TurnOptions
  ) => Effect.Effect<TurnResult, AgentLoopError>
  /** `resume` as a stream of events. */
  readonly resumeStream: (
    results: ReadonlyArray<Message.ToolResult>,
    options?: TurnOptions
  ) => Stream.Stream<AgentEvent, AgentLoopError>
  /**
   * One turn answered in the shape of `schema` (an Effect Schema gives its Type back),
   * with the conversation's history in view; the message and the answer join the history.
   */
  readonly chatStructured: <A, EV extends ValidationFailure = never>(
    schema: OutputSchema<A>,
    message: string,
    options?: StructuredTurnOptions<A, EV>
  ) => Effect.Effect<Structured.Result<A>, StructuredTurnError<EV>>
  /** A copy of the conversation, system prompt first (the PromptProvider's as it is now, when it is the provider's). */
  readonly messages: Effect.Effect<ReadonlyArray<Message.Message>>
  /**
   * The session's state: key-value decisions that carry forward across turns
   * (a preference, a resolved entity), in the SessionState when one is provided.
   * Its string, number and boolean values are variables of the PromptProvider's
   * system prompt.
   */
  readonly state: SessionView
}

/** One session's view of the SessionState. */
export interface SessionView {
  readonly get: (key: string) => Effect.Effect<Option.Option<unknown>>
  readonly set: (key: string, value: unknown) => Effect.Effect<void>
  readonly delete: (key: string) => Effect.Effect<void>
  readonly snapshot: Effect.Effect<Readonly<Record<string, unknown>>>
}

/** Builds an AgentLoop; services are taken from the context once, here. */
export const make = (options: Options = {}): Effect.Effect<AgentLoop, never, Engine.Engine> =>
  Effect.contextWithEffect((services: Context.Context<Engine.Engine>) => makeIn(services, options))

/**
 * Builds an AgentLoop on `services`, as `make` does on the context it runs in:
 * for a caller that holds the services already (the facade's chat, which adds
 * its staged session store), with no context to provide them.
 */
export const makeIn = (services: Context.Context<Engine.Engine>, options: Options = {}): Effect.Effect<AgentLoop> =>
  // the services the loop is made with, read once: the loop's, and what chatStructured runs with
  Effect.flatMap(environment(options, services), (loop) => {
    const made = agentOf(loop, services)
    const { systemPrompt } = options
    if (systemPrompt === undefined) return Effect.succeed(made)
    // a new session starts with the loop's system prompt (a session the store knows keeps its history)
    return Effect.as(
      Effect.flatMap(loop.store.load(loop.sessionId), (history) =>
        history.length === 0 ? loop.store.save(loop.sessionId, [Message.system(systemPrompt)]) : Effect.void),
      made
    )
  })

/** The turns of a loop: what a caller that only runs turns needs of an AgentLoop (`AgentLoop` is one). */
export interface Turns {
  readonly chat: (message: string, options?: TurnOptions) => Effect.Effect<TurnResult, AgentLoopError>
  readonly resume: (results: ReadonlyArray<Message.ToolResult>, options?: TurnOptions) => Effect.Effect<TurnResult, AgentLoopError>
}

/**
 * A loop's turns, made now, for a caller that gives the loop its session and store and no system prompt (nothing to
 * save first) and runs one turn on it: a facade request, on its staged session. The loop's environment and one object
 * over it, not an AgentLoop's dozen closures, with no effect to run for it; or the message
 * of the defect `makeIn` dies with (a tool choice that names no tool).
 *
 * `exclusive`: the caller runs one turn on the loop at a time, has set the turn's correlation (its request id and this
 * session's id) and commits the loop's store itself, so a turn takes no lock, sets nothing and shields no commit
 * (agent/TurnScope): a facade request's loop, made for the request under its session's lock.
 */
export const turnsNow = (
  services: Context.Context<Engine.Engine>,
  store: ConversationStore.Service,
  options: Options & { readonly sessionId: string; readonly systemPrompt?: undefined },
  exclusive = false
): Turns | string => {
  const loop = environmentNow(options, services, store, exclusive)
  return typeof loop === "string" ? loop : new LoopTurns(loop)
}

/** Turns over a loop's environment: its methods on the prototype (called as methods, never handed around). */
class LoopTurns implements Turns {
  constructor(private readonly loop: Loop) {}
  chat(message: string, turn: TurnOptions = {}): Effect.Effect<TurnResult, AgentLoopError> {
    return chat(this.loop, userInput(message), turn)
  }
  resume(results: ReadonlyArray<Message.ToolResult>, turn: TurnOptions = {}): Effect.Effect<TurnResult, AgentLoopError> {
    return chat(this.loop, { _tag: "ToolResults", results }, turn)
  }
}

/** The loop's methods over its environment. */
const agentOf = (loop: Loop, services: Context.Context<Engine.Engine>): AgentLoop => {
  const constraint = Context.getOption(services, Constraint)
  return {
    sessionId: loop.sessionId,
    chat: (message, turn = {}) => chat(loop, userInput(message), turn),
    chatStream: (message, turn = {}) => chatStream(loop, userInput(message), turn),
    resume: (results, turn = {}) => chat(loop, { _tag: "ToolResults", results }, turn),
    resumeStream: (results, turn = {}) => chatStream(loop, { _tag: "ToolResults", results }, turn),
    chatStructured: (schema, message, turn = {}) =>
      Option.isNone(constraint)
        ? Effect.dieMessage(
          "AgentLoop.chatStructured needs the Constraint service: provide it (e.g. JsonConstraint.layer) where the loop is made"
        )
        : chatStructured(loop, Context.add(services, Constraint, constraint.value), schema, message, turn),
    // read each time it is run (the store's history, the PromptProvider's prompt as it is then)
    messages: Effect.suspend(() =>
      Effect.flatMap(loop.store.load(loop.sessionId), (history) =>
        Effect.map(promptSystem(loop, history), (system) => [...system, ...history]))
    ),
    state: sessionView(loop)
  } satisfies AgentLoop
}

/*
 * The loop is a plain object of closures: not an object literal with getters nor
 * an instance of a class with them. V8 builds the first on a slow path, and it
 * decided to allocate instances of the second in the old generation directly
 * (allocation-site pretenuring): each dead instance then kept the young objects
 * it pointed to alive through scavenges, promoted in turn.
 */

/** One session's view of the loop's SessionState. */
const sessionView = (loop: Loop): SessionView => ({
  get: (key) => loop.state.get(loop.sessionId, key),
  set: (key, value) => loop.state.set(loop.sessionId, key, value),
  delete: (key) => loop.state.delete(loop.sessionId, key),
  snapshot: Effect.suspend(() => loop.state.snapshot(loop.sessionId))
})

// ---------------------------------------------------------------------------
// Turns
// ---------------------------------------------------------------------------

const chat = (loop: Loop, input: TurnInput, turn: TurnOptions): Effect.Effect<TurnResult, AgentLoopError> =>
  turnEffect(loop, input, turn, turn.onEvent ?? noEmit, turn.onEvent !== undefined).pipe(
    Observed.spanWith(input._tag === "User" ? "AgentLoop.chat" : "AgentLoop.resume", () => ({ attributes: sessionAttributes(loop) }))
  )

const chatStream = (loop: Loop, input: TurnInput, turn: TurnOptions): Stream.Stream<AgentEvent, AgentLoopError> =>
  EventStream.fromEmitting(
    (emit) =>
      turnEffect(loop, input, turn, emit, true).pipe(
        Observed.span(input._tag === "User" ? "AgentLoop.chatStream" : "AgentLoop.resumeStream", {
          attributes: sessionAttributes(loop)
        })
      ),
    (result): AgentEvent => ({ _tag: "TurnFinished", result })
  )

/** A structured turn, committed (the message and the accepted answer) only when it completes. */
const chatStructured = <A, EV extends ValidationFailure = never>(
  loop: Loop,
  services: Context.Context<Engine.Engine | Constraint>,
  schema: OutputSchema<A>,
  message: string,
  turn: StructuredTurnOptions<A, EV>
): Effect.Effect<Structured.Result<A>, StructuredTurnError<EV>> =>
  withTurnScope(
    loop,
    Effect.gen(() => chatStructuredSteps(loop, services, schema, message, turn)).pipe(Observed.span("AgentLoop.chatStructured", { attributes: sessionAttributes(loop) }))
  )

/** The steps of a structured turn, one generator function for every call (a generator function made per call costs V8 new maps). */
function* chatStructuredSteps<A, EV extends ValidationFailure = never>(loop: Loop, services: Context.Context<Engine.Engine | Constraint>, schema: OutputSchema<A>, message: string, turn: StructuredTurnOptions<A, EV>) {
  const base = yield* loop.store.load(loop.sessionId)
  const context = turn.context ?? (yield* EphemeralContext.retrieve(loop.contextProvider, message))
  const { context: _, ...options } = turn
  const system = yield* promptSystem(loop, base)
  const ask = Structured.run(Prompt.place(loop.prompts, [...system, ...base, Message.user(message)], context), {
    ...options,
    schema,
    grammar: turn.grammar ?? loop.options.grammar,
    maxTokens: turn.maxTokens ?? loop.maxTokens,
    topP: turn.topP ?? loop.options.topP,
    inferenceRetry: turn.inferenceRetry ?? loop.options.inferenceRetry,
    sessionKey: loop.sessionId
  }).pipe(Effect.provide(services))
  return yield* Effect.uninterruptibleMask((restore) =>
    Effect.tap(restore(ask), (result) =>
      loop.store.save(loop.sessionId, [...base, Message.user(message), Message.assistant(result.content)]))
  )
}

const sessionAttributes = (loop: Loop) => ({ sessionId: loop.sessionId, [Spans.Pagantic.sessionId]: loop.sessionId })
