/**
 * AgentLoop: multi-turn chat with a tool loop (seed 01).
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
 * EventLog, Metrics and IdGenerator are used when present.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type * as Tracer from "effect/Tracer"
import * as Event from "../domain/Event.js"
import { canonicalJson } from "../domain/Json.js"
import { Cancellation, InferenceFailure, ToolFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import { ToolCallRecord } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import { ContextProvider } from "../services/Context.js"
import type { InferenceResult } from "../services/Engine.js"
import { Engine, InferenceRequest } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import { ConversationStore, makeInMemoryConversationStore } from "../services/Memory.js"
import {
  CostTracker,
  currentCorrelation,
  EventLog,
  Metrics,
  recordEvent,
  withCorrelation,
  withMetrics
} from "../services/Observe.js"
import { ToolRegistry } from "../services/ToolRegistry.js"
import * as Spans from "./internal/Spans.js"
import * as EphemeralContext from "./internal/EphemeralContext.js"
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

/** What a turn can fail with (seed 03's matrix for AgentLoop). */
export type AgentLoopError = InferenceFailure | ToolFailure | Cancellation

export interface Options {
  /** The first message of every session this loop starts. */
  readonly systemPrompt?: string
  /** The conversation to continue or start; a new id is generated when absent. */
  readonly sessionId?: string
  /** Rounds of tool execution per turn. Default 20. */
  readonly maxToolIterations?: number
  /** Per inference call. Default 2048. */
  readonly maxTokens?: number
  readonly temperature?: number
  readonly topP?: number
  /** Tool calls of one round run concurrently, at most this many at once. Default 4. */
  readonly toolConcurrency?: number
  /** Overrides every tool's own timeout. */
  readonly toolTimeout?: Duration.DurationInput
  /** When idempotent tools are retried. Default `RetryPolicy.tool`. */
  readonly toolRetry?: Schedule.Schedule<unknown, ToolFailure>
  /** When retryable inference failures are retried. Default `RetryPolicy.inference`. */
  readonly inferenceRetry?: Schedule.Schedule<unknown, InferenceFailure>
  /** Only these tools are offered and may run; absent or empty: all registered tools. */
  readonly allowTools?: ReadonlyArray<string>
  /** "feedback" (default): a failed tool becomes an error result for the model; "fail": the turn fails. */
  readonly toolErrorMode?: "feedback" | "fail"
  /** Total tokens a turn may spend before tool rounds stop. */
  readonly turnTokenBudget?: number
  /** Deadline for a turn; past it the turn fails with CANCELLED_TIMEOUT and history is unchanged. */
  readonly turnTimeout?: Duration.DurationInput
  /** Called after every tool execution. */
  readonly onToolResult?: (record: ToolCallRecord) => Effect.Effect<void>
}

export interface TurnOptions {
  /** Context messages for this turn, instead of asking the ContextProvider. */
  readonly context?: ReadonlyArray<Message.Message>
  /** Extra fields for every inference request of this turn (e.g. schema, grammar). */
  readonly request?: Partial<
    Pick<InferenceRequest, "schema" | "grammar" | "temperature" | "maxTokens" | "topP" | "seed" | "options">
  >
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
// Implementation
// ---------------------------------------------------------------------------

type Emit = (event: AgentEvent) => Effect.Effect<void>
const noEmit: Emit = () => Effect.void

const hashArgs = (args: Record<string, unknown>): string => {
  const text = canonicalJson(args)
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h.toString(16).padStart(8, "0")
}

const errorFields = (failure: { readonly code: string; readonly message: string } | undefined) =>
  failure === undefined ? {} : { errorCode: failure.code, error: failure.message }

const toEventFinish = (result: InferenceResult): Event.InferenceEnd["finishReason"] => result.finishReason

/** Builds an AgentLoop; services are taken from the context once, here. */
export const make = (options: Options = {}): Effect.Effect<AgentLoop, never, Engine> =>
  Effect.gen(function* () {
    const engine = yield* Engine
    const registry = yield* Effect.serviceOption(ToolRegistry)
    const contextProvider = yield* Effect.serviceOption(ContextProvider)
    const storeOption = yield* Effect.serviceOption(ConversationStore)
    const store = Option.isSome(storeOption) ? storeOption.value : yield* makeInMemoryConversationStore()
    const ids = yield* Effect.serviceOption(IdGenerator)
    const nextId = (prefix: string) =>
      Option.isSome(ids)
        ? ids.value.next(prefix)
        : Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`)

    // Observability services are captured here so that methods require nothing.
    let observe = Context.empty() as Context.Context<never>
    const eventLog = yield* Effect.serviceOption(EventLog)
    if (Option.isSome(eventLog)) observe = Context.add(observe, EventLog, eventLog.value) as Context.Context<never>
    const metrics = yield* Effect.serviceOption(Metrics)
    if (Option.isSome(metrics)) observe = Context.add(observe, Metrics, metrics.value) as Context.Context<never>
    const cost = yield* Effect.serviceOption(CostTracker)
    if (Option.isSome(cost)) observe = Context.add(observe, CostTracker, cost.value) as Context.Context<never>
    const model = yield* Spans.modelName(engine.modelInfo)

    const sessionId = options.sessionId ?? (yield* nextId("session"))
    const maxToolIterations = options.maxToolIterations ?? 20
    const maxTokens = options.maxTokens ?? 2048
    const toolConcurrency = Math.max(1, options.toolConcurrency ?? 4)
    const toolRetry = options.toolRetry ?? RetryPolicy.tool
    const inferenceRetry = options.inferenceRetry ?? RetryPolicy.inference
    const allow = options.allowTools
    const definitions = Option.isSome(registry) ? registry.value.definitions(allow) : []
    const turnLock = yield* Effect.makeSemaphore(1)

    const existing = yield* store.load(sessionId)
    if (existing.length === 0 && options.systemPrompt !== undefined) {
      yield* store.save(sessionId, [Message.system(options.systemPrompt)])
    }

    // -- context --------------------------------------------------------------
    const fetchContext = (query: string) => EphemeralContext.retrieve(contextProvider, query)

    // -- inference ------------------------------------------------------------
    const inferOnce = (request: InferenceRequest, index: number, emit: Emit, streaming: boolean) =>
      Effect.gen(function* () {
        const inferenceId = yield* nextId("inf")
        const span = yield* Ref.make<Option.Option<Tracer.AnySpan>>(Option.none())
        const attempt = Effect.gen(function* () {
          const started = yield* Clock.currentTimeMillis
          yield* recordEvent(
            (base) =>
              new Event.InferenceStart({
                ...base,
                layer: "inference",
                inferenceId,
                messageCount: request.messages.length,
                toolDefsCount: request.tools.length,
                schemaPresent: request.schema !== undefined,
                grammarPresent: request.grammar !== undefined,
                ...(request.temperature === undefined ? {} : { temperature: request.temperature })
              })
          )
          const engineCall: Effect.Effect<InferenceResult, InferenceFailure> = streaming
            ? Effect.gen(function* () {
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
            : engine.infer(request)
          const call = Effect.map(
            Spans.inference(model, request, engineCall, { inferenceId }),
            ([result, inferenceSpan]) => Effect.as(Ref.set(span, inferenceSpan), result)
          ).pipe(Effect.flatten)
          const exit = yield* Effect.exit(call)
          const durationMs = (yield* Clock.currentTimeMillis) - started
          yield* recordEvent((base) =>
            Exit.isSuccess(exit)
              ? new Event.InferenceEnd({
                  ...base,
                  layer: "inference",
                  inferenceId,
                  durationMs,
                  tokensIn: exit.value.usage.promptTokens,
                  tokensOut: exit.value.usage.outputTokens,
                  finishReason: toEventFinish(exit.value),
                  toolCallCount: exit.value.toolCalls.length
                })
              : new Event.InferenceEnd({
                  ...base,
                  layer: "inference",
                  inferenceId,
                  durationMs,
                  tokensIn: 0,
                  tokensOut: 0,
                  finishReason: "error",
                  toolCallCount: 0,
                  ...errorFields(failureOf(exit.cause))
                })
          )
          yield* withMetrics((m) =>
            Effect.zipRight(
              m.recordLatency("inference", durationMs),
              Exit.isSuccess(exit) ? m.recordTokens(exit.value.usage) : m.increment("inference_errors")
            )
          )
          return yield* exit
        })
        const result = yield* Effect.retry(attempt, {
          schedule: inferenceRetry,
          while: (f: InferenceFailure) => f.retryable
        })
        return { result, inferenceId, span: yield* Ref.get(span) }
      })

    // -- tools ----------------------------------------------------------------
    const runTool = (call: Message.ToolCall, inferenceId: string, requestedBy: Option.Option<Tracer.AnySpan>, emit: Emit) =>
      Effect.gen(function* () {
        const attempts = yield* Ref.make(0)
        const started = yield* Clock.currentTimeMillis
        const once = Effect.gen(function* () {
          const attempt = yield* Ref.updateAndGet(attempts, (n) => n + 1)
          if (attempt > 1) yield* withMetrics((m) => m.increment("tool_retries"))
          const t0 = yield* Clock.currentTimeMillis
          yield* recordEvent(
            (base) =>
              new Event.ToolStart({
                ...base,
                layer: "tool",
                toolName: call.name,
                toolCallId: call.id,
                inferenceId,
                argsHash: hashArgs(call.arguments),
                attempt
              })
          )
          const exit = yield* Effect.exit(
            (Option.isSome(registry)
              ? registry.value.execute(call, {
                  allow,
                  ...(options.toolTimeout === undefined ? {} : { timeout: options.toolTimeout })
                })
              : Effect.fail(
                  new ToolFailure({
                    code: "TOOL_NOT_FOUND",
                    tool: call.name,
                    toolCallId: call.id,
                    retryable: false,
                    message: `Tool "${call.name}" does not exist; no tools are registered`
                  })
                )).pipe(Spans.tool(call, requestedBy, attempt, inferenceId))
          )
          const durationMs = (yield* Clock.currentTimeMillis) - t0
          const failure = Exit.isFailure(exit) ? failureOf(exit.cause) : undefined
          yield* recordEvent(
            (base) =>
              new Event.ToolEnd({
                ...base,
                layer: "tool",
                toolName: call.name,
                toolCallId: call.id,
                durationMs,
                success: Exit.isSuccess(exit),
                ...errorFields(failure)
              })
          )
          yield* withMetrics((m) =>
            Effect.zipRight(m.recordLatency("tool", durationMs), m.increment(Exit.isSuccess(exit) ? "tool_calls" : "tool_errors"))
          )
          return yield* exit
        }).pipe(withCorrelation({ toolCallId: call.id, causedBy: call.id }))

        const outcome = yield* Effect.either(
          Effect.retry(once, { schedule: toolRetry, while: (f: ToolFailure) => f.retryable })
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

    const notExecuted = (call: Message.ToolCall, reason: string) =>
      new ToolCallRecord({
        id: call.id,
        name: call.name,
        arguments: call.arguments,
        result: `Error: not executed: ${reason}`,
        isError: true,
        durationMs: 0
      })

    const recordOf = (r: ToolCallRecord) =>
      Message.toolResult(new Message.ToolResult({ callId: r.id, name: r.name, content: r.result, isError: r.isError }))

    // -- the turn -------------------------------------------------------------
    const runTurn = (userText: string, turn: TurnOptions, emit: Emit, streaming: boolean) =>
      Effect.gen(function* () {
        const base = yield* store.load(sessionId)
        const contextMessages = turn.context ?? (yield* fetchContext(userText))
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
            tools: definitions,
            maxTokens: turn.request?.maxTokens ?? maxTokens,
            sessionKey: sessionId,
            ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
            ...(options.topP === undefined ? {} : { topP: options.topP }),
            ...turn.request
          })
          const { inferenceId, result, span } = yield* inferOnce(request, inferences, emit, streaming)
          inferences++
          usage = TokenUsage.combine(usage, result.usage)
          transcript.push(Message.assistant(result.content, result.toolCalls))
          yield* emit({ _tag: "InferenceFinished", result, inference: inferences - 1 })

          if (result.toolCalls.length === 0) {
            return finish(result.content, result.finishReason === "length" ? "length" : "finish")
          }
          for (const call of result.toolCalls) yield* emit({ _tag: "ToolCallRequested", call, inference: inferences - 1 })

          const limit: StopReason | undefined =
            rounds >= maxToolIterations
              ? "max_iterations"
              : options.turnTokenBudget !== undefined && usage.totalTokens >= options.turnTokenBudget
                ? "budget_exhausted"
                : undefined
          if (limit !== undefined) {
            // Answer every pending call so the history stays well-formed for any engine.
            const reason = limit === "max_iterations" ? `tool iteration limit (${maxToolIterations}) reached` : "token budget exhausted"
            for (const call of result.toolCalls) transcript.push(recordOf(notExecuted(call, reason)))
            return finish(result.content, limit)
          }
          rounds++
          const done = yield* Effect.forEach(result.toolCalls, (call) => runTool(call, inferenceId, span, emit), {
            concurrency: toolConcurrency
          })
          records.push(...done)
          transcript.push(...done.map(recordOf))
        }
      })

    const withTurnScope = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E | Cancellation> =>
      Effect.gen(function* () {
        const correlation = yield* currentCorrelation
        const requestId = correlation.requestId === "unscoped" ? yield* nextId("req") : correlation.requestId
        const timed =
          options.turnTimeout === undefined
            ? effect
            : Effect.timeoutFail(effect, {
                duration: options.turnTimeout,
                onTimeout: () =>
                  Cancellation.timeout(`The turn exceeded its timeout of ${Duration.format(Duration.decode(options.turnTimeout!))}`, {
                    sessionId
                  })
              })
        return yield* timed.pipe(withCorrelation({ requestId, sessionId }))
      }).pipe(turnLock.withPermits(1), Effect.provide(observe))

    const commit = (result: TurnResult) =>
      Effect.flatMap(store.load(sessionId), (base) => store.save(sessionId, [...base, ...result.transcript]))

    const turnEffect = (message: string, turn: TurnOptions, emit: Emit, streaming: boolean) =>
      withTurnScope(
        Effect.uninterruptibleMask((restore) =>
          Effect.tap(restore(runTurn(message, turn, emit, streaming)), commit)
        )
      )

    const chat = (message: string, turn: TurnOptions = {}) =>
      turnEffect(message, turn, noEmit, false).pipe(
        Effect.withSpan("AgentLoop.chat", { attributes: { sessionId, [Spans.Pagantic.sessionId]: sessionId } })
      )

    const chatStream = (message: string, turn: TurnOptions = {}): Stream.Stream<AgentEvent, AgentLoopError> =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          const mailbox = yield* Mailbox.make<AgentEvent, AgentLoopError>()
          yield* turnEffect(message, turn, (e) => Effect.asVoid(mailbox.offer(e)), true).pipe(
            Effect.withSpan("AgentLoop.chatStream", { attributes: { sessionId, [Spans.Pagantic.sessionId]: sessionId } }),
            Effect.tap((result) => mailbox.offer({ _tag: "TurnFinished", result })),
            Mailbox.into(mailbox),
            Effect.forkScoped
          )
          return Mailbox.toStream(mailbox)
        })
      )

    return {
      sessionId,
      chat,
      chatStream,
      messages: store.load(sessionId)
    } satisfies AgentLoop
  })

/** The first expected failure in a cause, if any. */
const failureOf = <E>(cause: Cause.Cause<E>): E | undefined => Option.getOrUndefined(Cause.failureOption(cause))
