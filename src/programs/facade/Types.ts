/**
 * What the facade takes and gives: its options, the progress a running chat
 * reports, an Execution (a response with its lifecycle), the Facade itself, and
 * the Outcome a mode produces before it is shaped into a response.
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { ExecutionState } from "../../domain/Lifecycle.js"
import type * as Message from "../../domain/Message.js"
import type { Logprobs } from "../../domain/Sampling.js"
import type * as Plan from "../../domain/Plan.js"
import type { ConfidenceSource, QueryResult, SystemError, SystemRequest, SystemResponse, ToolCallRecord, ValidationResult } from "../../domain/System.js"
import type { OrchestratorResult } from "../../domain/Task.js"
import type * as TokenUsage from "../../domain/TokenUsage.js"
import type { AnalyzerConfig } from "../orchestrator/Analyzer.js"
import type { TaskProcessor } from "../orchestrator/TaskProcessor.js"
import type * as Orchestration from "../Orchestration.js"
import type * as PlanExecutor from "../PlanExecutor.js"

export interface Options {
  /** Used when a chat or structured request brings no system message. */
  readonly defaultSystemPrompt?: string | undefined
  /** Tool rounds per chat turn. Default 20. */
  readonly maxToolIterations?: number | undefined
  /** Tool calls of one round at once. Default 4. */
  readonly toolConcurrency?: number | undefined
  /**
   * Step handlers for mode plan. Default: the built-in handlers whose services
   * are present (infer always; tool, retrieve, rerank and validate when the
   * ToolRegistry, Retriever, Reranker and Validator are provided).
   */
  readonly planHandlers?: ReadonlyArray<PlanExecutor.StepHandler> | undefined
  /** Checked before any step runs. Default: permissive. */
  readonly planPolicy?: Plan.PlanPolicy | undefined
  /** Independent plan steps at once. Default 4. */
  readonly planConcurrency?: number | undefined
  /**
   * Which failures re-run a plan step: "validation" (the default: a retryable
   * ConstraintFailure or ValidationFailure, VALIDATE rejecting the output) or
   * "retryable" (any failure marked retryable too: an idempotent tool that failed
   * or timed out, a retryable engine error), on the step's retry Schedule.
   */
  readonly planRetryOn?: PlanExecutor.RetryOn | undefined
  /** How long a cancel that came before its request stays pending. Default 5 seconds. */
  readonly pendingCancelWindow?: Duration.DurationInput | undefined
  /**
   * The processors of mode task, by name. Default: `infer` (the engine answers
   * the task's description, its dependencies' outputs given as context).
   */
  readonly taskProcessors?: Readonly<Record<string, TaskProcessor<never>>> | undefined
  /**
   * The analyzer of mode task (instruction, format instructions, considerations);
   * the request's hints still set its maxTokens and temperature. Default the
   * orchestrator's.
   */
  readonly taskAnalyzer?: AnalyzerConfig | undefined
  /**
   * Mode query. With `definition` (the query definition the Runs layer in context
   * registered), a query is a durable run of it; without, it runs in memory for its
   * request only (no human responders). `orchestration` is used to check queries
   * and to run the in-memory ones; `~aliases` also come from the ResponderRegistry.
   */
  readonly queries?: QueryOptions | undefined
}

/** How mode query runs. */
export interface QueryOptions {
  readonly definition?: Orchestration.QueryDefinition | undefined
  readonly orchestration?: Orchestration.Options | undefined
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
  readonly onProgress?: ((progress: Progress) => Effect.Effect<void>) | undefined
  /**
   * Mode query on durable runs: answer as soon as the run is started, with its id
   * (status running), instead of waiting for its answer. A query with a human
   * responder always answers so: its answer may take days.
   */
  readonly detach?: boolean | undefined
  /** Who asks (a principal's name): recorded as the owner of a durable run the request starts. */
  readonly owner?: string | undefined
}

export interface Facade {
  /** Runs a request to its response. Never fails: errors are in `response.error`. */
  readonly run: (request: SystemRequest, options?: RunOptions) => Effect.Effect<SystemResponse>
  /** Decodes an untrusted envelope (JSON), then runs it; a bad envelope is CONFIG_INVALID_REQUEST. */
  readonly runUnknown: (input: unknown, options?: RunOptions) => Effect.Effect<SystemResponse>
  /**
   * The INIT checks alone, running nothing: decodes an untrusted envelope and
   * checks it as `runUnknown` would. The error it would answer with at INIT, or
   * undefined when the request would start (for adapters that start a request
   * elsewhere, as a durable run, and must refuse a bad one first).
   */
  readonly check: (input: unknown) => Effect.Effect<SystemError | undefined>
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

/** What a mode produced, before it is shaped into a response. */
export interface Outcome {
  readonly content: string
  readonly structuredOutput?: unknown
  readonly candidates?: ReadonlyArray<string> | undefined
  readonly toolCallsMade?: ReadonlyArray<ToolCallRecord> | undefined
  readonly confidence?: number | undefined
  readonly confidenceSource?: ConfidenceSource | undefined
  readonly validationResult?: ValidationResult | undefined
  readonly usage: TokenUsage.TokenUsage
  readonly stopReason?: string | undefined
  /** Mode chat, stopReason "tool_calls": the calls of the caller's own tools, for it to run. */
  readonly pendingToolCalls?: ReadonlyArray<Message.ToolCall> | undefined
  readonly orchestration?: OrchestratorResult | undefined
  readonly query?: QueryResult | undefined
  /** The answer's token log-probabilities (chat mode, when the hints ask for them). */
  readonly logprobs?: Logprobs | undefined
}
