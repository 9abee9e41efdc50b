/**
 * What an AgentLoop turn takes and gives: its options, the result of a turn and
 * why it stopped, the events of a streamed turn, and what a turn can fail with.
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Schedule from "effect/Schedule"
import type { Cancellation, ConstraintFailure, InferenceFailure, ToolFailure, ValidationFailure } from "../../domain/Failure.js"
import type * as Message from "../../domain/Message.js"
import type { ToolCallRecord } from "../../domain/System.js"
import type * as PromptProvider from "../../services/PromptProvider.js"
import type * as TokenUsage from "../../domain/TokenUsage.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import type * as Structured from "../Structured.js"

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
  /** The model answered, but the turn's usage passed its token budget: the answer is kept and flagged. */
  | "finish_over_budget"
  /** The model called a client tool: the calls wait in `pendingToolCalls` for the caller's results (`resume`). */
  | "tool_calls"

/** What one turn produced. */
export interface TurnResult {
  readonly content: string
  readonly stopReason: StopReason
  /** Every tool call executed in this turn, in order, with result and duration. */
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  /** Stop reason "tool_calls": the client tools' calls the caller is to run and answer (empty otherwise). */
  readonly pendingToolCalls: ReadonlyArray<Message.ToolCall>
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

/** Which tools the model may call: any offered, none, at least one, or only the one named. */
export type ToolChoice = "auto" | "none" | "required" | { readonly name: string }

export interface Options {
  /**
   * The first message of every session this loop starts. Without it, when a
   * PromptProvider is present, every request of a session that has no system
   * message starts with the provider's system prompt, built afresh each turn (so
   * the session state's current values are in it); it is not stored in the history.
   */
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
  /**
   * Tools the caller runs itself (see agent/ClientTools): offered beside the
   * registered tools (shadowing a registered tool of the same name), never run;
   * a reply calling one ends the turn with stop reason "tool_calls" and the calls
   * in `pendingToolCalls`, answered with `resume`.
   */
  readonly clientTools?: ReadonlyArray<Message.ToolDefinition> | undefined
  /** Default "auto". A name must be a registered or client tool (the loop dies otherwise: a caller's bug). */
  readonly toolChoice?: ToolChoice | undefined
  /** false: only the first tool call of a reply is acted on. Default true. */
  readonly parallelToolCalls?: boolean | undefined
  /** "feedback" (default): a failed tool becomes an error result for the model; "fail": the turn fails. */
  readonly toolErrorMode?: "feedback" | "fail" | undefined
  /** Total tokens a turn may spend before tool rounds stop. */
  readonly turnTokenBudget?: number | undefined
  /** Deadline for a turn; past it the turn fails with CANCELLED_TIMEOUT and history is unchanged. */
  readonly turnTimeout?: Duration.DurationInput | undefined
  /** Called after every tool execution. */
  readonly onToolResult?: ((record: ToolCallRecord) => Effect.Effect<void>) | undefined
  /**
   * What a turn leaves in the history. "full" (default): every message of the turn,
   * tool calls and tool results included. "compact": the user message and the final
   * answer only; tool calls and results are the turn's working memory.
   *
   * Measured over 20 calculator turns on the bundled model (llama.cpp, one
   * sequence): the prompt tokens actually evaluated are about the same (594 full,
   * 570 compact), because the local engine reuses the evaluated prefix and a full
   * history only ever appends; the prompts sent are twice as long with full history
   * (17,796 against 8,838 tokens in all), so the context window fills twice as fast.
   * The default stays "full" (later turns can cite earlier tool results, at no
   * evaluation cost locally); choose "compact" for long sessions, small context
   * windows, or engines without prefix reuse that bill every prompt token.
   */
  readonly history?: "full" | "compact" | undefined
  /**
   * Variables for the PromptProvider's system prompt (when a PromptProvider is
   * present and `systemPrompt` is not given); the session state's string, number
   * and boolean values are variables too, these override them.
   */
  readonly promptVariables?: PromptProvider.Variables | undefined
  /** A GBNF grammar for `chatStructured` (never applied to `chat`: a grammar constrains format, which only extraction needs). */
  readonly grammar?: string | undefined
}

/**
 * Options of one `chatStructured` turn: Structured's (grammar, temperature, repair,
 * strictness, rule check, schedules), and context for the turn instead of asking
 * the ContextProvider.
 */
export interface StructuredTurnOptions<A, EV extends ValidationFailure = never>
  extends Omit<Structured.Options<A, EV>, "schema" | "sessionKey">
{
  readonly context?: ReadonlyArray<Message.Message> | undefined
}

/** What a `chatStructured` turn can fail with: the structured call's failures and the turn's deadline. */
export type StructuredTurnError<EV = never> = InferenceFailure | ConstraintFailure | EV | Cancellation

export interface TurnOptions {
  /** Context messages for this turn, instead of asking the ContextProvider. */
  readonly context?: ReadonlyArray<Message.Message> | undefined
  /**
   * `chat` and `resume`: the turn's events as `chatStream` emits them (text
   * deltas, tool calls, tool results, inferences; not `TurnFinished`, the result
   * is returned), handed over as they happen, the model's replies streamed. The
   * cheap way to watch a turn: no Stream, no mailbox, no fiber forked to run it.
   * Ignored by `chatStream` and `resumeStream`.
   */
  readonly onEvent?: ((event: AgentEvent) => Effect.Effect<void>) | undefined
  /** Extra fields for every inference request of this turn (e.g. schema, grammar). */
  readonly request?:
    | Partial<Pick<InferenceRequest, "schema" | "grammar" | "temperature" | "maxTokens" | "topP" | "seed" | "options">>
    | undefined
}
