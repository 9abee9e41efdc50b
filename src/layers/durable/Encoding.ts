/**
 * What the durable engine journals and how the runs' rows read: the workflow's
 * outcome value, a closed slot as its deferred carries it, a slot's ticket, the
 * workflow made for a run definition, and the small helpers (hashes, secrets,
 * the call site of a step, records) the other parts share.
 */
import { DeclineReason } from "../../services/Durable.js"
import * as DurableDeferred from "@effect/workflow/DurableDeferred"
import * as Workflow from "@effect/workflow/Workflow"
import * as Cause from "effect/Cause"
import * as DateTime from "effect/DateTime"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { createHash, timingSafeEqual } from "node:crypto"
import type { Failure as FailureType } from "../../domain/Failure.js"
import { Failure, OrchestrationFailure } from "../../domain/Failure.js"
import type { AnyDefinition } from "../../services/Runs.js"
import { ThreadRecord } from "../../services/Runs.js"
import type { RecordRow } from "./Tables.js"

/**
 * How a run ended, as the workflow's result: the program's failures are values,
 * not engine failures. The result or the failure itself is in the run's row
 * (`pagantic_runs`), kept once; the journal keeps only which end it was.
 */
export const Outcome = Schema.Union(Schema.TaggedStruct("Ok", {}), Schema.TaggedStruct("Failed", {}))
export type Outcome = typeof Outcome.Type

/** A closed slot, as its deferred carries it. */
export const SlotClosed = Schema.Union(
  Schema.TaggedStruct("Answered", { value: Schema.Unknown, at: Schema.Number }),
  Schema.TaggedStruct("Declined", { reason: DeclineReason, at: Schema.Number }),
  Schema.TaggedStruct("Expired", { deadline: Schema.Number }),
  Schema.TaggedStruct("Cancelled", {})
)
export type SlotClosed = typeof SlotClosed.Type

/** What the engine journals of an opened slot: its deadline (never its secret, which only the store's hash keeps). */
export const Ticket = Schema.Struct({ deadline: Schema.Number })

export const slotDeferred = (key: string) => DurableDeferred.make(`slot/${key}`, { success: SlotClosed })

export const encodeFailure = Schema.encodeSync(Failure)
export const decodeFailure = Schema.decodeUnknownOption(Failure)

export const workflowName = (definition: string) => `pagantic/${definition}`

/**
 * The workflow of a run definition. Its payload is empty: the run's input is kept
 * once, in the run's row, and an execution reads it from there (a journal written
 * when the message carried the input too still decodes).
 */
export const makeWorkflow = (definition: AnyDefinition) =>
  Workflow.make({
    name: workflowName(definition.name),
    payload: {},
    success: Outcome,
    idempotencyKey: () => ""
  })

export type RunWorkflow = ReturnType<typeof makeWorkflow>

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

export const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex")

/** Whether `secret` is one of a slot's secrets (`hashes`: their SHA-256, space-separated), each compared in constant time. */
export const secretMatches = (secret: string, hashes: string): boolean => {
  const given = Buffer.from(sha256(secret), "hex")
  let found = false
  for (const hash of hashes.split(" ")) {
    const stored = Buffer.from(hash, "hex")
    if (given.length === stored.length && timingSafeEqual(given, stored)) found = true
  }
  return found
}

/**
 * Where a step was called: the first stack frame outside this folder and
 * node_modules, read when asked (taking the stack is cheap, formatting it is not,
 * and only a key used twice needs it).
 */
export const callSite = (): (() => string) => {
  const taken = new Error()
  return () => {
    const frames = (taken.stack ?? "").split("\n").slice(1)
    const frame = frames.find((line) => !line.includes("/layers/durable/") && !line.includes("node_modules"))
    return frame === undefined ? "an unknown call site" : frame.trim().replace(/^at /, "")
  }
}

export const describeParse = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

export const failureOfCause = (cause: Cause.Cause<FailureType>): FailureType =>
  Option.getOrElse(Cause.failureOption(cause), () =>
    OrchestrationFailure.defect(`the run's program died: ${Cause.pretty(cause)}`, { cause: Cause.squash(cause) }))

export const toUtc = (millis: number) => DateTime.unsafeMake(millis)

export const parseJson = (text: string | null): unknown => (text === null ? undefined : JSON.parse(text))

export const recordOf = (row: RecordRow): ThreadRecord =>
  new ThreadRecord({
    runId: row.run_id,
    seq: row.seq,
    kind: row.kind,
    key: row.key,
    at: toUtc(row.at),
    ...(row.body === null ? {} : { body: parseJson(row.body) })
  })

export const endsThread = (row: RecordRow) => row.kind === "KNOW" || (row.kind === "STATE" && (row.key === "failed" || row.key === "cancelled"))
