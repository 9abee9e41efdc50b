/**
 * From the taxonomy to HTTP: which status a SystemError is sent with, and the
 * W3C trace context a request arrives with.
 *
 *   400  CONFIG_INVALID_REQUEST, CONFIG_SCHEMA_REQUIRED (the request is malformed
 *        for its mode: bad JSON, wrong types, unknown mode, missing schema), and
 *        the INFERENCE_ENGINE_ERROR of a grammar or schema the engine refused
 *        (`details.kind` "grammar": the request's own, past the pre-check)
 *   403  ORCHESTRATION_SLOT_FORBIDDEN (an answer to a human slot by someone
 *        it does not take; nothing was recorded). The runs routes send it as
 *        404, as for a slot that does not exist (`Runs.ts`)
 *   413  the body exceeds the server's limit (CONFIG_INVALID_REQUEST)
 *   422  the request is well formed but cannot be served as asked:
 *        CONFIG_GRAMMAR_NOT_FOUND, TOOL_NOT_FOUND (a whitelisted tool the server
 *        does not have), INFERENCE_CONTEXT_EXCEEDED (the conversation does not fit
 *        the model's context; 413 stays reserved for the byte limit), every
 *        CONSTRAINT_* and VALIDATION_* (the model's output failed the contract
 *        after repair and retries), ORCHESTRATION_* but DEFECT, REPLAY_DIVERGED
 *        and STATE_UNAVAILABLE (ORCHESTRATION_SLOT_CLOSED: the answer came for
 *        a slot that no longer takes one; ORCHESTRATION_EXPRESSION_FAILED: a
 *        query's CEL expression failed on the answers it read)
 *   429  ORCHESTRATION_CAPACITY_EXCEEDED (every place for durable runs in flight,
 *        or for event listeners, is taken: nothing was started; sent with
 *        `Retry-After`)
 *   499  CANCELLED_SIGNAL (the caller went away; nginx's "client closed request")
 *   500  ORCHESTRATION_DEFECT (a bug, labelled; never a stack trace),
 *        ORCHESTRATION_REPLAY_DIVERGED (a recorded run the deployed code no
 *        longer produces: the server's, not the client's)
 *   502  INFERENCE_ENGINE_ERROR, INFERENCE_MALFORMED_RESPONSE, a retryable
 *        TOOL_EXECUTION_FAILED (a dependency behind the server failed); a
 *        TOOL_EXECUTION_FAILED that is not retryable is 422: the call as the
 *        client made it cannot succeed (a plan's tool step with wrong arguments,
 *        a calculator asked to divide by zero)
 *   503  INFERENCE_MODEL_UNAVAILABLE, TOOL_UNAVAILABLE, CONFIG_NO_ENGINE,
 *        ORCHESTRATION_STATE_UNAVAILABLE (the server is not able to serve now;
 *        not the client's fault)
 *   504  CANCELLED_TIMEOUT, TOOL_TIMEOUT
 */
import type { FailureCode } from "../../domain/Failure.js"
import type { ErrorStatus } from "./Api.js"

/** The status a failed response is sent with. */
export const statusOf = (code: FailureCode): ErrorStatus => {
  switch (code) {
    case "CONFIG_INVALID_REQUEST":
    case "CONFIG_SCHEMA_REQUIRED":
      return 400
    case "ORCHESTRATION_SLOT_FORBIDDEN":
      return 403
    case "ORCHESTRATION_CAPACITY_EXCEEDED":
      return 429
    case "CONFIG_NO_ENGINE":
    case "INFERENCE_MODEL_UNAVAILABLE":
    case "TOOL_UNAVAILABLE":
    case "ORCHESTRATION_STATE_UNAVAILABLE":
      return 503
    case "CONFIG_GRAMMAR_NOT_FOUND":
    case "TOOL_NOT_FOUND":
    case "INFERENCE_CONTEXT_EXCEEDED":
    case "CONSTRAINT_GRAMMAR_REJECTED":
    case "CONSTRAINT_SCHEMA_INVALID":
    case "CONSTRAINT_JSON_INVALID":
    case "CONSTRAINT_ENUM_UNRECOGNIZED":
    case "VALIDATION_RULE_FAILED":
    case "VALIDATION_SEMANTIC_FAILED":
    case "ORCHESTRATION_STEP_MISMATCH":
    case "ORCHESTRATION_ITERATION_LIMIT":
    case "ORCHESTRATION_NO_CONSENSUS":
    case "ORCHESTRATION_SLOT_CLOSED":
    case "ORCHESTRATION_EXPRESSION_FAILED":
      return 422
    case "INFERENCE_ENGINE_ERROR":
    case "INFERENCE_MALFORMED_RESPONSE":
    case "TOOL_EXECUTION_FAILED":
      return 502
    case "CANCELLED_TIMEOUT":
    case "TOOL_TIMEOUT":
      return 504
    case "CANCELLED_SIGNAL":
      return 499
    case "ORCHESTRATION_DEFECT":
    case "ORCHESTRATION_REPLAY_DIVERGED":
      return 500
  }
}

/**
 * The status of an error: its code's, but a non-retryable TOOL_EXECUTION_FAILED
 * is the caller's input (422), and so is a grammar the engine refused (400).
 */
export const statusOfError = (
  error: { readonly code: FailureCode; readonly retryable: boolean; readonly details?: Readonly<Record<string, unknown>> | undefined }
): ErrorStatus =>
  error.code === "TOOL_EXECUTION_FAILED" && !error.retryable
    ? 422
    : error.code === "INFERENCE_ENGINE_ERROR" && !error.retryable && error.details?.["kind"] === "grammar"
    ? 400
    : statusOf(error.code)

/** OpenAI's error `type` for a status. */
export const openAiErrorType = (status: number): string =>
  status === 504
    ? "timeout_error"
    : status >= 500
    ? "server_error"
    : status === 401
    ? "authentication_error"
    : "invalid_request_error"

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/**
 * The trace id of a W3C `traceparent` header (`00-<trace-id>-<span-id>-<flags>`).
 * Malformed headers, version ff and the all-zero ids are ignored, as the spec says.
 */
export const traceIdOf = (traceparent: string | undefined): string | undefined => {
  if (traceparent === undefined) return undefined
  const match = TRACEPARENT.exec(traceparent.trim().toLowerCase())
  if (match === null) return undefined
  const [, version, traceId, spanId] = match
  if (version === "ff" || /^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined
  return traceId
}
