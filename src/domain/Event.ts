/**
 * Layer 0: observability events.
 *
 * Every event carries the correlation context of the request that caused it
 * (request_id always; session_id in chat; step_name in plans; tool_call_id for
 * tools), so that the full timeline of a request can be rebuilt from the log, and
 * the span it happened in: span_id and parent_span_id, so the timeline hangs on
 * the trace's tree (an inference's two events share its `chat {model}` span; a
 * lifecycle transition has the span of the state it enters, under the request's).
 * The shapes are pagantic's event schemas (one per thing that happened).
 */
import * as Schema from "effect/Schema"
import { LifecycleState } from "./Lifecycle.js"
import { CorrelationContext } from "./System.js"

const base = {
  /** Epoch milliseconds, read from the Clock. */
  timestamp: Schema.Number,
  layer: Schema.String,
  correlation: CorrelationContext
}

export class InferenceStart extends Schema.TaggedClass<InferenceStart>()("InferenceStart", {
  ...base,
  inferenceId: Schema.String,
  messageCount: Schema.NonNegativeInt,
  toolDefsCount: Schema.NonNegativeInt,
  schemaPresent: Schema.Boolean,
  grammarPresent: Schema.Boolean,
  temperature: Schema.optional(Schema.Number)
}) {}

export const FinishReasonLiteral = Schema.Literal("stop", "tool_calls", "length", "error", "aborted")

export class InferenceEnd extends Schema.TaggedClass<InferenceEnd>()("InferenceEnd", {
  ...base,
  inferenceId: Schema.String,
  durationMs: Schema.NonNegative,
  tokensIn: Schema.NonNegativeInt,
  tokensOut: Schema.NonNegativeInt,
  finishReason: FinishReasonLiteral,
  toolCallCount: Schema.NonNegativeInt,
  errorCode: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String)
}) {}

export class ToolStart extends Schema.TaggedClass<ToolStart>()("ToolStart", {
  ...base,
  toolName: Schema.String,
  toolCallId: Schema.String,
  /** The inference whose reply asked for this call. */
  inferenceId: Schema.optional(Schema.String),
  argsHash: Schema.String,
  attempt: Schema.NonNegativeInt
}) {}

export class ToolEnd extends Schema.TaggedClass<ToolEnd>()("ToolEnd", {
  ...base,
  toolName: Schema.String,
  toolCallId: Schema.String,
  durationMs: Schema.NonNegative,
  success: Schema.Boolean,
  errorCode: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String)
}) {}

export class ContextRetrieved extends Schema.TaggedClass<ContextRetrieved>()("ContextRetrieved", {
  ...base,
  durationMs: Schema.NonNegative,
  messageCount: Schema.NonNegativeInt,
  error: Schema.optional(Schema.String)
}) {}

export class LifecycleTransition extends Schema.TaggedClass<LifecycleTransition>()("LifecycleTransition", {
  ...base,
  fromState: LifecycleState,
  toState: LifecycleState,
  attempt: Schema.NonNegativeInt,
  reason: Schema.String
}) {}

/** A free-form event for custom layers and steps. */
export class Custom extends Schema.TaggedClass<Custom>()("Custom", {
  ...base,
  action: Schema.String,
  durationMs: Schema.optional(Schema.NonNegative),
  data: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  error: Schema.optional(Schema.String)
}) {}

export const Event = Schema.Union(
  InferenceStart,
  InferenceEnd,
  ToolStart,
  ToolEnd,
  ContextRetrieved,
  LifecycleTransition,
  Custom
)
export type Event = typeof Event.Type
