/**
 * What a run loop takes and gives: the strategy contract (prepare a request, call
 * the model, parse the reply into an action, decide whether to go on), the
 * loop's configuration, the action and result values, why a run stopped, and the
 * events a run emits.
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type {
  ConfigurationFailure,
  ConstraintFailure,
  InferenceFailure,
  ToolFailure
} from "../../domain/Failure.js"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import type * as Message from "../../domain/Message.js"
import type { ToolCallRecord } from "../../domain/System.js"
import type * as TokenUsage from "../../domain/TokenUsage.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import type { RunMessage, RunToolResult } from "./Message.js"

// ---------------------------------------------------------------------------
// Stop reasons
// ---------------------------------------------------------------------------

/** Why a run ended. */
export type StopReason =
  /** The model gave its final answer. */
  | "finish"
  /** The model was cut off by its token limit before it acted. */
  | "length"
  /** The model still wanted to act when `maxIterations` model calls were spent. */
  | "max_iterations"
  /** A failure ended the run; it is in `LoopResult.error`. */
  | "error"
  /** The abort signal fired: in-flight work was interrupted, pending calls answered "not executed". */
  | "aborted"
  /** The budget was spent while the model still wanted to act. */
  | "budget_exhausted"
  /** A final answer arrived, but usage passed the budget: the output is kept and flagged. */
  | "finish_over_budget"

/** The stop reasons as constants, under the names a reader of the Go original searches for. */
export const StopReasons = {
  Finish: "finish",
  Length: "length",
  MaxIterations: "max_iterations",
  Error: "error",
  Aborted: "aborted",
  BudgetExhausted: "budget_exhausted",
  FinishOverBudget: "finish_over_budget"
} as const satisfies Record<string, StopReason>

/**
 * A loop asked to run again: a RunLoop runs once (the Go original's
 * ErrAgentFinished). `phase` is "running" when its one run is still going and
 * "finished" when it stopped (with `stopReason`). Make a new loop for another
 * run; nothing was sent to the engine.
 */
export class LoopFinished extends Schema.TaggedError<LoopFinished>()("LoopFinished", {
  phase: Schema.Literal("running", "finished"),
  stopReason: Schema.optional(Schema.String),
  message: Schema.String
}) {}

// ---------------------------------------------------------------------------
// Strategy
// ---------------------------------------------------------------------------

/** Whether the model may, must, or must not call tools. */
export type ToolUsePolicy = "auto" | "required" | "none"

/** What the model's reply asks the loop to do next. */
export interface LoopAction<Out> {
  /** Tools to run before the next model call. */
  readonly toolCalls: ReadonlyArray<Message.ToolCall>
  /** The model's reasoning, when the strategy has one (ReAct's `thought`). */
  readonly thought: string
  /** The final answer, when the reply is one. */
  readonly result: Option.Option<Out>
  /** A stop the strategy decides itself (e.g. `length` for a cut-off reply). */
  readonly stopReason?: StopReason | undefined
}

/** Request settings applied to every model call of a run. */
export interface RequestDefaults {
  /** Default 2048. */
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  readonly seed?: number | undefined
  /** Lets engines that keep state (llama.cpp) reuse the evaluated prefix across calls. */
  readonly sessionKey?: string | undefined
  /** Vendor pass-through. */
  readonly options?: Record<string, unknown> | undefined
  /** A JSON schema for every reply (a strategy's own schema wins). */
  readonly schema?: JsonSchema | undefined
  /** A GBNF grammar for every reply (a strategy's own grammar wins). */
  readonly grammar?: string | undefined
}

/** What `prepareRequest` builds a request from. */
export interface PrepareInput {
  /** The transcript as the engine may read it: internal messages already left out. */
  readonly messages: ReadonlyArray<Message.Message>
  /** The tools the run may use (after the whitelist and the tool use policy). */
  readonly tools: ReadonlyArray<Message.ToolDefinition>
  readonly defaults: RequestDefaults
}

/** What a strategy can call the model through: observed, retried, streamed when the run is. */
export interface LoopEnv {
  readonly infer: (request: InferenceRequest) => Effect.Effect<InferenceResult, InferenceFailure>
}

/** What a strategy can fail with while preparing a request or parsing a reply. */
export type StrategyError = ConstraintFailure | ConfigurationFailure

/**
 * How a loop talks to the model. Every method is an Effect, so a strategy can
 * carry state, call services it captured when it was made, or fail with a value.
 */
export interface Strategy<Out> {
  readonly name: string
  readonly toolUsePolicy: ToolUsePolicy
  readonly prepareRequest: (input: PrepareInput) => Effect.Effect<InferenceRequest, StrategyError>
  /** Owns the model call: usually `env.infer(request)`, once. */
  readonly callModel: (env: LoopEnv, request: InferenceRequest) => Effect.Effect<InferenceResult, InferenceFailure>
  readonly parseResponse: (response: InferenceResult) => Effect.Effect<LoopAction<Out>, StrategyError>
  /** Whether the loop goes on after `action` (tools run, then the model is called again). */
  readonly shouldContinue: (action: LoopAction<Out>, iteration: number) => Effect.Effect<boolean>
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/** Limits on what a run may spend; either or both. */
export interface Budget {
  /** Total tokens (prompt + reasoning + output) of the run's model calls. */
  readonly tokens?: number | undefined
  /** Cost as the CostTracker prices it (the tracker's total grows by at most this much). Needs a CostTracker. */
  readonly cost?: number | undefined
}

/** Something that says "stop now": an Effect that completes on abort, or an AbortSignal. */
export type AbortTrigger = Effect.Effect<void> | AbortSignal

export interface LoopConfig<Out, E = never> {
  /** Default `nativeTools`. */
  readonly strategy?: Strategy<Out> | undefined
  /** Model calls per run. Default 20. */
  readonly maxIterations?: number | undefined
  /** Runs before every request, on the whole transcript; what it returns is what the strategy sees. */
  readonly transformContext?: ((messages: ReadonlyArray<RunMessage>) => Effect.Effect<ReadonlyArray<RunMessage>, E>) | undefined
  /** Told every event of the run, in order. */
  readonly onEvent?: ((event: LoopEvent<Out>) => Effect.Effect<void>) | undefined
  readonly request?: RequestDefaults | undefined
  /** Only these tools are offered and may run; absent or empty: all registered tools. */
  readonly allowTools?: ReadonlyArray<string> | undefined
  /** false: the calls of one reply run one at a time, in order. Default true. */
  readonly parallelTools?: boolean | undefined
  /** With parallel tools, at most this many at once. Default 4. */
  readonly maxToolConcurrency?: number | undefined
  /** Overrides every tool's own timeout. */
  readonly toolTimeout?: Duration.DurationInput | undefined
  /** When idempotent tools are retried. Default `RetryPolicy.tool`. */
  readonly toolRetry?: Schedule.Schedule<unknown, ToolFailure> | undefined
  /** When retryable inference failures are retried. Default `RetryPolicy.inference`. */
  readonly inferenceRetry?: Schedule.Schedule<unknown, InferenceFailure> | undefined
  /** "feedback" (default): a failed tool is an error result the model reads; "stop": the run stops with `error`. */
  readonly toolErrorMode?: "feedback" | "stop" | undefined
  readonly budget?: Budget | undefined
  /** Stops the run: stop reason `aborted`. */
  readonly abort?: AbortTrigger | undefined
  /** Wrappers around each model call and each tool call, keyed by their place in the run. */
  readonly steps?: Steps | undefined
}

// ---------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------

/** Where a model call sits in a run: the iteration, and which call of the iteration (0 unless the strategy calls twice). */
export interface ModelStepKey {
  readonly iteration: number
  readonly index: number
}

/** Where a tool call sits in a run: the iteration whose reply asked for it, the call, and its place in the reply. */
export interface ToolStepKey {
  readonly iteration: number
  readonly call: Message.ToolCall
  /** The call's index among the calls of its reply (0 for the first). */
  readonly index: number
}

/** What one tool call came to: its record, the result kept in the transcript, the failure when it failed. */
export interface ToolOutcome {
  readonly record: ToolCallRecord
  readonly result: RunToolResult
  readonly failure: Option.Option<ToolFailure>
}

/**
 * Wrappers around the two things a run does outside itself: call the model and
 * run a tool. Each wrapper gets the step's structural key and the step's effect,
 * and returns what stands for it: the effect itself, observed, or (a durable
 * layer replaying a run) the journaled result without running it again.
 */
export interface Steps {
  /**
   * Rewrites a model call's request before it is made (a durable layer sets a
   * seed derived from the run and the step, so a re-run call samples the same way).
   */
  readonly request?: ((key: ModelStepKey, request: InferenceRequest) => InferenceRequest) | undefined
  readonly model?:
    | ((key: ModelStepKey, call: Effect.Effect<InferenceResult, InferenceFailure>) => Effect.Effect<InferenceResult, InferenceFailure>)
    | undefined
  readonly tool?: ((key: ToolStepKey, call: Effect.Effect<ToolOutcome>) => Effect.Effect<ToolOutcome>) | undefined
}

// ---------------------------------------------------------------------------
// Result and events
// ---------------------------------------------------------------------------

/** The failure that ended a run with stop reason `error`. */
export type LoopFailure = InferenceFailure | ToolFailure | StrategyError

export interface LoopResult<Out> {
  /** The whole transcript: the input, then what the run added (internal messages included). */
  readonly messages: ReadonlyArray<RunMessage>
  /** The final answer, when there is one (kept under `finish_over_budget`). */
  readonly output: Option.Option<Out>
  /** The text of the last model reply. */
  readonly content: string
  readonly stopReason: StopReason
  /** Model calls made. */
  readonly iterations: number
  readonly usage: TokenUsage.TokenUsage
  /** What the CostTracker counted during the run (0 without one). */
  readonly cost: number
  /** Every tool call executed, in order. */
  readonly toolCalls: ReadonlyArray<ToolCallRecord>
  /** Present exactly when `stopReason` is `error`. */
  readonly error: Option.Option<LoopFailure>
}

/** What a run emits, in order; a streamed run ends after `LoopFinished`. */
export type LoopEvent<Out> =
  | { readonly _tag: "IterationStarted"; readonly iteration: number }
  | { readonly _tag: "TextDelta"; readonly text: string; readonly iteration: number }
  | {
      readonly _tag: "ModelResponded"
      readonly result: InferenceResult
      readonly action: Option.Option<LoopAction<Out>>
      readonly iteration: number
    }
  | { readonly _tag: "ToolCallRequested"; readonly call: Message.ToolCall; readonly iteration: number }
  | { readonly _tag: "ToolResultReady"; readonly record: ToolCallRecord; readonly iteration: number }
  | { readonly _tag: "LoopFinished"; readonly result: LoopResult<Out> }
