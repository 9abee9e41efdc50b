/**
 * Layer 0: the failure taxonomy.
 *
 * Every failure in pagantic belongs to exactly one of seven categories. A category
 * decides retry eligibility and the recovery path; a stable `code` inside it names
 * the specific failure. These are the values the loops really fail with (the Go
 * original declared them and returned plain errors). At the system boundary each
 * one maps, totally, to a SystemError.
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
  /** Beyond seed 03: a defect (a bug) caught at the boundary, labeled instead of escaping. */
  "ORCHESTRATION_DEFECT"
)
export const ConfigurationCode = Schema.Literal(
  "CONFIG_NO_ENGINE",
  "CONFIG_SCHEMA_REQUIRED",
  "CONFIG_GRAMMAR_NOT_FOUND",
  /** Beyond seed 03: the request envelope does not decode (missing fields, wrong types, unknown mode). */
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
}) {}

/** The output broke the grammar, the schema, JSON itself, or an enum. */
export class ConstraintFailure extends Schema.TaggedError<ConstraintFailure>()("ConstraintFailure", {
  code: ConstraintCode,
  /** The raw model text that failed, so that a caller never loses it. */
  raw: Schema.optional(Schema.String),
  /** Each violation as "path: rule". */
  violations: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  ...common
}) {}

/** A rule or a semantic check rejected the output. */
export class ValidationFailure extends Schema.TaggedError<ValidationFailure>()("ValidationFailure", {
  code: ValidationCode,
  failedRules: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  ...common
}) {}

/** A plan step got the wrong input, a loop hit its limit, or voting found no consensus. */
export class OrchestrationFailure extends Schema.TaggedError<OrchestrationFailure>()("OrchestrationFailure", {
  code: OrchestrationCode,
  ...common
}) {}

/** The system is not configured for the request. */
export class ConfigurationFailure extends Schema.TaggedError<ConfigurationFailure>()("ConfigurationFailure", {
  code: ConfigurationCode,
  ...common
}) {}

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
  CONFIG_NO_ENGINE: "ConfigurationFailure",
  CONFIG_SCHEMA_REQUIRED: "ConfigurationFailure",
  CONFIG_GRAMMAR_NOT_FOUND: "ConfigurationFailure",
  CONFIG_INVALID_REQUEST: "ConfigurationFailure",
  CANCELLED_TIMEOUT: "Cancellation",
  CANCELLED_SIGNAL: "Cancellation"
}
