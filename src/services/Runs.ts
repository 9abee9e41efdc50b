/**
 * Durable runs: programs whose progress survives a crash.
 *
 * A run is started from a definition (a name, the payload and result schemas,
 * the answer shapes of its human slots, and the program) and lives as a thread of
 * records: INTEND (the payload), CALL (an intent: a slot opened, an at-most-once
 * step about to run), DO (a response: a step's result, a slot's answer or expiry),
 * KNOW (the committed result), and STATE (the run's status moving). On a restart
 * the runs that were going are re-driven from their records: a step whose result
 * is recorded is not run again, a run waiting for a human waits again, and a
 * slot's deadline stays where it was.
 *
 * A run is `running`, `suspended` (waiting for an answer), `stale` (recorded as
 * running by a process that is gone, until this one re-drives it), `completed`,
 * `failed` or `cancelled`.
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Stream from "effect/Stream"
import type { ConfigurationFailure, Failure, OrchestrationFailure } from "../domain/Failure.js"
import { Failure as FailureSchema } from "../domain/Failure.js"
import type { AnswerShape, DeclineReason, Durable } from "./Durable.js"

/** What a durable run runs: registered with the Runs layer, started by name. */
export interface Definition<P, PI, A, AI, R> {
  /** Unique among the definitions of one Runs layer; recorded with each run. */
  readonly name: string
  readonly payload: Schema.Schema<P, PI>
  readonly success: Schema.Schema<A, AI>
  /** The shapes of the answers its slots take (checked by `respond`). */
  readonly answers?: ReadonlyArray<AnswerShape<any, any>> | undefined
  readonly program: (payload: P) => Effect.Effect<A, Failure, Durable | R>
}

/** Any definition (for the Runs layers' lists). */
export type AnyDefinition = Definition<any, any, any, any, any>

/** The services the programs of `Defs` need besides Durable. */
export type Requirements<Defs extends AnyDefinition> = Defs extends Definition<any, any, any, any, infer R>
  ? Exclude<R, Durable>
  : never

/** A definition, typed. */
export const define = <P, PI, A, AI, R>(definition: Definition<P, PI, A, AI, R>): Definition<P, PI, A, AI, R> =>
  definition

export const RunStatus = Schema.Literal("running", "suspended", "stale", "completed", "failed", "cancelled")
export type RunStatus = typeof RunStatus.Type

/** The terminal statuses: a run in one of them never moves again. */
export const terminalStatuses: ReadonlySet<RunStatus> = new Set(["completed", "failed", "cancelled"])

/** A run as recorded. */
export class RunInfo extends Schema.Class<RunInfo>("pagantic/RunInfo")({
  id: Schema.String,
  definition: Schema.String,
  status: RunStatus,
  /** Who started it (a principal's name, as the caller of `start` gave it); none when nobody said. */
  owner: Schema.optional(Schema.String),
  /** The key of the slot a suspended run waits for. */
  waitingOn: Schema.optional(Schema.String),
  /** The result, encoded with the definition's success schema (completed runs). */
  result: Schema.optional(Schema.Unknown),
  /** Why a run failed or was cancelled. */
  error: Schema.optional(FailureSchema),
  createdAt: Schema.DateTimeUtc,
  updatedAt: Schema.DateTimeUtc
}) {}

export const RecordKind = Schema.Literal("INTEND", "CALL", "DO", "LEARN", "KNOW", "STATE")
export type RecordKind = typeof RecordKind.Type

/** One record of a run's thread. */
export class ThreadRecord extends Schema.Class<ThreadRecord>("pagantic/ThreadRecord")({
  runId: Schema.String,
  /** Order in the store (increasing within a run). */
  seq: Schema.Number,
  kind: RecordKind,
  /** The step or slot key (INTEND: "payload", KNOW: "result", STATE: the status). */
  key: Schema.String,
  at: Schema.DateTimeUtc,
  body: Schema.optional(Schema.Unknown)
}) {}

/** A slot as exported with its thread (never its secret). */
export class ThreadSlot extends Schema.Class<ThreadSlot>("pagantic/ThreadSlot")({
  key: Schema.String,
  shape: Schema.String,
  status: Schema.Literal("open", "answered", "declined", "expired", "cancelled"),
  deadline: Schema.Number,
  answer: Schema.optional(Schema.Unknown),
  closedAt: Schema.optional(Schema.Number),
  /** The responder it was asked of (who may answer it without the secret). */
  responder: Schema.optional(Schema.String),
  /** What its answers must satisfy beyond the shape's schema (the shape's `check` reads it). */
  terms: Schema.optional(Schema.Unknown),
  /** The latest an accept may move its deadline to (epoch milliseconds); none: a year from the accept. */
  latest: Schema.optional(Schema.Number),
  /** How many accepts it took. */
  accepts: Schema.optional(Schema.Number)
}) {}

/**
 * A run's thread as exported: enough to re-drive it in another store. Imported,
 * it runs again with every recorded response (DO) read from the thread instead of
 * being asked again, so a completed thread comes to the same KNOW without calling
 * anything.
 */
export class Thread extends Schema.Class<Thread>("pagantic/Thread")({
  runId: Schema.String,
  definition: Schema.String,
  /** Who started the run; kept by an import. */
  owner: Schema.optional(Schema.String),
  payload: Schema.Unknown,
  records: Schema.Array(ThreadRecord),
  slots: Schema.Array(ThreadSlot)
}) {}

export interface ListOptions {
  readonly status?: RunStatus | undefined
  /** Only the runs this owner started. */
  readonly owner?: string | undefined
  /** At most this many, newest first. Default 100. */
  readonly limit?: number | undefined
}

export interface StartOptions {
  /** The run's id; default a random one. Starting an id that exists returns it unchanged. */
  readonly id?: string | undefined
  /** Who starts it (a principal's name): recorded with the run, for whoever serves runs to several callers. */
  readonly owner?: string | undefined
}

/**
 * Who answers a slot: the holder of its secret (the string the run handed out),
 * the responder it was asked of (`{ responder }`: the caller vouches that it
 * authenticated as that responder), or the operator (`{ operator: true }`),
 * trusted with every slot.
 */
export type Answerer = string | { readonly responder: string } | { readonly operator: true }

/** How many times one slot may be accepted (each accept may move its deadline, up to the slot's bound). */
export const maxAcceptsPerSlot = 3

/** The errors of the Runs API: an unknown run or a bad input, a store down, a closed slot. */
export type RunsError = OrchestrationFailure | ConfigurationFailure

export interface Service {
  /** Records the run (INTEND) and starts it; returns its id. */
  readonly start: <P, PI, A, AI, R>(
    definition: Definition<P, PI, A, AI, R>,
    payload: P,
    options?: StartOptions
  ) => Effect.Effect<string, RunsError>
  /** The run as recorded now (also a run of a definition this layer does not have). */
  readonly poll: (runId: string) => Effect.Effect<RunInfo, RunsError>
  /** Waits until the run is completed, failed or cancelled (or `suspended`, with `untilSuspended`). */
  readonly await: (
    runId: string,
    options?: { readonly untilSuspended?: boolean | undefined }
  ) => Effect.Effect<RunInfo, RunsError>
  /** Re-drives a suspended or stale run (a no-op for a run that is going or over). */
  readonly resume: (runId: string) => Effect.Effect<void, RunsError>
  /** Cancels the run: it ends `cancelled` with CANCELLED_SIGNAL, its open slots closed. */
  readonly cancel: (runId: string) => Effect.Effect<void, RunsError>
  /**
   * Answers a slot. An answerer the slot does not take (a wrong secret, another
   * responder), a slot or a run that does not exist, and a run of a definition this
   * layer does not have (to whoever may not answer it) are refused alike
   * (ORCHESTRATION_SLOT_FORBIDDEN, the same message) and record nothing; an answer
   * that does not match the slot's shape, or that the shape's `check` refuses for
   * this slot, is CONFIG_INVALID_REQUEST naming the field (`details.field`, a path
   * in the answer) and the slot stays open; a slot already closed (answered,
   * expired, cancelled) or past its deadline is ORCHESTRATION_SLOT_CLOSED.
   */
  readonly respond: (
    runId: string,
    slotKey: string,
    answerer: Answerer,
    answer: unknown
  ) => Effect.Effect<"Accepted", RunsError>
  /**
   * A responder takes the slot and expects to answer within `etaSeconds`: the
   * deadline becomes the later of itself and now + eta (the slot stays open). At
   * most `maxAcceptsPerSlot` accepts per slot (past it: CONFIG_INVALID_REQUEST,
   * `details.field` "kind"), and never past the slot's bound (`details.field`
   * "etaSeconds"). Checked like `respond`.
   */
  readonly accept: (
    runId: string,
    slotKey: string,
    answerer: Answerer,
    etaSeconds: number
  ) => Effect.Effect<"Accepted", RunsError>
  /** A responder declines the slot: it closes, and the run sees `Declined` with the reason. Checked like `respond`. */
  readonly decline: (
    runId: string,
    slotKey: string,
    answerer: Answerer,
    reason: DeclineReason
  ) => Effect.Effect<"Declined", RunsError>
  /** The run's records in order, then the new ones as they come, ending after the run ends. */
  readonly events: (runId: string) => Stream.Stream<ThreadRecord, RunsError>
  /** The runs recorded, newest first (only `owner`'s when it is given). */
  readonly list: (options?: ListOptions) => Effect.Effect<ReadonlyArray<RunInfo>, RunsError>
  /** The run's thread, to import elsewhere. */
  readonly exportThread: (runId: string) => Effect.Effect<Thread, RunsError>
  /**
   * Records an exported thread (its end left out) and re-drives it: steps whose
   * response is in the thread are not run again; its owner, and its slots'
   * responders and terms, are kept (their secrets are not: an open slot gets a new
   * one). A run with the id already here is refused.
   */
  readonly importThread: (thread: Thread) => Effect.Effect<string, RunsError>
  /** Deletes the records of runs that ended longer ago than `olderThan`; returns how many runs went. */
  readonly prune: (options: { readonly olderThan: Duration.DurationInput }) => Effect.Effect<number, RunsError>
}

/** Durable runs: start, observe, answer and cancel them. */
export class Runs extends Context.Tag("pagantic/Runs")<Runs, Service>() {}
