/**
 * Layer 0: the system boundary.
 *
 * All data entering or leaving pagantic flows through SystemRequest (inbound) and
 * SystemResponse (outbound); a failure leaves as a SystemError. Adapters (CLI, HTTP)
 * decode external input into a SystemRequest and encode the response back: these
 * are Schemas so that both directions are checked.
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import type { Failure } from "./Failure.js"
import * as Gbnf from "./Gbnf.js"
import { categoryOfCode, FailureCategory, FailureCode } from "./Failure.js"
import { JsonSchema } from "./JsonSchema.js"
import * as Text from "./Text.js"
import { ExecutionPlan } from "./Plan.js"
import { Know, KnowOrchestration } from "./Records.js"
import { Logprobs, Penalty, StopTexts, TopLogprobs } from "./Sampling.js"
import { FailurePolicy, OrchestratorResult, Scheduling, TaskList } from "./Task.js"
import { ToolCall, ToolDefinition, WireMessage } from "./Message.js"
import { TokenUsage } from "./TokenUsage.js"

/**
 * Selects the orchestration pattern: chat -> AgentLoop, structured ->
 * SpecializedLoop, plan -> PlanExecutor, redundant -> RedundantLoop, task -> the
 * task Orchestrator, query -> an `infer.query.v1` query run by its pattern.
 */
export const Mode = Schema.Literal("chat", "structured", "plan", "redundant", "task", "query")
export type Mode = typeof Mode.Type

/** Optional tuning knobs, passed through by adapters without interpretation. */
export class ExecutionHints extends Schema.Class<ExecutionHints>("ExecutionHints")({
  /** Token limit per inference call; absent means the engine default. */
  maxTokens: Schema.optional(Schema.NonNegativeInt),
  /** Deadline for the whole request, in milliseconds on the wire. */
  timeout: Schema.optional(Schema.DurationFromMillis),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 2))),
  topP: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  /** 1 to 4 non-empty texts; each inference ends before the first one it produces, which is left out. */
  stop: Schema.optional(StopTexts),
  /** The same request with the same seed samples the same tokens. */
  seed: Schema.optional(Schema.Int),
  /** -2 to 2, llama.cpp's repeat penalties. */
  presencePenalty: Schema.optional(Penalty),
  frequencyPenalty: Schema.optional(Penalty),
  /** Log-probabilities of the answer's tokens (in chat mode, on `SystemResponse.logprobs`). */
  logprobs: Schema.optional(Schema.Boolean),
  /** 0 to 20 alternatives per token, with `logprobs`. */
  topLogprobs: Schema.optional(TopLogprobs),
  /** Vendor-specific options, handed to the engine unchanged. */
  options: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
}) {}

/** The expected shape of the output. */
/**
 * A JSON schema a grammar can be made from: within the size and nesting bounds of
 * `Gbnf.checkSchema`, and without control characters (no answer could satisfy an
 * enum value holding one; llama.cpp refuses it).
 */
const GrammarReadySchema = JsonSchema.pipe(
  Schema.filter((schema) => Either.match(Gbnf.checkSchema(schema), { onLeft: (problem) => problem, onRight: () => undefined }))
)

export class OutputContract extends Schema.Class<OutputContract>("OutputContract")({
  schema: Schema.optional(GrammarReadySchema),
  grammar: Schema.optional(Schema.String),
  /** A GBNF grammar file to read at PREPARE (a server-side setting: HTTP clients cannot set it); missing is CONFIG_GRAMMAR_NOT_FOUND. */
  grammarFile: Schema.optional(Schema.String),
  repairAllowed: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  strictValidation: Schema.optionalWith(Schema.Boolean, { default: () => false })
}) {}

/** Replicas of a redundant request when `redundancy.n` is absent. */
export const defaultReplicas = 3

/**
 * How a redundant request votes (defaults: 3 replicas, a majority
 * quorum, majority voting). A quorum above the replicas could never be met, so it
 * is refused, not clamped.
 */
export class Redundancy extends Schema.Class<Redundancy>("Redundancy")(
  Schema.Struct({
    n: Schema.optional(Schema.Int.pipe(Schema.between(1, 32))),
    quorum: Schema.optional(Schema.Int.pipe(Schema.positive())),
    voting: Schema.optional(Schema.Literal("majority", "unanimity"))
  }).pipe(
    Schema.filter((r) =>
      r.quorum === undefined || r.quorum <= (r.n ?? defaultReplicas)
        ? undefined
        : {
          path: ["quorum"],
          message: `the quorum (${r.quorum}) cannot be more than the replicas (n = ${r.n ?? defaultReplicas})`
        }
    )
  )
) {}

/**
 * Settings for mode task. `parser` is how the analyzer writes its task list
 * (json, the default, or xml); `tasks` is a task list given by the caller, run
 * without analysis. `maxConcurrent` is held to 1..32 here.
 */
export class TaskOptions extends Schema.Class<TaskOptions>("TaskOptions")({
  parser: Schema.optional(Schema.Literal("json", "xml")),
  scheduling: Schema.optional(Scheduling),
  failurePolicy: Schema.optional(FailurePolicy),
  maxConcurrent: Schema.optional(Schema.Int.pipe(Schema.between(1, 32))),
  tasks: Schema.optional(TaskList)
}) {}

/** Input from adapters into the system. */
export class SystemRequest extends Schema.Class<SystemRequest>("SystemRequest")({
  requestId: Schema.optional(Schema.String),
  sessionId: Schema.optional(Schema.String),
  traceId: Schema.optional(Schema.String),
  messages: Schema.Array(WireMessage),
  mode: Mode,
  // defaults of all-optional fields: valid by construction, not validated again on every request
  hints: Schema.optionalWith(ExecutionHints, { default: () => new ExecutionHints({}, true) }),
  output: Schema.optionalWith(OutputContract, { default: () => new OutputContract({}, true) }),
  /** Allowed tool names; empty means every registered tool. */
  tools: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  /**
   * Mode chat: tools the caller runs itself. They are offered to the model beside
   * the registered tools (a registered tool of the same name is not offered: the
   * caller's definition wins) and never run here: a reply that calls one ends the
   * turn with stopReason "tool_calls" and the calls in `pendingToolCalls`. The
   * caller answers them with tool messages at the end of its next request.
   */
  clientTools: Schema.optionalWith(Schema.Array(ToolDefinition), { default: () => [] }),
  /**
   * Mode chat: which tools the model may call. "auto" (default): any offered;
   * "none": none is offered; "required": an answer before any tool call is asked
   * again; `{ name }`: only that tool (registered or the caller's) is offered, and
   * required.
   */
  toolChoice: Schema.optional(
    Schema.Union(Schema.Literal("auto", "none", "required"), Schema.Struct({ name: Schema.String }))
  ),
  /** Mode chat: false acts on the first tool call of a reply only (the others are dropped from it). Default true. */
  parallelToolCalls: Schema.optional(Schema.Boolean),
  /** A manually authored plan (mode plan); when present the Planner is skipped. */
  plan: Schema.optional(ExecutionPlan),
  /** Voting settings for mode redundant. */
  redundancy: Schema.optional(Redundancy),
  /** Settings for mode task. */
  task: Schema.optional(TaskOptions),
  /**
   * Mode query: the `infer.query.v1` query (input, responders, fold, answer shape,
   * orchestration). Checked at INIT: a wrong field is CONFIG_INVALID_REQUEST naming it.
   */
  query: Schema.optional(Schema.Unknown)
}) {}

/**
 * One link of a failure's cause chain: what failed (a failure's tag and code, or
 * an error's name), its message, and what caused it in turn. The chain is data, so
 * it crosses the boundary as JSON and decodes back.
 */
export interface FailureCause {
  readonly name: string
  readonly code?: string | undefined
  readonly message: string
  readonly causedBy?: FailureCause | undefined
}

export const FailureCause: Schema.Schema<FailureCause> = Schema.Struct({
  name: Schema.String,
  code: Schema.optional(Schema.String),
  message: Schema.String,
  causedBy: Schema.optional(Schema.suspend((): Schema.Schema<FailureCause> => FailureCause))
}).annotations({ identifier: "FailureCause" })

/** Links kept of a cause chain; deeper causes are cut (and a cycle ends where it closes). */
export const maxCauseDepth = 8

/** The chain with every name and message cut to `max` characters (for a client to see). */
export const excerptCause = (cause: FailureCause, max: number): FailureCause => ({
  name: Text.excerpt(cause.name, max),
  ...(cause.code === undefined ? {} : { code: cause.code }),
  message: Text.excerpt(cause.message, max),
  ...(cause.causedBy === undefined ? {} : { causedBy: excerptCause(cause.causedBy, max) })
})

/** The canonical error at the boundary: a category, a stable code and retry guidance. */
export class SystemError extends Schema.Class<SystemError>("SystemError")({
  code: FailureCode,
  category: FailureCategory,
  retryable: Schema.Boolean,
  message: Schema.String,
  details: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  /** The wrapped underlying error, and its own cause, as a chain. */
  causedBy: Schema.optional(FailureCause)
}) {}

const describeValue = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/**
 * The cause chain of `cause`: a failure of the taxonomy keeps its tag, code and
 * message, an Error its name and message, and each follows its own `cause`;
 * anything else is one link holding its JSON text.
 */
export const causeChain = (cause: unknown): FailureCause | undefined => {
  const seen = new Set<unknown>()
  const link = (value: unknown, depth: number): FailureCause | undefined => {
    if (value === undefined || value === null || depth >= maxCauseDepth || seen.has(value)) return undefined
    if (typeof value === "object") seen.add(value)
    const record = typeof value === "object" ? (value as Record<string, unknown>) : undefined
    const next = record === undefined ? undefined : link(record.cause, depth + 1)
    const rest = next === undefined ? {} : { causedBy: next }
    if (record !== undefined && typeof record._tag === "string" && typeof record.code === "string" && typeof record.message === "string") {
      return { name: record._tag, code: record.code, message: record.message, ...rest }
    }
    if (value instanceof Error) return { name: value.name, message: value.message, ...rest }
    return { name: typeof value === "string" ? "Error" : typeof value, message: describeValue(value) }
  }
  return link(cause, 0)
}

/** The total mapping from the taxonomy to the boundary error. */
export const toSystemError = (failure: Failure): SystemError => {
  const extra: Record<string, unknown> = {}
  switch (failure._tag) {
    case "ToolFailure":
      extra.tool = failure.tool
      if (failure.toolCallId !== undefined) extra.toolCallId = failure.toolCallId
      break
    case "ConstraintFailure":
      if (failure.raw !== undefined) extra.raw = failure.raw
      if (failure.violations.length > 0) extra.violations = failure.violations
      break
    case "ValidationFailure":
      if (failure.failedRules.length > 0) extra.failedRules = failure.failedRules
      break
    default:
      break
  }
  const causedBy = causeChain(failure.cause)
  return new SystemError({
    code: failure.code,
    category: categoryOfCode[failure.code],
    retryable: failure.retryable,
    message: failure.message,
    details: { ...failure.details, ...extra },
    ...(causedBy === undefined ? {} : { causedBy })
  })
}

/** A record of one tool invocation made while serving a request. */
export class ToolCallRecord extends Schema.Class<ToolCallRecord>("ToolCallRecord")({
  id: Schema.String,
  name: Schema.String,
  arguments: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  result: Schema.String,
  isError: Schema.Boolean,
  durationMs: Schema.NonNegative
}) {}

export const ConfidenceSource = Schema.Literal("voting", "validation", "retrieval", "fold")
export type ConfidenceSource = typeof ConfidenceSource.Type

/** Summary of constraint and rule validation. */
export class ValidationResult extends Schema.Class<ValidationResult>("ValidationResult")({
  passed: Schema.NonNegativeInt,
  failed: Schema.NonNegativeInt,
  repairAttempts: Schema.NonNegativeInt,
  violations: Schema.Array(Schema.String)
}) {}

/**
 * Mode query: where the query stands. `completed` carries the committed answer
 * (the KNOW: its body has the answer's keys, `_confidence`, `_fold` and
 * `_orchestration`); `running` and `suspended` (waiting for a human) name the
 * durable run to follow. `runId` is absent when the query ran in memory for this
 * request only (no durable runs configured).
 */
export class QueryResult extends Schema.Class<QueryResult>("QueryResult")({
  runId: Schema.optional(Schema.String),
  status: Schema.Literal("completed", "running", "suspended"),
  pattern: KnowOrchestration.fields.pattern,
  /** CALLs dispatched (completed queries). */
  calls: Schema.optional(Schema.NonNegativeInt),
  /** Tokens spent by llm responders (completed queries). */
  tokens: Schema.optional(Schema.NonNegative),
  know: Schema.optional(Know)
}) {}

/** Returned by the facade once execution completes or fails. */
export class SystemResponse extends Schema.Class<SystemResponse>("SystemResponse")({
  requestId: Schema.String,
  sessionId: Schema.optional(Schema.String),
  content: Schema.String,
  structuredOutput: Schema.optional(Schema.Unknown),
  /** In redundant mode, every valid replica's output, in replica order. */
  candidates: Schema.optional(Schema.Array(Schema.String)),
  toolCallsMade: Schema.Array(ToolCallRecord),
  confidence: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  confidenceSource: Schema.optional(ConfidenceSource),
  validationResult: Schema.optional(ValidationResult),
  tokenUsage: TokenUsage,
  /** When the hints ask for logprobs (chat mode): the final answer's tokens with their log-probabilities. */
  logprobs: Schema.optional(Logprobs),
  /** Why the loop stopped (finish, length, tool_calls, max_iterations, budget_exhausted, ...). */
  stopReason: Schema.optional(Schema.String),
  /**
   * Mode chat, stopReason "tool_calls": the calls of the caller's own tools
   * (`SystemRequest.clientTools`) the model made, for the caller to run and answer.
   */
  pendingToolCalls: Schema.optional(Schema.Array(ToolCall)),
  /** In task mode: every task's result, failure or reason for being skipped, and the phases. */
  orchestration: Schema.optional(OrchestratorResult),
  /** In query mode: the query's run and its committed answer. */
  query: Schema.optional(QueryResult),
  error: Schema.optional(SystemError)
}) {}

/** Correlation identifiers carried by every observability event. */
export class CorrelationContext extends Schema.Class<CorrelationContext>("CorrelationContext")({
  requestId: Schema.String,
  sessionId: Schema.optional(Schema.String),
  traceId: Schema.optional(Schema.String),
  spanId: Schema.optional(Schema.String),
  parentSpanId: Schema.optional(Schema.String),
  /** Causal link: the tool_call_id that caused a tool event, the step_name of a plan step. */
  causedBy: Schema.optional(Schema.String),
  stepName: Schema.optional(Schema.String),
  toolCallId: Schema.optional(Schema.String)
}) {}
