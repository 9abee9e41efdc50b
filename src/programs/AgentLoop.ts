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
 * ends, so an interrupted or timed-out turn leaves the history as it was. Context
 * from a ContextProvider is ephemeral: inserted just before the user message in
 * the request, never stored. A failing provider degrades to no context and is
 * recorded as an event.
 *
 * Services: Engine is required; ToolRegistry, ContextProvider, ConversationStore,
 * EventLog, Metrics and IdGenerator are used when present. What each inference
 * and tool call records (events, metrics, spans) is internal/Observed.
 */
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import * as Stream from "effect/Stream"
import type { Cancellation } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import type { ToolCallRecord } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type * as Engine from "../services/Engine.js"
import { InferenceRequest } from "../services/Engine.js"
import { currentCorrelation, withCorrelation } from "../services/EventLog.js"
import { inferOnce } from "./agent/Inference.js"
import type { Emit, Loop } from "./agent/Loop.js"
import { environment, noEmit } from "./agent/Loop.js"
import { notExecuted, resultMessage, runTool } from "./agent/Tools.js"
import type { AgentEvent, AgentLoopError, Options, StopReason, TurnOptions, TurnResult } from "./agent/Types.js"
import * as Deadline from "./internal/Deadline.js"
import * as EphemeralContext from "./internal/EphemeralContext.js"
import * as Spans from "./internal/Spans.js"

export type { AgentEvent, AgentLoopError, Options, StopReason, TurnOptions, TurnResult } from "./agent/Types.js"

export interface AgentLoop {
  readonly sessionId: string
  /** One turn: the user message in, the final answer (and why it stopped) out. */
  readonly chat: (message: string, options?: TurnOptions) => Effect.Effect<TurnResult, AgentLoopError>
  /** One turn as a stream of events: text deltas, tool calls, tool results, then `TurnFinished`. */
  readonly chatStream: (message: string, options?: TurnOptions) => Stream.Stream<AgentEvent, AgentLoopError>
  /** A copy of the conversation, system prompt first. */
  readonly messages: Effect.Effect<ReadonlyArray<Message.Message>>
}

/** Builds an AgentLoop; services are taken from the context once, here. */
export const make = (options: Options = {}): Effect.Effect<AgentLoop, never, Engine.Engine> =>
  Effect.gen(function* () {
    const loop = yield* environment(options)
    const existing = yield* loop.store.load(loop.sessionId)
    if (existing.length === 0 && options.systemPrompt !== undefined) {
      yield* loop.store.save(loop.sessionId, [Message.system(options.systemPrompt)])
    }
    return {
      sessionId: loop.sessionId,
      chat: (message, turn = {}) => chat(loop, message, turn),
      chatStream: (message, turn = {}) => chatStream(loop, message, turn),
      messages: loop.store.load(loop.sessionId)
    } satisfies AgentLoop
  })

// ---------------------------------------------------------------------------
// Turns
// ---------------------------------------------------------------------------

const chat = (loop: Loop, message: string, turn: TurnOptions): Effect.Effect<TurnResult, AgentLoopError> =>
  turnEffect(loop, message, turn, noEmit, false).pipe(
    Effect.withSpan("AgentLoop.chat", { attributes: sessionAttributes(loop) })
  )

const chatStream = (loop: Loop, message: string, turn: TurnOptions): Stream.Stream<AgentEvent, AgentLoopError> =>
  Stream.unwrapScoped(
    Effect.gen(function* () {
      const mailbox = yield* Mailbox.make<AgentEvent, AgentLoopError>()
      yield* turnEffect(loop, message, turn, (e) => Effect.asVoid(mailbox.offer(e)), true).pipe(
        Effect.withSpan("AgentLoop.chatStream", { attributes: sessionAttributes(loop) }),
        Effect.tap((result) => mailbox.offer({ _tag: "TurnFinished", result })),
        Mailbox.into(mailbox),
        Effect.forkScoped
      )
      return Mailbox.toStream(mailbox)
    })
  )

const sessionAttributes = (loop: Loop) => ({ sessionId: loop.sessionId, [Spans.Pagantic.sessionId]: loop.sessionId })

/** A turn, committed to the history only when it completes. */
const turnEffect = (loop: Loop, message: string, turn: TurnOptions, emit: Emit, streaming: boolean) =>
  withTurnScope(
    loop,
    Effect.uninterruptibleMask((restore) =>
      Effect.tap(restore(runTurn(loop, message, turn, emit, streaming)), (result) => commit(loop, result))
    )
  )

/** One turn at a time, under the turn's deadline and correlation ids, with the observability services. */
const withTurnScope = <A, E>(loop: Loop, effect: Effect.Effect<A, E>): Effect.Effect<A, E | Cancellation> =>
  Effect.gen(function* () {
    const correlation = yield* currentCorrelation
    const requestId = correlation.requestId === "unscoped" ? yield* loop.nextId("req") : correlation.requestId
    return yield* effect.pipe(
      Deadline.bound(loop.options.turnTimeout, (duration) => `The turn exceeded its timeout of ${duration}`, {
        sessionId: loop.sessionId
      }),
      withCorrelation({ requestId, sessionId: loop.sessionId })
    )
  }).pipe(loop.turnLock.withPermits(1), Effect.provide(loop.observe))

const commit = (loop: Loop, result: TurnResult) =>
  Effect.flatMap(loop.store.load(loop.sessionId), (base) => loop.store.save(loop.sessionId, [...base, ...result.transcript]))

/** Infer, run the requested tools, feed their results back; until the model answers or a limit is hit. */
const runTurn = (loop: Loop, userText: string, turn: TurnOptions, emit: Emit, streaming: boolean) =>
  Effect.gen(function* () {
    const { options } = loop
    const base = yield* loop.store.load(loop.sessionId)
    const contextMessages = turn.context ?? (yield* EphemeralContext.retrieve(loop.contextProvider, userText))
    const transcript: Array<Message.Message> = [Message.user(userText)]
    const records: Array<ToolCallRecord> = []
    let usage = TokenUsage.empty
    let inferences = 0
    let rounds = 0

    const finish = (content: string, stopReason: StopReason): TurnResult => ({
      content,
      stopReason,
      toolCalls: records.slice(),
      usage,
      inferences,
      transcript: transcript.slice()
    })

    while (true) {
      const request = new InferenceRequest({
        // ephemeral context goes just before the user message and is never stored
        messages: [...base, ...contextMessages, ...transcript],
        tools: loop.definitions,
        maxTokens: turn.request?.maxTokens ?? loop.maxTokens,
        sessionKey: loop.sessionId,
        ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
        ...(options.topP === undefined ? {} : { topP: options.topP }),
        ...turn.request
      })
      const { inferenceId, result, span } = yield* inferOnce(loop, request, inferences, emit, streaming)
      inferences++
      usage = TokenUsage.combine(usage, result.usage)
      transcript.push(Message.assistant(result.content, result.toolCalls))
      yield* emit({ _tag: "InferenceFinished", result, inference: inferences - 1 })

      if (result.toolCalls.length === 0) {
        return finish(result.content, result.finishReason === "length" ? "length" : "finish")
      }
      for (const call of result.toolCalls) yield* emit({ _tag: "ToolCallRequested", call, inference: inferences - 1 })

      const limit = limitReached(loop, rounds, usage)
      if (limit !== undefined) {
        // Answer every pending call so the history stays well-formed for any engine.
        const reason = limit === "max_iterations"
          ? `tool iteration limit (${loop.maxToolIterations}) reached`
          : "token budget exhausted"
        for (const call of result.toolCalls) transcript.push(resultMessage(notExecuted(call, reason)))
        return finish(result.content, limit)
      }
      rounds++
      const done = yield* Effect.forEach(result.toolCalls, (call) => runTool(loop, call, inferenceId, span, emit), {
        concurrency: loop.toolConcurrency
      })
      records.push(...done)
      transcript.push(...done.map(resultMessage))
    }
  })

/** Why tool rounds must stop now, if they must. */
const limitReached = (loop: Loop, rounds: number, usage: TokenUsage.TokenUsage): StopReason | undefined =>
  rounds >= loop.maxToolIterations
    ? "max_iterations"
    : loop.options.turnTokenBudget !== undefined && usage.totalTokens >= loop.options.turnTokenBudget
    ? "budget_exhausted"
    : undefined
