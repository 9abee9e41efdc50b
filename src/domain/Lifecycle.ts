/**
 * Layer 0: the execution lifecycle.
 *
 * Every SystemRequest passes through a fixed state machine from receipt to
 * response; which states are visited depends on the pattern. A retry is not a
 * separate mechanism but the transition VALIDATE -> EXECUTE, which increments the
 * attempt. A durable run that waits for an outside answer (a human slot) is
 * SUSPENDED, entered from EXECUTE, and goes back to EXECUTE when it resumes (the
 * same attempt). ERROR and CANCELLED can be entered from any non-terminal state.
 */
import * as Schema from "effect/Schema"
import { SystemError } from "./System.js"

export const LifecycleState = Schema.Literal(
  "INIT",
  "PLAN",
  "PREPARE",
  "EXECUTE",
  "VALIDATE",
  "SUSPENDED",
  "COMPLETE",
  "ERROR",
  "CANCELLED"
)
export type LifecycleState = typeof LifecycleState.Type

export const terminalStates: ReadonlySet<LifecycleState> = new Set(["COMPLETE", "ERROR", "CANCELLED"])

const forward: { readonly [S in LifecycleState]: ReadonlyArray<LifecycleState> } = {
  INIT: ["PLAN", "PREPARE"],
  PLAN: ["PREPARE"],
  PREPARE: ["EXECUTE"],
  EXECUTE: ["VALIDATE", "SUSPENDED", "COMPLETE"],
  VALIDATE: ["EXECUTE", "COMPLETE"],
  SUSPENDED: ["EXECUTE"],
  COMPLETE: [],
  ERROR: [],
  CANCELLED: []
}

/** Whether the machine may move from `from` to `to`. */
export const canTransition = (from: LifecycleState, to: LifecycleState): boolean => {
  if (terminalStates.has(from)) return false
  if (to === "ERROR" || to === "CANCELLED") return true
  return forward[from].includes(to)
}

/** The current position in the lifecycle, updated on every transition. */
export class ExecutionState extends Schema.Class<ExecutionState>("ExecutionState")({
  current: LifecycleState,
  enteredAt: Schema.DateTimeUtc,
  attempt: Schema.NonNegativeInt,
  totalSteps: Schema.NonNegativeInt,
  lastError: Schema.optional(SystemError),
  lastStep: Schema.optional(Schema.String)
}) {}
