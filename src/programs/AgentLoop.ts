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
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type * as Tracer from "effect/Tracer"
import { Cancellation, InferenceFailure, ToolFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import { ToolCallRecord } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import * as ContextProvider from "../services/ContextProvider.js"
import type { InferenceResult } from "../services/Engine.js"
import * as Engine from "../services/Engine.js"
import * as ConversationStore from "../services/ConversationStore.js"
import { currentCorrelation, withCorrelation } from "../services/EventLog.js"
import { IdGenerator } from "../services/IdGenerator.js"
import * as ToolRegistry from "../services/ToolRegistry.js"
import * as Deadline from "./internal/Deadline.js"
import * as EphemeralContext from "./internal/EphemeralContext.js"
import * as Observed from "./internal/Observed.js"
import * as Spans from "./internal/Spans.js"
import * as RetryPolicy from "./RetryPolicy.js"

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/** Why a turn ended. */
export type StopReason =
  /** The model answered without asking for tools. */
  | "finish"
  /** The model hit its token limit. */
  | "length"
  /** The model still asked for tools after `maxToolIterations` rounds. */
  | "max_iterations"
  /** The turn used up its token budget while the model still asked for tools. */
  | "budget_exhausted"

/** What one turn produced. */
export interface TurnResult {
  readonly content: string
  readonly stopReason: StopReason
  /** Every tool call executed in this turn, in order, with result and duration. */
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  readonly usage: TokenUsage.TokenUsage
  /** Inference calls made in this turn. */
  readonly inferences: number
  /** The messages this turn added to the history (user, assistant, tool...). */
  readonly transcript: ReadonlyArray<Message.Message>
}

/** What a streamed turn emits; the stream ends after `TurnFinished`. */
export type AgentEvent =
  | { readonly _tag: "TextDelta"; readonly text: string; readonly inference: number }
  | { readonly _tag: "ToolCallRequested"; readonly call: Message.ToolCall; readonly inference: number }
  | { readonly _tag: "ToolResultReady"; readonly record: ToolCallRecord }
  | { readonly _tag: "InferenceFinished"; readonly result: InferenceResult; readonly inference: number }
  | { readonly _tag: "TurnFinished"; readonly result: TurnResult }

/** What a turn can fail with: an inference that failed for good, a tool in "fail" mode, the turn's deadline. */
export type AgentLoopError = InferenceFailure | ToolFailure | Cancellation

export interface Options {
  /** The first message of every session this loop starts. */
  readonly systemPrompt?: string | undefined
  /** The conversation to continue or start; a new id is generated when absent. */
  readonly sessionId?: string | undefined
  /** Rounds of tool execution per turn. Default 20. */
  readonly maxToolIterations?: number | undefined
  /** Per inference call. Default 2048. */
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  /** Tool calls of one round run concurrently, at most this many at once. Default 4. */
  readonly toolConcurrency?: number | undefined
  /** Overrides every tool's own timeout. */
  readonly toolTimeout?: Duration.DurationInput | undefined
  /** When idempotent tools are retried. Default `RetryPolicy.tool`. */
  readonly toolRetry?: Schedule.Schedule<unknown, ToolFailure> | undefined
  /** When retryable inference failures are retried. Default `RetryPolicy.inference`. */
  readonly inferenceRetry?: Schedule.Schedule<unknown, InferenceFailure> | undefined
  /** Only these tools are offered and may run; absent or empty: all registered tools. */
  readonly allowTools?: ReadonlyArray<string> | undefined
  /** "feedback" (default): a failed tool becomes an error result for the model; "fail": the turn fails. */
  readonly toolErrorMode?: "feedback" | "fail" | undefined
  /** Total tokens a turn may spend before tool rounds stop. */
  readonly turnTokenBudget?: number | undefined
  /** Deadline for a turn; past it the turn fails with CANCELLED_TIMEOUT and history is unchanged. */
  readonly turnTimeout?: Duration.DurationInput | undefined
  /** Called after every tool execution. */
  readonly onToolResult?: ((record: ToolCallRecord) => Effect.Effect<void>) | undefined
}

export interface TurnOptions {
  /** Context messages for this turn, instead of asking the ContextProvider. */
  readonly context?: ReadonlyArray<Message.Message> | undefined
  /** Extra fields for every inference request of this turn (e.g. schema, grammar). */
  readonly request?:
    | Partial<Pick<Engine.InferenceRequest, "schema" | "grammar" | "temperature" | "maxTokens" | "topP" | "seed" | "options">>
    | undefined
}

export interface AgentLoop {
  readonly sessionId: string
  /** One turn: the user message in, the final answer (and why it stopped) out. */
  readonly chat: (message: string, options?: TurnOptions) => Effect.Effect<TurnResult, AgentLoopError>
  /** One turn as a stream of events: text deltas, tool calls, tool results, then `TurnFinished`. */
  readonly chatStream: (message: string, options?: TurnOptions) => Stream.Stream<AgentEvent, AgentLoopError>
  /** A copy of the conversation, system prompt first. */
  readonly messages: Effect.Effect<ReadonlyArray<Message.Message>>
}

// ---------------------------------------------------------------------------
// The loop's environment
// ---------------------------------------------------------------------------

/** What every turn of a loop runs with: its services, taken once in `make`, and its settings. */
interface Loop {
  readonly engine: Engine.Service
  readonly registry: Option.Option<ToolRegistry.Service>
  readonly contextProvider: Option.Option<ContextProvider.Service>
  readonly store: ConversationStore.Service
  readonly nextId: (prefix: string) => Effect.Effect<string>
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

type Emit = (event: AgentEvent) => Effect.Effect<void>
const noEmit: Emit = () => Effect.void

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

const environment = (options: Options): Effect.Effect<Loop, never, Engine.Engine> =>
  Effect.gen(function* () {
    const engine = yield* Engine.Engine
    const registry = yield* Effect.serviceOption(ToolRegistry.ToolRegistry)
    const contextProvider = yield* Effect.serviceOption(ContextProvider.ContextProvider)
    const storeOption = yield* Effect.serviceOption(ConversationStore.ConversationStore)
    const store = Option.isSome(storeOption) ? storeOption.value : yield* ConversationStore.makeInMemory()
    const ids = yield* Effect.serviceOption(IdGenerator)
    const nextId = (prefix: string) =>
      Option.isSome(ids)
        ? ids.value.next(prefix)
        : Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`)
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
      const request = new Engine.InferenceRequest({
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

// ---------------------------------------------------------------------------
// Inference
// ---------------------------------------------------------------------------

/** One observed inference, retryable failures retried; with its id and span for the tool calls it asks for. */
const inferOnce = (loop: Loop, request: Engine.InferenceRequest, index: number, emit: Emit, streaming: boolean) =>
  Effect.gen(function* () {
    const inferenceId = yield* loop.nextId("inf")
    const [result, span] = yield* Effect.retry(
      Observed.inference({
        model: loop.model,
        request,
        inferenceId,
        call: streaming ? streamedInference(loop.engine, request, index, emit) : loop.engine.infer(request)
      }),
      { schedule: loop.inferenceRetry, while: (f: InferenceFailure) => f.retryable }
    )
    return { result, inferenceId, span }
  })

/** The engine's stream, its text deltas emitted, folded into the result of its Finish part. */
const streamedInference = (
  engine: Engine.Service,
  request: Engine.InferenceRequest,
  index: number,
  emit: Emit
): Effect.Effect<InferenceResult, InferenceFailure> =>
  Effect.gen(function* () {
    const last = yield* Ref.make<Option.Option<InferenceResult>>(Option.none())
    yield* Stream.runForEach(engine.stream(request), (part) => {
      switch (part._tag) {
        case "TextDelta":
          return emit({ _tag: "TextDelta", text: part.text, inference: index })
        case "ToolCallPart":
          return Effect.void
        case "Finish":
          return Ref.set(last, Option.some(part.result))
      }
    })
    const result = yield* Ref.get(last)
    if (Option.isNone(result)) {
      return yield* InferenceFailure.malformed("The engine's stream ended without a Finish part")
    }
    return result.value
  })

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/**
 * One requested tool call, observed, retried while its failure is retryable; its
 * record (an error result in "feedback" mode) is emitted and handed to `onToolResult`.
 */
const runTool = (
  loop: Loop,
  call: Message.ToolCall,
  inferenceId: string,
  requestedBy: Option.Option<Tracer.AnySpan>,
  emit: Emit
) =>
  Effect.gen(function* () {
    const { options } = loop
    const attempts = yield* Ref.make(0)
    const started = yield* Clock.currentTimeMillis
    const once = Effect.flatMap(Ref.updateAndGet(attempts, (n) => n + 1), (attempt) =>
      Observed.toolCall({ call, attempt, inferenceId, requestedBy, execute: executeTool(loop, call) }))
    const outcome = yield* Effect.either(
      Effect.retry(once, { schedule: loop.toolRetry, while: (f: ToolFailure) => f.retryable })
    )
    const durationMs = (yield* Clock.currentTimeMillis) - started
    if (Either.isLeft(outcome) && options.toolErrorMode === "fail") return yield* outcome.left
    const record = new ToolCallRecord({
      id: call.id,
      name: call.name,
      arguments: call.arguments,
      result: Either.isRight(outcome)
        ? outcome.right.content
        : `Error [${outcome.left.code}]: ${outcome.left.message}`,
      isError: Either.isLeft(outcome),
      durationMs
    })
    yield* emit({ _tag: "ToolResultReady", record })
    if (options.onToolResult !== undefined) yield* options.onToolResult(record)
    return record
  })

const executeTool = (loop: Loop, call: Message.ToolCall): Effect.Effect<ToolRegistry.ToolOutput, ToolFailure> =>
  Option.isSome(loop.registry)
    ? loop.registry.value.execute(call, { allow: loop.options.allowTools, timeout: loop.options.toolTimeout })
    : Effect.fail(
        new ToolFailure({
          code: "TOOL_NOT_FOUND",
          tool: call.name,
          toolCallId: call.id,
          retryable: false,
          message: `Tool "${call.name}" does not exist; no tools are registered`
        })
      )

const notExecuted = (call: Message.ToolCall, reason: string) =>
  new ToolCallRecord({
    id: call.id,
    name: call.name,
    arguments: call.arguments,
    result: `Error: not executed: ${reason}`,
    isError: true,
    durationMs: 0
  })

const resultMessage = (r: ToolCallRecord) =>
  Message.toolResult(new Message.ToolResult({ callId: r.id, name: r.name, content: r.result, isError: r.isError }))
