/**
 * SpecializedLoop: single-shot structured extraction.
 *
 * Stateless: every call starts from a clean slate (system prompt, context, the
 * prompt: the PromptProvider's system prompt when the call has none and one is
 * present, the context where its policy places it) and nothing it says is stored anywhere, not even in a ConversationStore
 * that the application provides for its chats. Context is retrieved once, from the
 * original prompt, when a ContextProvider is present; a failing provider degrades
 * to no context and is recorded. When a ToolRegistry with tools is present the call
 * has two phases: a tool phase through a fresh AgentLoop (the model gathers what it
 * needs), then "Produce your structured output now." answered by ChatStructured
 * with the whole tool transcript in view. Without tools it is ChatStructured alone.
 *
 * Lifecycle: it reports PREPARE -> EXECUTE, EXECUTE -> VALIDATE and the VALIDATE ->
 * EXECUTE retries (on a Schedule, see Structured) through the request's tracker;
 * terminal states belong to the facade. It can fail with InferenceFailure,
 * ConstraintFailure, ValidationFailure (from the caller's rule check) and
 * Cancellation (the `timeout`).
 *
 * `callStream` is the same call as a Stream of its progress: each tool result of
 * the tool phase, the end of that phase, each rejected reply (and whether it is
 * re-prompted), then `Finished` with the result; a failed call fails the stream.
 */
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { Cancellation, ConstraintFailure, InferenceFailure, ValidationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import type { ToolCallRecord } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Constraint } from "../services/Constraint.js"
import { ContextProvider } from "../services/ContextProvider.js"
import type { Engine } from "../services/Engine.js"
import * as ConversationStore from "../services/ConversationStore.js"
import { ToolRegistry } from "../services/ToolRegistry.js"
import * as AgentLoop from "./AgentLoop.js"
import * as Lifecycle from "./Lifecycle.js"
import * as Deadline from "./internal/Deadline.js"
import * as EphemeralContext from "./internal/EphemeralContext.js"
import * as EventStream from "./internal/EventStream.js"
import * as Prompt from "./internal/Prompt.js"
import * as Structured from "./Structured.js"
import * as Local from "../services/internal/Local.js"
import * as Observed from "./internal/Observed.js"

/** The second-phase instruction after the tool phase (a PromptProvider's `structuredPhase` template replaces it). */
export const structuredPhasePrompt = "Produce your structured output now."

export interface Options<A, EV extends ValidationFailure = never> extends Structured.Options<A, EV> {
  /** The first message of the (fresh) conversation. */
  readonly systemPrompt?: string | undefined
  /** Only these tools are offered in the tool phase; absent or empty: every registered tool. */
  readonly allowTools?: ReadonlyArray<string> | undefined
  /** Set false to skip the tool phase even when tools are registered. Default true. */
  readonly useTools?: boolean | undefined
  /** Rounds of tool execution in the tool phase. Default 20. */
  readonly maxToolIterations?: number | undefined
  /** Deadline for the whole call; past it the call fails with CANCELLED_TIMEOUT. */
  readonly timeout?: Duration.DurationInput | undefined
}

/** A structured answer, with what the tool phase did. */
export interface Result<A> extends Structured.Result<A> {
  /** Tool calls of the tool phase, in order (empty without tools). */
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  /** Why the tool phase stopped, when there was one. */
  readonly toolPhase?: AgentLoop.StopReason | undefined
}

/** What a SpecializedLoop call can fail with, the caller's rule failures included. */
export type SpecializedLoopError<EV = never> = InferenceFailure | ConstraintFailure | EV | Cancellation

/** The progress of a streamed call; the stream ends after `Finished`. */
export type Progress<A, EV = never> =
  | { readonly _tag: "ToolResultReady"; readonly record: ToolCallRecord }
  | {
    readonly _tag: "ToolPhaseFinished"
    readonly stopReason: AgentLoop.StopReason
    readonly toolCalls: ReadonlyArray<ToolCallRecord>
  }
  | { readonly _tag: "ReplyRejected"; readonly rejection: Structured.Rejection<EV> }
  | { readonly _tag: "Finished"; readonly result: Result<A> }

export interface SpecializedLoop<A, EV = never> {
  readonly call: (prompt: string) => Effect.Effect<Result<A>, SpecializedLoopError<EV>>
  readonly callStream: (prompt: string) => Stream.Stream<Progress<A, EV>, SpecializedLoopError<EV>>
}

type Emit<A, EV> = (progress: Progress<A, EV>) => Effect.Effect<void>

// ---------------------------------------------------------------------------
// Preparation (shared with RedundantLoop)
// ---------------------------------------------------------------------------

/** Context for `prompt` from the ContextProvider, if any; a failure degrades to none and is recorded. */
export const retrieveContext = (prompt: string): Effect.Effect<ReadonlyArray<Message.Message>> =>
  Effect.flatMap(Effect.serviceOption(ContextProvider), (provider) => EphemeralContext.retrieve(provider, prompt))

/**
 * The messages of a fresh single-shot call: the system prompt (the PromptProvider's
 * when none is given and one is present), the prompt, and the context placed by
 * the provider's policy (default: just before the prompt).
 */
export const prepare = (
  prompt: string,
  systemPrompt?: string | undefined
): Effect.Effect<ReadonlyArray<Message.Message>> =>
  Effect.gen(function* () {
    const context = yield* retrieveContext(prompt)
    const prompts = yield* Prompt.provider
    const system = systemPrompt === undefined ? yield* Prompt.defaultSystem(prompts, {}) : [Message.system(systemPrompt)]
    return Prompt.place(prompts, [...system, Message.user(prompt)], context)
  })

/** Bounds a call by a deadline: past it, CANCELLED_TIMEOUT. */
export const withTimeout =
  (timeout: Duration.DurationInput | undefined, what: string) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | Cancellation, R> =>
    Deadline.bound(timeout, (duration) => `${what} exceeded its timeout of ${duration}`)(effect)

// ---------------------------------------------------------------------------
// The loop
// ---------------------------------------------------------------------------

/** One structured call. Requires Engine and Constraint; uses ToolRegistry and ContextProvider when present. */
export const call: <A, EV extends ValidationFailure = never>(
  prompt: string,
  options: Options<A, EV>
) => Effect.Effect<Result<A>, SpecializedLoopError<EV>, Engine | Constraint> = Observed.fn("SpecializedLoop.call")(
  function* <A, EV extends ValidationFailure = never>(prompt: string, options: Options<A, EV>) {
    return yield* callWith(prompt, options, () => Effect.void)
  }
)

/** The call as a stream of its progress: tool results, the tool phase's end, rejected replies, then `Finished`. */
export const callStream = <A, EV extends ValidationFailure = never>(
  prompt: string,
  options: Options<A, EV>
): Stream.Stream<Progress<A, EV>, SpecializedLoopError<EV>, Engine | Constraint> =>
  EventStream.fromEmitting(
    (emit) => callWith(prompt, options, emit).pipe(Observed.span("SpecializedLoop.callStream")),
    (result): Progress<A, EV> => ({ _tag: "Finished", result })
  )

const callWith = <A, EV extends ValidationFailure = never>(
  prompt: string,
  given: Options<A, EV>,
  emit: Emit<A, EV>
): Effect.Effect<Result<A>, SpecializedLoopError<EV>, Engine | Constraint> =>
  Effect.gen(function* () {
    const options: Options<A, EV> = {
      ...given,
      onRejected: (rejection) =>
        Effect.zipRight(emit({ _tag: "ReplyRejected", rejection }), given.onRejected?.(rejection) ?? Effect.void)
    }
    const registry = yield* Effect.serviceOption(ToolRegistry)
    const hasTools =
      options.useTools !== false && Option.isSome(registry) && registry.value.definitions(options.allowTools).length > 0

    const body = Effect.gen(function* () {
      if (!hasTools) {
        const messages = yield* prepare(prompt, options.systemPrompt)
        yield* Lifecycle.transition("PREPARE", "EXECUTE", 1, "structured phase")
        const structured = yield* Structured.run(messages, options)
        const result: Result<A> = { ...structured, toolCalls: [] }
        return result
      }

      const context = yield* retrieveContext(prompt)
      yield* Lifecycle.transition("PREPARE", "EXECUTE", 1, "tool phase")
      const agent = yield* AgentLoop.make({
        sessionId: "specialized",
        systemPrompt: options.systemPrompt,
        allowTools: options.allowTools,
        maxToolIterations: options.maxToolIterations,
        maxTokens: options.maxTokens,
        inferenceRetry: options.inferenceRetry,
        onToolResult: (record) => emit({ _tag: "ToolResultReady", record })
      }).pipe(// a store that lives for one call, so a tool phase never touches the application's
        Effect.provideServiceEffect(ConversationStore.ConversationStore, ConversationStore.makeInMemory()))
      const toolPhase = yield* agent.chat(prompt, { context }).pipe(
        // Tool errors are fed back to the model ("feedback" mode): a ToolFailure cannot escape.
        Effect.catchTag("ToolFailure", (f) => Effect.die(f))
      )
      yield* emit({ _tag: "ToolPhaseFinished", stopReason: toolPhase.stopReason, toolCalls: toolPhase.toolCalls })
      const history = yield* agent.messages
      // the context where the tool phase had it: placed around the prompt
      const firstUser = history.findIndex(Message.isUser)
      const messages = [
        ...Prompt.place(yield* Prompt.provider, history.slice(0, firstUser + 1), context),
        ...history.slice(firstUser + 1),
        Message.user(yield* Prompt.template(Prompt.templates.structuredPhase, {}, structuredPhasePrompt))
      ]
      const structured = yield* Structured.run(messages, options)
      const result: Result<A> = {
        ...structured,
        usage: TokenUsage.combine(toolPhase.usage, structured.usage),
        toolCalls: toolPhase.toolCalls,
        toolPhase: toolPhase.stopReason
      }
      return result
    })
    return yield* withTimeout(options.timeout, "the structured call")(body)
  })

/** A SpecializedLoop with its options and services fixed; each `call` is fresh. */
export const make = <A, EV extends ValidationFailure = never>(
  options: Options<A, EV>
): Effect.Effect<SpecializedLoop<A, EV>, never, Engine | Constraint> =>
  Effect.map(Effect.context<Engine | Constraint>(), (context: Context.Context<Engine | Constraint>) => ({
    call: (prompt: string) => Local.provide(call(prompt, options), context),
    callStream: (prompt: string) => Stream.provideContext(callStream(prompt, options), context)
  }))
