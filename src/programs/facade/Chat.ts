/**
 * Mode chat: one AgentLoop turn in the request's session, streamed. Requests on
 * one session take their turns one after another (./SessionLocks).
 *
 * The turn runs on a staged copy of its session (committed only when the turn is
 * answered), reports its text deltas, tool calls and tool results to the caller's
 * `onProgress`, and keeps the partial output: the text of the latest inference.
 *
 * Its context is retrieved once, before the turn runs, from the ContextProvider
 * (when one is provided). The answer's confidence is that context's relevance
 * ("retrieval": the best passage score, when the scores are on [0, 1], as a model
 * reranker's are). A chat has no vote and no validation of its own, so a turn
 * that retrieved nothing, or passages scored on another scale (BM25), reports no
 * confidence at all: the field is absent, never a guess.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Message from "../../domain/Message.js"
import * as Text from "../../domain/Text.js"
import type { Failure } from "../../domain/Failure.js"
import type { Logprobs } from "../../domain/Sampling.js"
import * as ContextProvider from "../../services/ContextProvider.js"
import * as PromptProvider from "../../services/PromptProvider.js"
import * as ConversationStore from "../../services/ConversationStore.js"
import type * as Engine from "../../services/Engine.js"
import * as AgentLoop from "../AgentLoop.js"
import * as ClientTools from "../agent/ClientTools.js"
import * as EphemeralContext from "../internal/EphemeralContext.js"
import * as Lifecycle from "../Lifecycle.js"
import * as Check from "./Check.js"
import * as Confidence from "./Confidence.js"
import type { Environment } from "./Environment.js"
import * as Hints from "./Hints.js"
import type * as Partial from "./Partial.js"
import * as Prompts from "./Prompts.js"
import * as Session from "./Session.js"
import type { Outcome, Progress, RunOptions } from "./Types.js"

const silent = (_: Progress): Effect.Effect<void> => Effect.void

/**
 * One turn of the request's session, made from a step of `fiber` (the one that moved the request to PREPARE: a
 * new session's turn is made in this step); text deltas, tool calls and results reported as they come. The session
 * is held from its load to its commit: a request on it at the same time waits (./SessionLocks); a session new with
 * this request is nobody else's until its id is answered.
 */
export const runFrom = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  env: Environment,
  chat: Check.Chat,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
): Effect.Effect<Outcome, Failure, Engine.Engine> =>
  chat.request.sessionId === undefined
    // a session new with this request: its id was drawn for it (random), so the store holds nothing under it yet
    ? loaded(env, chat, partial, tracker, runOptions, fiber, noHistory)
    : lockedBy(env, chat.sessionId)(
      // a chain of steps, no generator: a step for what each part needs, none for what is absent (issue 13)
      Effect.flatMap(env.store.load(chat.sessionId), (existing) =>
        Effect.withFiberRuntime((fiber) => loaded(env, chat, partial, tracker, runOptions, fiber, existing)))
    )

const noHistory: ReadonlyArray<Message.Message> = Object.freeze([])

/** The turn on the session's history as loaded: a PromptProvider's system prompt (built by the loop each turn) checked first, at PREPARE. */
const loaded = (
  env: Environment,
  chat: Check.Chat,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions,
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  existing: ReadonlyArray<Message.Message>
): Effect.Effect<Outcome, Failure> => {
  const context = fiber.currentContext as Context.Context<Engine.Engine>
  const prompts = Context.getOption(context, PromptProvider.PromptProvider)
  return chat.prior.some(Message.isSystem) || Option.isNone(prompts)
    // no prompt to build: the turn made in this step
    ? withPrompt(env, chat, partial, tracker, runOptions, existing, context, Option.none(), fiber)
    : Effect.flatMap(
      Prompts.systemPromptOf(prompts, chat.sessionId),
      (provided) => withPrompt(env, chat, partial, tracker, runOptions, existing, context, provided, undefined)
    )
}

const lockedBy = (env: Environment, sessionId: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  env.sessionLocks.withSession(sessionId, effect)

/** The turn, once the session is loaded and the system prompt known. */
const withPrompt = (
  env: Environment,
  chat: Check.Chat,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions,
  existing: ReadonlyArray<Message.Message>,
  context: Context.Context<Engine.Engine>,
  provided: Option.Option<string>,
  /** The fiber whose step this is, when it is the request's own step (the move to EXECUTE can be made in it). */
  fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined
): Effect.Effect<Outcome, Failure> => {
  const { options, store } = env
  const { tools } = chat.request
  const hints = Hints.effective(chat.request.hints)
  // the history the request brings seeds a session the store does not know yet; else the session as loaded (under
  // its lock: ./SessionLocks), so the turn reads it without asking the store again
  const session = Session.staged(store, chat.sessionId, existing.length === 0 && chat.prior.length > 0 ? chat.prior : existing)
  const systemPrompt = chat.prior.length === 0 && Option.isNone(provided) ? options.defaultSystemPrompt : undefined
  const loopOptions = new ChatLoopOptions(
    chat.sessionId,
    systemPrompt,
    options.maxToolIterations,
    options.toolConcurrency,
    hints.maxTokens,
    hints.temperature,
    hints.topP,
    tools.length === 0 ? undefined : tools,
    chat.request.clientTools,
    chat.request.toolChoice,
    chat.request.parallelToolCalls
  )
  // the turn's context, retrieved here (PREPARE) so that its relevance is the answer's confidence
  const contexts = Context.getOption(context, ContextProvider.ContextProvider)
  const withAgent = (agent: AgentLoop.Turns, now: Fiber.RuntimeFiber<unknown, unknown> | undefined) =>
    Option.isNone(contexts)
      ? turnOf(chat, partial, tracker, runOptions, existing, hints, session, agent, noContext, now)
      : Effect.flatMap(
        EphemeralContext.retrieveScored(contexts, chat.user.content),
        (retrieved) => turnOf(chat, partial, tracker, runOptions, existing, hints, session, agent, retrieved, undefined)
      )
  // the loop on the request's services, with the staged session as its store (no context to provide it); made in
  // this step when it has no system prompt to save first
  if (systemPrompt !== undefined) {
    return Effect.flatMap(
      AgentLoop.makeIn(Context.add(context, ConversationStore.ConversationStore, session.store), loopOptions),
      (agent) => withAgent(agent, undefined)
    )
  }
  // exclusive: this request's own loop, one turn under its session's lock, the correlation set on the request's fiber
  const agent = AgentLoop.turnsNow(context, session.store, loopOptions as typeof loopOptions & { readonly systemPrompt: undefined }, true)
  return typeof agent === "string" ? Effect.dieMessage(agent) : withAgent(agent, fiber)
}

const noContext: ContextProvider.Scored = { messages: [], scores: [] }

/**
 * The options of a chat request's loop, kept for the request's length: an instance whose constructor sets its
 * fields (not a `kept` record, whose Object.assign grows the instance's property store field by field).
 */
class ChatLoopOptions implements AgentLoop.Options {
  constructor(
    readonly sessionId: string,
    readonly systemPrompt: string | undefined,
    readonly maxToolIterations: number | undefined,
    readonly toolConcurrency: number | undefined,
    readonly maxTokens: number | undefined,
    readonly temperature: number | undefined,
    readonly topP: number | undefined,
    readonly allowTools: ReadonlyArray<string> | undefined,
    readonly clientTools: AgentLoop.Options["clientTools"],
    readonly toolChoice: AgentLoop.Options["toolChoice"],
    readonly parallelToolCalls: boolean | undefined
  ) {}
}

/** EXECUTE: the turn on the loop, its session committed when it answered. */
const turnOf = (
  chat: Check.Chat,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions,
  existing: ReadonlyArray<Message.Message>,
  hints: ReturnType<typeof Hints.effective>,
  session: Session.StagedSession,
  agent: AgentLoop.Turns,
  retrieved: ContextProvider.Scored,
  /** The request's fiber, when this is one of its steps: the move to EXECUTE made in it. */
  fiber: Fiber.RuntimeFiber<unknown, unknown> | undefined
): Effect.Effect<Outcome, Failure> => {
  // a request ending with tool results continues the calls its session is waiting on
  const results = chat.toolResults.map((m) =>
    new Message.ToolResult({ callId: m.toolCallId, name: m.name, content: m.content, isError: m.isError })
  )
  if (results.length > 0 && existing.length > 0) {
    const answers = ClientTools.answers(existing, results)
    if (answers._tag === "Unexpected") {
      return Effect.fail(Check.invalid(
        `messages: the tool result for call "${Text.excerpt(answers.callId)}" answers no call session "${
          Text.excerpt(chat.sessionId)
        }" is waiting on`
      ))
    }
  }
  const report = runOptions.onProgress ?? silent
  // the log-probabilities of the latest inference: the answer's, when the hints ask for them
  let logprobs: Logprobs | undefined = undefined
  // the turn's events are watched in its own fiber (no stream): partial output, progress, logprobs, each
  // event's state kept in the step that sees it
  const onEvent = (event: AgentLoop.AgentEvent): Effect.Effect<void> => {
    switch (event._tag) {
      case "TextDelta": {
        const kept = Effect.sync(() => void (partial.text += event.text))
        return report === silent ? kept : Effect.zipRight(kept, report({ _tag: "TextDelta", text: event.text }))
      }
      case "ToolCallRequested":
        return report({ _tag: "ToolCallRequested", call: event.call })
      case "ToolResultReady":
        return report({ _tag: "ToolResultReady", record: event.record })
      case "InferenceFinished":
        return Effect.sync(() => {
          logprobs = event.result.logprobs
          // a new inference starts from scratch: partial output is the latest reply
          if (event.result.toolCalls.length > 0) partial.text = ""
        })
      default:
        return Effect.void
    }
  }
  // the engine's request carries `options` only when the request has them
  const turnOptions = {
    context: retrieved.messages,
    onEvent,
    ...(hints.options === undefined ? {} : { request: { options: hints.options } })
  }
  const turn = results.length === 0 ? agent.chat(chat.user.content, turnOptions) : agent.resume(results, turnOptions)
  const executed = Effect.flatMap(turn, (turn) =>
      Effect.as(session.commit, {
        content: turn.content,
        toolCallsMade: turn.toolCalls,
        usage: turn.usage,
        stopReason: turn.stopReason,
        ...(turn.pendingToolCalls.length === 0 ? {} : { pendingToolCalls: turn.pendingToolCalls }),
        logprobs,
        ...Confidence.retrieval(retrieved.scores)
      } satisfies Outcome))
  return fiber === undefined
    ? Lifecycle.moveThen(tracker, "EXECUTE", "chat turn", executed)
    : Lifecycle.moveNowThen(fiber, tracker, "EXECUTE", "chat turn", executed)
}
