/**
 * Layer 0: the failure taxonomy.
 *
 * Every failure in pagantic belongs to exactly one of seven categories. A category
 * decides retry eligibility and the recovery path; a stable `code` inside it names
 * the specific failure, and one constructor per code sets its retryability from
 * one table (`retryabilityOfCode`). These are the values the loops fail with; at
 * the system boundary each one maps, totally, to a SystemError.
 */
import * as Schema from "effect/Schema"

const Details = Schema.Record({ key: Schema.String, value: Schema.Unknown })

const common = {
  message: Schema.String,
  retryable: Schema.Boolean,
  details: Schema.optionalWith(Details, { default: () => ({}) }),
  cause: Schema.optional(Schema.Defect)
}

// ---------------------------------------------------------------------------
// Codes
// ---------------------------------------------------------------------------

export const InferenceCode = Schema.Literal(
  "INFERENCE_ENGINE_ERROR",
  "INFERENCE_MODEL_UNAVAILABLE",
  "INFERENCE_CONTEXT_EXCEEDED",
  "INFERENCE_MALFORMED_RESPONSE"
)
export const ToolCode = Schema.Literal("TOOL_NOT_FOUND", "TOOL_EXECUTION_FAILED", "TOOL_TIMEOUT", "TOOL_UNAVAILABLE")
export const ConstraintCode = Schema.Literal(
  "CONSTRAINT_GRAMMAR_REJECTED",
  "CONSTRAINT_SCHEMA_INVALID",
  "CONSTRAINT_JSON_INVALID",
  "CONSTRAINT_ENUM_UNRECOGNIZED"
)
export const ValidationCode = Schema.Literal("VALIDATION_RULE_FAILED", "VALIDATION_SEMANTIC_FAILED")
export const OrchestrationCode = Schema.Literal(
  "ORCHESTRATION_STEP_MISMATCH",
  "ORCHESTRATION_ITERATION_LIMIT",
  "ORCHESTRATION_NO_CONSENSUS",
  /** A defect (a bug) caught at the boundary, labelled instead of escaping. */
  "ORCHESTRATION_DEFECT",
  /** A durable run's recorded history is one the code no longer produces (a record it cannot read or reach). */
  "ORCHESTRATION_REPLAY_DIVERGED",
  /** The durable store cannot be reached (after a bounded retry); nothing recorded is lost. */
  "ORCHESTRATION_STATE_UNAVAILABLE",
  /** An answer came for a human slot that is closed (answered, expired or cancelled) or never opened. */
  "ORCHESTRATION_SLOT_CLOSED",
  /** A query's CEL expression (a threshold, an acceptance, a weight, a fold) failed on the values it was given at run time. */
  "ORCHESTRATION_EXPRESSION_FAILED",
  /** An answer came for a human slot with a secret that does not open it; nothing was recorded. */
  "ORCHESTRATION_SLOT_FORBIDDEN",
  /** A server's places for what it runs at once (durable runs in flight, event listeners) are all taken; nothing was started. */
  "ORCHESTRATION_CAPACITY_EXCEEDED"
)
export const ConfigurationCode = Schema.Literal(
  "CONFIG_NO_ENGINE",
  "CONFIG_SCHEMA_REQUIRED",
  "CONFIG_GRAMMAR_NOT_FOUND",
  /** The request does not decode or cannot be served as sent (missing fields, wrong types, unknown mode). */
  "CONFIG_INVALID_REQUEST"
)
export const CancellationCode = Schema.Literal("CANCELLED_TIMEOUT", "CANCELLED_SIGNAL")

/** Every code of the taxonomy. */
export const FailureCode = Schema.Union(
  InferenceCode,
  ToolCode,
  ConstraintCode,
  ValidationCode,
  OrchestrationCode,
  ConfigurationCode,
  CancellationCode
)
export type FailureCode = typeof FailureCode.Type

export const FailureCategory = Schema.Literal(
  "InferenceFailure",
  "ToolFailure",
  "ConstraintFailure",
  "ValidationFailure",
  "OrchestrationFailure",
  "ConfigurationFailure",
  "Cancellation"
)
export type FailureCategory = typeof FailureCategory.Type

// ---------------------------------------------------------------------------
// Constructor fields
// ---------------------------------------------------------------------------

/** What every constructor may add. */
export interface Extra {
  readonly details?: Record<string, unknown> | undefined
  readonly cause?: unknown
}
/** For the codes whose retryability the caller knows (a tool's idempotency). */
interface Retry {
  readonly retryable: boolean
}
export interface ToolFields extends Extra {
  readonly toolCallId?: string | undefined
}
export interface ConstraintFields extends Extra {
  readonly raw?: string | undefined
  readonly violations?: ReadonlyArray<string> | undefined
}

const extra = (fields: Extra) => ({
  ...(fields.details === undefined ? {} : { details: fields.details }),
  ...(fields.cause === undefined ? {} : { cause: fields.cause })
})
const toolFields = (fields: ToolFields) => ({
  ...extra(fields),
  ...(fields.toolCallId === undefined ? {} : { toolCallId: fields.toolCallId })
})
const constraintFields = (fields: ConstraintFields) => ({
  ...extra(fields),
  ...(fields.raw === undefined ? {} : { raw: fields.raw }),
  ...(fields.violations === undefined ? {} : { violations: fields.violations })
})

// ---------------------------------------------------------------------------
// The seven categories
// ---------------------------------------------------------------------------

/** The engine failed, the model is missing, the context overflowed, or the reply was unparseable. */
export class InferenceFailure extends Schema.TaggedError<InferenceFailure>()("InferenceFailure", {
  code: InferenceCode,
  ...common
}) {
  static engineError(message: string, details: Record<string, unknown> = {}, cause?: unknown): InferenceFailure {
    return new InferenceFailure({ code: "INFERENCE_ENGINE_ERROR", retryable: true, message, details, cause })
  }
  static modelUnavailable(message: string, details: Record<string, unknown> = {}, cause?: unknown): InferenceFailure {
    return new InferenceFailure({ code: "INFERENCE_MODEL_UNAVAILABLE", retryable: false, message, details, cause })
  }
  static contextExceeded(message: string, details: Record<string, unknown> = {}, cause?: unknown): InferenceFailure {
    return new InferenceFailure({ code: "INFERENCE_CONTEXT_EXCEEDED", retryable: false, message, details, cause })
  }
  static malformed(message: string, details: Record<string, unknown> = {}, cause?: unknown): InferenceFailure {
    return new InferenceFailure({ code: "INFERENCE_MALFORMED_RESPONSE", retryable: true, message, details, cause })
  }
}

/** A tool was unknown, failed, timed out or became unavailable. */
export class ToolFailure extends Schema.TaggedError<ToolFailure>()("ToolFailure", {
  code: ToolCode,
  tool: Schema.String,
  toolCallId: Schema.optional(Schema.String),
  ...common
}) {
  /** Unknown or not allowed for this request. Never retryable. */
  static notFound(tool: string, message: string, fields: ToolFields = {}): ToolFailure {
    return new ToolFailure({ code: "TOOL_NOT_FOUND", tool, retryable: false, message, ...toolFields(fields) })
  }
  /** The call failed; retryable only when the tool is idempotent and the failure may pass. */
  static executionFailed(tool: string, message: string, fields: ToolFields & Retry): ToolFailure {
    return new ToolFailure({ code: "TOOL_EXECUTION_FAILED", tool, retryable: fields.retryable, message, ...toolFields(fields) })
  }
  /** The call outlived its deadline; retryable when the tool is idempotent. */
  static timeout(tool: string, message: string, fields: ToolFields & Retry): ToolFailure {
    return new ToolFailure({ code: "TOOL_TIMEOUT", tool, retryable: fields.retryable, message, ...toolFields(fields) })
  }
  /** The tool cannot run now (a dependency is down); retryable when the tool is idempotent. */
  static unavailable(tool: string, message: string, fields: ToolFields & Retry): ToolFailure {
    return new ToolFailure({ code: "TOOL_UNAVAILABLE", tool, retryable: fields.retryable, message, ...toolFields(fields) })
  }
}

/** The output broke the grammar, the schema, JSON itself, or an enum. */
export class ConstraintFailure extends Schema.TaggedError<ConstraintFailure>()("ConstraintFailure", {
  code: ConstraintCode,
  /** The raw model text that failed, so that a caller never loses it. */
  raw: Schema.optional(Schema.String),
  /** Each violation as "path: rule". */
  violations: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  ...common
}) {
  /** The model's text does not match the grammar it was given: re-ask. */
  static grammarRejected(message: string, fields: ConstraintFields = {}): ConstraintFailure {
    return new ConstraintFailure({ code: "CONSTRAINT_GRAMMAR_REJECTED", retryable: true, message, ...constraintFields(fields) })
  }
  /** The value does not match the schema: re-ask. */
  static schemaInvalid(message: string, fields: ConstraintFields = {}): ConstraintFailure {
    return new ConstraintFailure({ code: "CONSTRAINT_SCHEMA_INVALID", retryable: true, message, ...constraintFields(fields) })
  }
  /** The text is not JSON (even after repair): re-ask. */
  static jsonInvalid(message: string, fields: ConstraintFields = {}): ConstraintFailure {
    return new ConstraintFailure({ code: "CONSTRAINT_JSON_INVALID", retryable: true, message, ...constraintFields(fields) })
  }
  /** A value is no member of its enum: re-ask. */
  static enumUnrecognized(message: string, fields: ConstraintFields = {}): ConstraintFailure {
    return new ConstraintFailure({ code: "CONSTRAINT_ENUM_UNRECOGNIZED", retryable: true, message, ...constraintFields(fields) })
  }
}

/** A rule or a semantic check rejected the output. */
export class ValidationFailure extends Schema.TaggedError<ValidationFailure>()("ValidationFailure", {
  code: ValidationCode,
  failedRules: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  ...common
}) {
  /** Rules rejected the output: re-ask. */
  static ruleFailed(message: string, fields: Extra & { readonly failedRules?: ReadonlyArray<string> | undefined } = {}): ValidationFailure {
    return new ValidationFailure({ code: "VALIDATION_RULE_FAILED", retryable: true, message, ...extra(fields), ...(fields.failedRules === undefined ? {} : { failedRules: fields.failedRules }) })
  }
  /** A semantic check rejected the output: re-ask. */
  static semanticFailed(message: string, fields: Extra & { readonly failedRules?: ReadonlyArray<string> | undefined } = {}): ValidationFailure {
    return new ValidationFailure({ code: "VALIDATION_SEMANTIC_FAILED", retryable: true, message, ...extra(fields), ...(fields.failedRules === undefined ? {} : { failedRules: fields.failedRules }) })
  }
}

/**
 * A plan step got the wrong input, a loop hit its limit, voting found no consensus,
 * or a durable run could not go on (diverged replay, store down, closed slot).
 */
export class OrchestrationFailure extends Schema.TaggedError<OrchestrationFailure>()("OrchestrationFailure", {
  code: OrchestrationCode,
  ...common
}) {
  /** A plan and its handlers disagree: the plan must change. Never retryable. */
  static stepMismatch(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_STEP_MISMATCH", retryable: false, message, ...extra(fields) })
  }
  /** A loop hit its cap. Never retryable. */
  static iterationLimit(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_ITERATION_LIMIT", retryable: false, message, ...extra(fields) })
  }
  /** The replicas did not agree (or too few answered). Never retryable as is. */
  static noConsensus(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_NO_CONSENSUS", retryable: false, message, ...extra(fields) })
  }
  /** A bug caught at the boundary, labelled. Never retryable. */
  static defect(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_DEFECT", retryable: false, message, ...extra(fields) })
  }
  /** A recorded run no longer matches its code (the record is named in the message). Never retryable. */
  static replayDiverged(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_REPLAY_DIVERGED", retryable: false, message, ...extra(fields) })
  }
  /** The durable store is down; retrying later resumes the run where its records stop. */
  static stateUnavailable(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_STATE_UNAVAILABLE", retryable: true, message, ...extra(fields) })
  }
  /** The slot no longer takes answers (or never existed). Never retryable. */
  static slotClosed(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_SLOT_CLOSED", retryable: false, message, ...extra(fields) })
  }

  /** Never retried: the expression and its inputs are recorded, so it fails the same way again. */
  static expressionFailed(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_EXPRESSION_FAILED", retryable: false, message, ...extra(fields) })
  }

  /** The secret does not open the slot: refused before anything is recorded or said about the slot. Never retryable. */
  static slotForbidden(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_SLOT_FORBIDDEN", retryable: false, message, ...extra(fields) })
  }

  /** Every place is taken (the details name the limit): nothing was started; retrying once one is freed succeeds. */
  static capacityExceeded(message: string, fields: Extra = {}): OrchestrationFailure {
    return new OrchestrationFailure({ code: "ORCHESTRATION_CAPACITY_EXCEEDED", retryable: true, message, ...extra(fields) })
  }
}

/** The system is not configured for the request. */
export class ConfigurationFailure extends Schema.TaggedError<ConfigurationFailure>()("ConfigurationFailure", {
  code: ConfigurationCode,
  ...common
}) {
  static noEngine(message: string, fields: Extra = {}): ConfigurationFailure {
    return new ConfigurationFailure({ code: "CONFIG_NO_ENGINE", retryable: false, message, ...extra(fields) })
  }
  static schemaRequired(message: string, fields: Extra = {}): ConfigurationFailure {
    return new ConfigurationFailure({ code: "CONFIG_SCHEMA_REQUIRED", retryable: false, message, ...extra(fields) })
  }
  static grammarNotFound(message: string, fields: Extra = {}): ConfigurationFailure {
    return new ConfigurationFailure({ code: "CONFIG_GRAMMAR_NOT_FOUND", retryable: false, message, ...extra(fields) })
  }
  /** The request is malformed: the caller's input. */
  static invalidRequest(message: string, fields: Extra = {}): ConfigurationFailure {
    return new ConfigurationFailure({ code: "CONFIG_INVALID_REQUEST", retryable: false, message, ...extra(fields) })
  }
}

/** The request was interrupted or ran out of time. */
export class Cancellation extends Schema.TaggedError<Cancellation>()("Cancellation", {
  code: CancellationCode,
  ...common
}) {
  static timeout(message: string, details: Record<string, unknown> = {}): Cancellation {
    return new Cancellation({ code: "CANCELLED_TIMEOUT", retryable: false, message, details })
  }
  static signal(message: string, details: Record<string, unknown> = {}): Cancellation {
    return new Cancellation({ code: "CANCELLED_SIGNAL", retryable: false, message, details })
  }
}

/** Any failure of the taxonomy. */
export type Failure =
  | InferenceFailure
  | ToolFailure
  | ConstraintFailure
  | ValidationFailure
  | OrchestrationFailure
  | ConfigurationFailure
  | Cancellation

/** Decodes and encodes any failure of the taxonomy (for the HTTP boundary). */
export const Failure = Schema.Union(
  InferenceFailure,
  ToolFailure,
  ConstraintFailure,
  ValidationFailure,
  OrchestrationFailure,
  ConfigurationFailure,
  Cancellation
)

const categoryTags: ReadonlySet<string> = new Set(FailureCategory.literals)

/** Whether a value is a failure of the taxonomy. */
export const isFailure = (u: unknown): u is Failure =>
  typeof u === "object" && u !== null && "_tag" in u && categoryTags.has((u as { _tag: string })._tag) &&
  "code" in u

/** Whether a retry may help (used as `while` of retry policies). */
export const isRetryable = (u: unknown): boolean => isFailure(u) && u.retryable

/**
 * The category each code belongs to. A `Record` over every code, so the compiler
 * rejects a code without a category, and a test checks the table is total.
 */
export const categoryOfCode: { readonly [C in FailureCode]: FailureCategory } = {
  INFERENCE_ENGINE_ERROR: "InferenceFailure",
  INFERENCE_MODEL_UNAVAILABLE: "InferenceFailure",
  INFERENCE_CONTEXT_EXCEEDED: "InferenceFailure",
  INFERENCE_MALFORMED_RESPONSE: "InferenceFailure",
  TOOL_NOT_FOUND: "ToolFailure",
  TOOL_EXECUTION_FAILED: "ToolFailure",
  TOOL_TIMEOUT: "ToolFailure",
  TOOL_UNAVAILABLE: "ToolFailure",
  CONSTRAINT_GRAMMAR_REJECTED: "ConstraintFailure",
  CONSTRAINT_SCHEMA_INVALID: "ConstraintFailure",
  CONSTRAINT_JSON_INVALID: "ConstraintFailure",
  CONSTRAINT_ENUM_UNRECOGNIZED: "ConstraintFailure",
  VALIDATION_RULE_FAILED: "ValidationFailure",
  VALIDATION_SEMANTIC_FAILED: "ValidationFailure",
  ORCHESTRATION_STEP_MISMATCH: "OrchestrationFailure",
  ORCHESTRATION_ITERATION_LIMIT: "OrchestrationFailure",
  ORCHESTRATION_NO_CONSENSUS: "OrchestrationFailure",
  ORCHESTRATION_DEFECT: "OrchestrationFailure",
  ORCHESTRATION_REPLAY_DIVERGED: "OrchestrationFailure",
  ORCHESTRATION_STATE_UNAVAILABLE: "OrchestrationFailure",
  ORCHESTRATION_SLOT_CLOSED: "OrchestrationFailure",
  ORCHESTRATION_EXPRESSION_FAILED: "OrchestrationFailure",
  ORCHESTRATION_SLOT_FORBIDDEN: "OrchestrationFailure",
  ORCHESTRATION_CAPACITY_EXCEEDED: "OrchestrationFailure",
  CONFIG_NO_ENGINE: "ConfigurationFailure",
  CONFIG_SCHEMA_REQUIRED: "ConfigurationFailure",
  CONFIG_GRAMMAR_NOT_FOUND: "ConfigurationFailure",
  CONFIG_INVALID_REQUEST: "ConfigurationFailure",
  CANCELLED_TIMEOUT: "Cancellation",
  CANCELLED_SIGNAL: "Cancellation"
}

/**
 * Whether each code is retried: "always", "never", or "caller" for the codes whose
 * answer depends on what failed (a tool's idempotency, a transient engine error).
 * The constructors follow it; a test holds them to it.
 */
export const retryabilityOfCode: { readonly [C in FailureCode]: "always" | "never" | "caller" } = {
  INFERENCE_ENGINE_ERROR: "caller",
  INFERENCE_MODEL_UNAVAILABLE: "never",
  INFERENCE_CONTEXT_EXCEEDED: "never",
  INFERENCE_MALFORMED_RESPONSE: "always",
  TOOL_NOT_FOUND: "never",
  TOOL_EXECUTION_FAILED: "caller",
  TOOL_TIMEOUT: "caller",
  TOOL_UNAVAILABLE: "caller",
  CONSTRAINT_GRAMMAR_REJECTED: "always",
  CONSTRAINT_SCHEMA_INVALID: "always",
  CONSTRAINT_JSON_INVALID: "always",
  CONSTRAINT_ENUM_UNRECOGNIZED: "always",
  VALIDATION_RULE_FAILED: "always",
  VALIDATION_SEMANTIC_FAILED: "always",
  ORCHESTRATION_STEP_MISMATCH: "never",
  ORCHESTRATION_ITERATION_LIMIT: "never",
  ORCHESTRATION_NO_CONSENSUS: "never",
  ORCHESTRATION_DEFECT: "never",
  ORCHESTRATION_REPLAY_DIVERGED: "never",
  ORCHESTRATION_STATE_UNAVAILABLE: "always",
  ORCHESTRATION_SLOT_CLOSED: "never",
  ORCHESTRATION_EXPRESSION_FAILED: "never",
  ORCHESTRATION_SLOT_FORBIDDEN: "never",
  ORCHESTRATION_CAPACITY_EXCEEDED: "always",
  CONFIG_NO_ENGINE: "never",
  CONFIG_SCHEMA_REQUIRED: "never",
  CONFIG_GRAMMAR_NOT_FOUND: "never",
  CONFIG_INVALID_REQUEST: "never",
  CANCELLED_TIMEOUT: "never",
  CANCELLED_SIGNAL: "never"
}
