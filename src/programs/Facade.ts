/**
 * The facade: the one way into the system.
 *
 * Adapters (CLI, HTTP) decode their input into a SystemRequest and call `run`;
 * the facade walks the request through the lifecycle (INIT -> [PLAN] -> PREPARE ->
 * EXECUTE -> [VALIDATE] -> COMPLETE, or ERROR / CANCELLED from anywhere), routes
 * it by mode to a loop, and always answers with a SystemResponse: a failure of the
 * taxonomy becomes its SystemError, a defect is labelled ORCHESTRATION_DEFECT, a
 * timeout ends in CANCELLED_TIMEOUT and a caller's `cancel` in CANCELLED_SIGNAL,
 * each with whatever partial output exists. Every event of the request carries its
 * request id (and session id in chat), and every move of the lifecycle is an event.
 *
 * Services are captured when the facade is made: Engine (absent: every request
 * answers CONFIG_NO_ENGINE), Constraint (required), and when present ToolRegistry,
 * ContextProvider, ConversationStore, Planner, EventLog, Metrics, IdGenerator.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Tracer from "effect/Tracer"
import type { Failure } from "../domain/Failure.js"
import * as Gbnf from "../domain/Gbnf.js"
import * as Issues from "../domain/Issues.js"
import * as Text from "../domain/Text.js"
import { Cancellation, ConfigurationFailure, OrchestrationFailure, ToolFailure } from "../domain/Failure.js"
import type { ExecutionState } from "../domain/Lifecycle.js"
import * as Message from "../domain/Message.js"
import type * as Plan from "../domain/Plan.js"
import type { ConfidenceSource, ToolCallRecord, ValidationResult } from "../domain/System.js"
import {
  OutputContract,
  SystemError,
  SystemRequest,
  SystemResponse,
  ToolCallRecord as ToolCallRecordClass,
  toSystemError
} from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Constraint } from "../services/Constraint.js"
import { Retriever } from "../services/Context.js"
import { Engine, InferenceResult } from "../services/Engine.js"
import { IdGenerator } from "../services/IdGenerator.js"
import type { ConversationStoreService } from "../services/Memory.js"
import { ConversationStore, makeInMemoryConversationStore } from "../services/Memory.js"
import { withCorrelation, withMetrics } from "../services/Observe.js"
import { Planner } from "../services/Planner.js"
import { Reranker } from "../services/Reranker.js"
import { restrict, ToolRegistry } from "../services/ToolRegistry.js"
import { Validator } from "../services/Validator.js"
import * as AgentLoop from "./AgentLoop.js"
import * as Spans from "./internal/Spans.js"
import * as Lifecycle from "./Lifecycle.js"
import * as PlanExecutor from "./PlanExecutor.js"
import * as RedundantLoop from "./RedundantLoop.js"
import * as SpecializedLoop from "./SpecializedLoop.js"
import * as Voting from "./Voting.js"

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

export interface Options {
  /** Used when a chat or structured request brings no system message. */
  readonly defaultSystemPrompt?: string
  /** Tool rounds per chat turn. Default 20. */
  readonly maxToolIterations?: number
  /** Tool calls of one round at once. Default 4. */
  readonly toolConcurrency?: number
  /**
   * Step handlers for mode plan. Default: the built-in handlers whose services
   * are present (infer always; tool, retrieve, rerank and validate when the
   * ToolRegistry, Retriever, Reranker and Validator are provided).
   */
  readonly planHandlers?: ReadonlyArray<PlanExecutor.StepHandler>
  /** Checked before any step runs. Default: permissive. */
  readonly planPolicy?: Plan.PlanPolicy
  /** Independent plan steps at once. Default 4. */
  readonly planConcurrency?: number
  /** How long a cancel that came before its request stays pending. Default 5 seconds. */
  readonly pendingCancelWindow?: Duration.DurationInput
}

const defaultPendingCancelWindow: Duration.DurationInput = "5 seconds"
/** At most this many pending cancels and finished ids are remembered (oldest dropped first). */
const maxRemembered = 1024

/** What a request produced, before it is shaped into a response. */
interface Outcome {
  readonly content: string
  readonly structuredOutput?: unknown
  readonly candidates?: ReadonlyArray<string>
  readonly toolCallsMade?: ReadonlyArray<ToolCallRecord>
  readonly confidence?: number
  readonly confidenceSource?: ConfidenceSource
  readonly validationResult?: ValidationResult
  readonly usage: TokenUsage.TokenUsage
  readonly stopReason?: string
}

/** A response with the final ExecutionState and the moves that led to it. */
export interface Execution {
  readonly response: SystemResponse
  readonly state: ExecutionState
  readonly transitions: ReadonlyArray<{ readonly from: string; readonly to: string }>
}

/** What a running chat request reports as it goes (for streaming adapters). */
export type Progress =
  | { readonly _tag: "TextDelta"; readonly text: string }
  | { readonly _tag: "ToolCallRequested"; readonly call: Message.ToolCall }
  | { readonly _tag: "ToolResultReady"; readonly record: ToolCallRecord }

export interface RunOptions {
  /** Called with text deltas, tool calls and tool results while a chat request runs. */
  readonly onProgress?: (progress: Progress) => Effect.Effect<void>
}

export interface Facade {
  /** Runs a request to its response. Never fails: errors are in `response.error`. */
  readonly run: (request: SystemRequest, options?: RunOptions) => Effect.Effect<SystemResponse>
  /** Decodes an untrusted envelope (JSON), then runs it; a bad envelope is CONFIG_INVALID_REQUEST. */
  readonly runUnknown: (input: unknown, options?: RunOptions) => Effect.Effect<SystemResponse>
  /** `run`, also returning the ExecutionState and the lifecycle moves. */
  readonly execute: (request: SystemRequest, options?: RunOptions) => Effect.Effect<Execution>
  /**
   * Cancels a running request; it answers CANCELLED_SIGNAL. False when no such
   * request runs. A cancel that comes before its request starts (a client that hangs
   * up at once) is kept for `pendingCancelWindow` and applied when a request with
   * that id starts, so it too ends in CANCELLED; a cancel for a request that already
   * finished is dropped.
   */
  readonly cancel: (requestId: string) => Effect.Effect<boolean>
}

/** The facade as a service, for adapters. */
export class PaganticSystem extends Context.Tag("pagantic/System")<PaganticSystem, Facade>() {}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const invalid = (message: string, details: Record<string, unknown> = {}) =>
  new ConfigurationFailure({ code: "CONFIG_INVALID_REQUEST", retryable: false, message, details })

const describeDefect = (defect: unknown): string =>
  defect instanceof Error ? `${defect.name}: ${defect.message}` : typeof defect === "string" ? defect : String(defect)

/**
 * A tool message must answer a call an earlier assistant message made (engines
 * refuse a history where it does not); a message saying which one does not.
 */
const unansweredToolMessage = (messages: ReadonlyArray<Message.Message>): string | undefined => {
  const calls = new Set<string>()
  for (const [i, m] of messages.entries()) {
    if (Message.isAssistant(m)) for (const call of m.toolCalls) calls.add(call.id)
    else if (Message.isTool(m) && !calls.has(m.toolCallId)) {
      return `messages.${i}: the tool message answers call "${Text.excerpt(m.toolCallId)}", which no earlier assistant message made`
    }
  }
  return undefined
}

const lastUser = (messages: ReadonlyArray<Message.Message>) => {
  const last = messages.at(-1)
  return last !== undefined && Message.isUser(last) ? Option.some(last) : Option.none()
}

/**
 * One session of `store` seen through a staging copy: reads and writes of that
 * session stay in the copy (seeded with `seed` when given) until `commit` writes
 * it to the store; other sessions pass through.
 */
const stagedSession = (
  store: ConversationStoreService,
  sessionId: string,
  seed: ReadonlyArray<Message.Message> | undefined
) => {
  let copy: ReadonlyArray<Message.Message> | undefined = seed
  const staged: ConversationStoreService = {
    load: (id) => (id === sessionId && copy !== undefined ? Effect.sync(() => copy!.slice()) : store.load(id)),
    save: (id, messages) => (id === sessionId ? Effect.sync(() => void (copy = messages.slice())) : store.save(id, messages)),
    append: (id, messages) =>
      id === sessionId
        ? Effect.flatMap(staged.load(id), (base) => staged.save(id, [...base, ...messages]))
        : store.append(id, messages),
    clear: (id) => (id === sessionId ? Effect.sync(() => void (copy = [])) : store.clear(id)),
    sessions: store.sessions
  }
  return {
    store: staged,
    commit: Effect.suspend(() => (copy === undefined ? Effect.void : store.save(sessionId, copy)))
  }
}

// ---------------------------------------------------------------------------
// The facade
// ---------------------------------------------------------------------------

export const make = (options: Options = {}): Effect.Effect<Facade, never, Constraint> =>
  Effect.gen(function* () {
    // the span the facade is made in (if any) is not the parent of its requests' spans
    const context = Context.omit(Tracer.ParentSpan)(yield* Effect.context<Constraint>()) as Context.Context<Constraint>
    const engine = yield* Effect.serviceOption(Engine)
    const ids = yield* Effect.serviceOption(IdGenerator)
    const nextId = (prefix: string) =>
      Option.isSome(ids) ? ids.value.next(prefix) : Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`)
    // Chat sessions continue by session id: in the ConversationStore when one is
    // provided, else in a store private to this facade.
    const sharedStore = yield* Effect.serviceOption(ConversationStore)
    const store = Option.isSome(sharedStore) ? sharedStore.value : yield* makeInMemoryConversationStore()
    const loopContext = Context.add(context, ConversationStore, store)
    const planner = yield* Effect.serviceOption(Planner)
    const fileSystem = yield* Effect.serviceOption(FileSystem.FileSystem)
    const registry = yield* Effect.serviceOption(ToolRegistry)
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
    const signals = yield* Ref.make<ReadonlyMap<string, Deferred.Deferred<void>>>(new Map())
    // Cancels that came before their request (id -> expiry, ms) and the ids of recently
    // finished requests (a late cancel for them must not hit a later request reusing the id).
    const pendingCancels = new Map<string, number>()
    const finishedIds = new Set<string>()
    const pendingWindowMs = Duration.toMillis(options.pendingCancelWindow ?? defaultPendingCancelWindow)
    const remember = <K>(set: { readonly size: number; delete: (k: K) => boolean; keys: () => IterableIterator<K> }) => {
      while (set.size > maxRemembered) set.delete(set.keys().next().value!)
    }

    // -- INIT checks ------------------------------------------------------------
    const checkEnvelope = (request: SystemRequest): Effect.Effect<void, ConfigurationFailure | ToolFailure> => {
      if (Option.isNone(engine)) {
        return Effect.fail(
          new ConfigurationFailure({
            code: "CONFIG_NO_ENGINE",
            retryable: false,
            message: "No inference engine is configured: provide an Engine layer (e.g. LlamaEngine.layer)"
          })
        )
      }
      if ((request.mode === "structured" || request.mode === "redundant") && request.output.schema === undefined) {
        return Effect.fail(
          new ConfigurationFailure({
            code: "CONFIG_SCHEMA_REQUIRED",
            retryable: false,
            message: `Mode "${request.mode}" needs output.schema`,
            details: { mode: request.mode }
          })
        )
      }
      if (request.mode !== "plan" && Option.isNone(lastUser(request.messages))) {
        return Effect.fail(invalid(`Mode "${request.mode}" needs messages ending with a user message`))
      }
      // A tool the request names but nobody registered would silently leave the model without it.
      const unknownTools = request.tools.filter((name) => Option.isNone(registry) || !registry.value.has(name))
      if (unknownTools.length > 0) {
        const available = Option.isNone(registry) ? [] : registry.value.definitions().map((d) => d.name)
        const named = unknownTools.slice(0, 8).map((name) => Text.excerpt(name))
        return Effect.fail(
          new ToolFailure({
            code: "TOOL_NOT_FOUND",
            retryable: false,
            tool: named[0]!,
            message: `The request names tools that are not registered: ${named.join(", ")}${
              unknownTools.length > named.length ? ` and ${unknownTools.length - named.length} more` : ""
            } (registered: ${available.length === 0 ? "none" : available.join(", ")})`,
            details: { unknownTools: named, available }
          })
        )
      }
      const unanswered = unansweredToolMessage(request.messages)
      if (unanswered !== undefined) return Effect.fail(invalid(unanswered))
      return Effect.void
    }

    // -- modes ------------------------------------------------------------------
    const systemPromptOf = (request: SystemRequest) =>
      request.messages.find(Message.isSystem)?.content ?? options.defaultSystemPrompt

    const runChat = (
      request: SystemRequest,
      sessionId: string,
      partial: Ref.Ref<string>,
      tracker: Lifecycle.Tracker,
      run: RunOptions
    ) =>
      Effect.gen(function* () {
        const user = Option.getOrThrow(lastUser(request.messages))
        const prior = request.messages.slice(0, -1)
        const existing = yield* store.load(sessionId)
        // The turn writes to a staged copy of its session; the store sees it only when
        // the turn is answered, so a request that fails keeps nothing (a 900 KB history
        // that does not fit the context is not stored).
        const staged = stagedSession(store, sessionId, existing.length === 0 && prior.length > 0 ? prior : undefined)
        const systemPrompt = prior.length === 0 ? options.defaultSystemPrompt : undefined
        const agent = yield* Effect.provideService(AgentLoop.make({
          sessionId,
          ...(systemPrompt === undefined ? {} : { systemPrompt }),
          ...(options.maxToolIterations === undefined ? {} : { maxToolIterations: options.maxToolIterations }),
          ...(options.toolConcurrency === undefined ? {} : { toolConcurrency: options.toolConcurrency }),
          ...(request.hints.maxTokens === undefined ? {} : { maxTokens: request.hints.maxTokens }),
          ...(request.hints.temperature === undefined ? {} : { temperature: request.hints.temperature }),
          ...(request.hints.topP === undefined ? {} : { topP: request.hints.topP }),
          ...(request.tools.length === 0 ? {} : { allowTools: request.tools })
        }), ConversationStore, staged.store)
        yield* tracker.transition("EXECUTE", "chat turn")
        const finished = yield* Ref.make<Option.Option<AgentLoop.TurnResult>>(Option.none())
        yield* Stream.runForEach(
          agent.chatStream(user.content, request.hints.options === undefined ? {} : { request: { options: request.hints.options } }),
          (event) => {
            const report = run.onProgress ?? (() => Effect.void)
            switch (event._tag) {
              case "TextDelta":
                return Effect.zipRight(Ref.update(partial, (p) => p + event.text), report({ _tag: "TextDelta", text: event.text }))
              case "ToolCallRequested":
                return report({ _tag: "ToolCallRequested", call: event.call })
              case "ToolResultReady":
                return report({ _tag: "ToolResultReady", record: event.record })
              case "InferenceFinished":
                // a new inference starts from scratch: partial output is the latest reply
                return event.result.toolCalls.length > 0 ? Ref.set(partial, "") : Effect.void
              case "TurnFinished":
                return Ref.set(finished, Option.some(event.result))
              default:
                return Effect.void
            }
          }
        )
        const turn = Option.getOrThrow(yield* Ref.get(finished))
        yield* staged.commit
        return {
          content: turn.content,
          toolCallsMade: turn.toolCalls,
          usage: turn.usage,
          stopReason: turn.stopReason
        } satisfies Outcome
      })

    const runStructured = (request: SystemRequest, tracker: Lifecycle.Tracker) =>
      Effect.gen(function* () {
        const user = Option.getOrThrow(lastUser(request.messages))
        const systemPrompt = systemPromptOf(request)
        yield* tracker.transition("EXECUTE", "structured call")
        const result = yield* SpecializedLoop.call(user.content, {
          schema: request.output.schema!,
          repairAllowed: request.output.repairAllowed,
          ...(request.output.grammar === undefined ? {} : { grammar: request.output.grammar }),
          ...(systemPrompt === undefined ? {} : { systemPrompt }),
          ...(request.hints.maxTokens === undefined ? {} : { maxTokens: request.hints.maxTokens }),
          ...(request.hints.temperature === undefined ? {} : { temperature: request.hints.temperature }),
          ...(request.hints.topP === undefined ? {} : { topP: request.hints.topP }),
          // A tool phase only when the request names its tools: an empty list means none here,
          // so a plain extraction is never preceded by a tool round the caller did not ask for.
          ...(request.tools.length === 0 ? { useTools: false } : { allowTools: request.tools }),
          ...(options.maxToolIterations === undefined ? {} : { maxToolIterations: options.maxToolIterations })
        })
        yield* tracker.transition("VALIDATE", "output validated against the schema")
        return {
          content: result.raw,
          structuredOutput: result.value,
          toolCallsMade: result.toolCalls,
          validationResult: result.validation,
          usage: result.usage,
          stopReason: "finish"
        } satisfies Outcome
      })

    const runRedundant = (request: SystemRequest, tracker: Lifecycle.Tracker) =>
      Effect.gen(function* () {
        const user = Option.getOrThrow(lastUser(request.messages))
        const systemPrompt = systemPromptOf(request)
        const redundancy = request.redundancy
        yield* tracker.transition("EXECUTE", "redundant replicas")
        const result = yield* RedundantLoop.run(user.content, {
          schema: request.output.schema!,
          repairAllowed: request.output.repairAllowed,
          voting: redundancy?.voting === "unanimity" ? Voting.UnanimityVoting : Voting.MajorityVoting,
          ...(redundancy?.n === undefined ? {} : { n: redundancy.n }),
          ...(redundancy?.quorum === undefined ? {} : { quorum: redundancy.quorum }),
          ...(request.output.grammar === undefined ? {} : { grammar: request.output.grammar }),
          ...(systemPrompt === undefined ? {} : { systemPrompt }),
          ...(request.hints.maxTokens === undefined ? {} : { maxTokens: request.hints.maxTokens }),
          ...(request.hints.temperature === undefined ? {} : { temperature: request.hints.temperature }),
          ...(request.hints.topP === undefined ? {} : { topP: request.hints.topP })
        })
        yield* tracker.transition("VALIDATE", "replicas voted")
        yield* Effect.annotateCurrentSpan({
          "pagantic.vote.confidence": result.confidence,
          "pagantic.vote.winner": result.winner,
          "pagantic.vote.candidates": result.candidates.length,
          "pagantic.vote.replicas": result.replicas.length
        })
        yield* withMetrics((m) =>
          Effect.zipRight(m.increment("votes"), m.increment("vote_candidates", result.candidates.length))
        )
        return {
          content: result.content,
          structuredOutput: result.value,
          candidates: result.candidates,
          confidence: result.confidence,
          confidenceSource: "voting",
          validationResult: result.validation,
          usage: result.usage,
          stopReason: "finish"
        } satisfies Outcome
      })

    const textOf = (output: unknown): string =>
      typeof output === "string"
        ? output
        : output instanceof InferenceResult
          ? output.content
          : typeof output === "object" && output !== null && "content" in output && typeof output.content === "string"
            ? output.content
            : (JSON.stringify(output) ?? "")

    const runPlan = (request: SystemRequest, partial: Ref.Ref<string>, tracker: Lifecycle.Tracker) =>
      Effect.gen(function* () {
        yield* tracker.transition("PLAN", request.plan === undefined ? "planner" : "plan provided")
        const plan =
          request.plan ??
          (Option.isSome(planner)
            ? yield* planner.value.createPlan(request)
            : yield* invalid("Mode plan needs a plan in the request or a Planner service"))
        yield* tracker.transition("PREPARE", `${plan.steps.length} steps`)
        const executor = yield* PlanExecutor.make({
          handlers: planHandlers,
          ...(options.planPolicy === undefined ? {} : { policy: options.planPolicy }),
          ...(options.planConcurrency === undefined ? {} : { concurrency: options.planConcurrency })
        })
        yield* tracker.transition("EXECUTE", "running steps")
        const outcome = yield* executor.execute(plan)
        const steps = PlanExecutor.completedSteps(outcome)
        const outputs = PlanExecutor.encodedOutputs(steps)
        if (outcome._tag === "Failed") {
          yield* Ref.set(partial, JSON.stringify(outputs))
          return yield* outcome.error
        }
        yield* tracker.transition("VALIDATE", "every step completed")
        const toolCallsMade = steps.flatMap((s) => {
          const out = s.output as { id?: unknown; name?: unknown; content?: unknown; arguments?: unknown }
          return s.type === "tool" && typeof out.name === "string"
            ? [
                new ToolCallRecordClass({
                  id: String(out.id ?? s.name),
                  name: out.name,
                  arguments: ((s.input as { arguments?: Record<string, unknown> }).arguments ?? {}),
                  result: String(out.content ?? ""),
                  isError: false,
                  durationMs: s.finishedAt - s.startedAt
                })
              ]
            : []
        })
        return {
          content: textOf(outcome.output),
          structuredOutput: outputs,
          toolCallsMade,
          usage: PlanExecutor.usageOf(steps),
          stopReason: "finish"
        } satisfies Outcome
      })

    /** Reads `output.grammarFile` into `output.grammar` (PREPARE). */
    const resolveGrammar = (request: SystemRequest): Effect.Effect<SystemRequest, ConfigurationFailure> => {
      const file = request.output.grammarFile
      if (file === undefined) return Effect.succeed(request)
      const notFound = (reason: string) =>
        new ConfigurationFailure({
          code: "CONFIG_GRAMMAR_NOT_FOUND",
          retryable: false,
          message: `The grammar file ${file} cannot be read: ${reason}`,
          details: { grammarFile: file }
        })
      if (Option.isNone(fileSystem)) return Effect.fail(notFound("no FileSystem is provided"))
      const fs = fileSystem.value
      // a regular file of bounded size only: /dev/zero or a 64 MiB file is never read whole
      return fs.stat(file).pipe(
        Effect.mapError((e) => notFound(e.message)),
        Effect.filterOrFail(
          (info) => info.type === "File",
          (info) => notFound(`it is not a regular file (${info.type})`)
        ),
        Effect.filterOrFail(
          (info) => Number(info.size) <= Gbnf.defaultLimits.maxBytes,
          (info) => notFound(`it is ${Number(info.size)} bytes, more than the ${Gbnf.defaultLimits.maxBytes} a grammar may have`)
        ),
        Effect.zipRight(Effect.mapError(fs.readFileString(file), (e) => notFound(e.message))),
        Effect.map(
          (grammar) => new SystemRequest({ ...request, output: new OutputContract({ ...request.output, grammar }) })
        )
      )
    }

    const route = (
      request: SystemRequest,
      sessionId: string | undefined,
      partial: Ref.Ref<string>,
      tracker: Lifecycle.Tracker,
      run: RunOptions
    ): Effect.Effect<Outcome, Failure, Engine | Constraint> =>
      Effect.gen(function* () {
        yield* checkEnvelope(request)
        if (request.mode === "plan") return yield* runPlan(request, partial, tracker)
        yield* tracker.transition("PREPARE", `mode ${request.mode}`)
        const prepared = yield* resolveGrammar(request)
        switch (request.mode) {
          case "chat":
            return yield* runChat(prepared, sessionId!, partial, tracker, run)
          case "structured":
            return yield* runStructured(prepared, tracker)
          case "redundant":
            return yield* runRedundant(prepared, tracker)
        }
      })

    // -- run ----------------------------------------------------------------------
    const execute = (request: SystemRequest, run: RunOptions = {}): Effect.Effect<Execution> =>
      Effect.gen(function* () {
        const requestId = request.requestId ?? (yield* nextId("req"))
        const traceId = request.traceId ?? (yield* nextId("trace"))
        const sessionId = request.sessionId ?? (request.mode === "chat" ? yield* nextId("session") : undefined)
        return yield* executeWith(request, requestId, sessionId, run).pipe(
          withCorrelation({ requestId, traceId, ...(sessionId === undefined ? {} : { sessionId }) }),
          Effect.withSpan("Facade.run", {
            attributes: {
              mode: request.mode,
              requestId,
              traceId,
              ...(sessionId === undefined ? {} : { sessionId }),
              [Spans.Pagantic.mode]: request.mode,
              [Spans.Pagantic.requestId]: requestId,
              [Spans.Pagantic.traceId]: traceId,
              ...(sessionId === undefined ? {} : { [Spans.Pagantic.sessionId]: sessionId })
            }
          })
        )
      })

    const executeWith = (
      request: SystemRequest,
      requestId: string,
      sessionId: string | undefined,
      run: RunOptions
    ): Effect.Effect<Execution> =>
      Effect.gen(function* () {
        const startedAt = yield* Clock.currentTimeMillis
        const tracker = yield* Lifecycle.makeTracker
        const partial = yield* Ref.make("")
        const signal = yield* Deferred.make<void>()
        yield* Ref.update(signals, (m) => new Map(m).set(requestId, signal))
        finishedIds.delete(requestId)
        const pendingUntil = pendingCancels.get(requestId)
        pendingCancels.delete(requestId)
        const cancelledEarly = pendingUntil !== undefined && pendingUntil >= startedAt

        const timeout = request.hints.timeout
        const body = route(request, sessionId, partial, tracker, run)
        const timed =
          timeout === undefined || Duration.toMillis(timeout) === 0
            ? body
            : Effect.timeoutFail(body, {
                duration: timeout,
                onTimeout: () =>
                  Cancellation.timeout(`The request exceeded its timeout of ${Duration.format(timeout)}`, { requestId })
              })
        const cancellable = cancelledEarly
          ? Effect.failSync(() => Cancellation.signal("The request was cancelled by its caller before it started", { requestId }))
          : Effect.raceFirst(
            timed,
            Effect.zipRight(
              Deferred.await(signal),
              Effect.failSync(() => Cancellation.signal("The request was cancelled by its caller", { requestId }))
            )
          )

        // the request's whitelist holds in every mode and every step kind
        const requestContext = Option.isSome(registry) && request.tools.length > 0
          ? Context.add(loopContext, ToolRegistry, restrict(registry.value, request.tools))
          : loopContext
        const exit = yield* Effect.exit(
          cancellable.pipe(
            Lifecycle.tracked(tracker),
            Effect.provide(requestContext as Context.Context<Engine | Constraint>),
            Effect.onInterrupt(() => tracker.interrupted)
          )
        )
        yield* Ref.update(signals, (m) => {
          const copy = new Map(m)
          copy.delete(requestId)
          return copy
        })
        yield* Effect.sync(() => {
          finishedIds.delete(requestId)
          finishedIds.add(requestId)
          remember(finishedIds)
        })

        const base = {
          requestId,
          ...(sessionId === undefined ? {} : { sessionId })
        }
        let response: SystemResponse
        if (Exit.isSuccess(exit)) {
          yield* tracker.transition("COMPLETE", "response assembled")
          const o = exit.value
          response = new SystemResponse({
            ...base,
            content: o.content,
            toolCallsMade: o.toolCallsMade ?? [],
            tokenUsage: o.usage,
            ...(o.structuredOutput === undefined ? {} : { structuredOutput: o.structuredOutput }),
            ...(o.candidates === undefined ? {} : { candidates: o.candidates }),
            ...(o.confidence === undefined ? {} : { confidence: o.confidence }),
            ...(o.confidenceSource === undefined ? {} : { confidenceSource: o.confidenceSource }),
            ...(o.validationResult === undefined ? {} : { validationResult: o.validationResult }),
            ...(o.stopReason === undefined ? {} : { stopReason: o.stopReason })
          })
        } else {
          const failure = Cause.failureOption(exit.cause)
          const error: SystemError = Option.isSome(failure)
            ? toSystemError(failure.value)
            : toSystemError(
                new OrchestrationFailure({
                  code: "ORCHESTRATION_DEFECT",
                  retryable: false,
                  message: Cause.isInterruptedOnly(exit.cause)
                    ? "The request was interrupted"
                    : `Internal error: ${describeDefect(Cause.squash(exit.cause))}`,
                  // what went wrong, never where: stack frames stay in the logs, not in responses
                  details: {}
                })
              )
          const cancelled = Option.isSome(failure) && failure.value._tag === "Cancellation"
          yield* tracker.transition(cancelled ? "CANCELLED" : "ERROR", error.message, { error })
          response = new SystemResponse({
            ...base,
            content: yield* Ref.get(partial),
            toolCallsMade: [],
            tokenUsage: TokenUsage.empty,
            error
          })
        }
        yield* Effect.annotateCurrentSpan({
          [Spans.GenAi.usageInputTokens]: response.tokenUsage.promptTokens,
          [Spans.GenAi.usageOutputTokens]: response.tokenUsage.outputTokens,
          "pagantic.tool_calls": response.toolCallsMade.length,
          ...(response.stopReason === undefined ? {} : { "pagantic.stop_reason": response.stopReason }),
          ...(response.error === undefined ? {} : { [Spans.Pagantic.errorCode]: response.error.code })
        })
        const durationMs = (yield* Clock.currentTimeMillis) - startedAt
        yield* withMetrics((m) =>
          Effect.all(
            [
              m.recordLatency("request", durationMs),
              m.increment("requests"),
              response.error === undefined ? Effect.void : m.increment("request_errors")
            ],
            { discard: true }
          )
        )
        return {
          response,
          state: yield* tracker.state,
          transitions: yield* tracker.history
        } satisfies Execution
      })

    const runUnknown = (input: unknown, run: RunOptions = {}): Effect.Effect<SystemResponse> =>
      Effect.flatMap(Effect.either(Schema.decodeUnknown(SystemRequest, { errors: "all" })(input)), (decoded) => {
        if (decoded._tag === "Right") return Effect.map(execute(decoded.right, run), (e) => e.response)
        const raw = typeof input === "object" && input !== null ? (input as Record<string, unknown>) : {}
        return Effect.map(nextId("req"), (generated) => {
          const requestId = typeof raw.requestId === "string" ? raw.requestId : generated
          // the request is over: a cancel that waited for it must not hit a later one reusing the id
          pendingCancels.delete(requestId)
          finishedIds.delete(requestId)
          finishedIds.add(requestId)
          remember(finishedIds)
          const issues = Issues.describe(decoded.left, "a SystemRequest object")
          const error = toSystemError(invalid(`Invalid request: ${issues.join("; ")}`, { issues }))
          return new SystemResponse({ requestId, content: "", toolCallsMade: [], tokenUsage: TokenUsage.empty, error })
        })
      })

    return {
      run: (request, run) => Effect.map(execute(request, run), (e) => e.response),
      runUnknown,
      execute,
      cancel: (requestId) =>
        Effect.flatMap(Ref.get(signals), (m) => {
          const signal = m.get(requestId)
          if (signal !== undefined) return Deferred.succeed(signal, undefined)
          return Effect.map(Clock.currentTimeMillis, (now) => {
            if (!finishedIds.has(requestId)) {
              for (const [id, expiry] of pendingCancels) if (expiry < now) pendingCancels.delete(id)
              pendingCancels.set(requestId, now + pendingWindowMs)
              remember(pendingCancels)
            }
            return false
          })
        })
    } satisfies Facade
  })

/** The facade as a layer. */
export const layer = (options: Options = {}): Layer.Layer<PaganticSystem, never, Constraint> =>
  Layer.effect(PaganticSystem, make(options))

