/**
 * Durable execution, as a program inside a durable run sees it.
 *
 * A durable run is a thread of records. Each `step` is journaled under a key
 * unique in the run: once its result (or typed failure) is recorded, a replay of
 * the run after a crash returns the record instead of running the effect again,
 * so a completed step runs once and the step in flight at a crash at most twice
 * (`once: true` makes it at most once: an intent is recorded before the call, and
 * an intent found without a result fails with an outcome-unknown ToolFailure).
 * Times are journaled too (`now`, `deadline`): a deadline is an absolute time,
 * computed once, that a restart does not push back.
 *
 * A human slot (`slot`, `awaitAnswer`) is a question sent out of the run: a
 * random secret and an absolute deadline are drawn in a step (the deadline is
 * journaled, the secret only its hash: it is handed to the program, never
 * written down); the answer comes through `Runs.respond` with that secret, or
 * from the responder the slot names (a responder may first `accept`, which
 * moves the deadline to at least now + its eta within the slot's bound, or
 * `decline`); if none comes by the deadline, a timer closes the slot as expired.
 * Whoever closes the slot first wins; the run waits (SUSPENDED) without holding
 * a fiber, across restarts.
 *
 * The service exists only inside a run (the Runs layer provides it to the
 * program); its methods never need anything else from the context.
 */
import * as Context from "effect/Context"
import type * as DateTime from "effect/DateTime"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Failure } from "../domain/Failure.js"

/**
 * The kind of answer a slot takes: a name, the schema every answer must match,
 * and optionally what one slot's answers must satisfy besides (`check`, given the
 * terms the slot was opened with). A run definition lists its shapes, so
 * `Runs.respond` checks an answer before the slot is closed with it: a refused
 * answer leaves the slot open.
 */
export interface AnswerShape<A, I = A> {
  readonly name: string
  readonly schema: Schema.Schema<A, I>
  readonly check?: ((answer: A, slot: SlotTerms) => AnswerProblem | undefined) | undefined
}

/** What `AnswerShape.check` knows of the slot an answer came to. */
export interface SlotTerms {
  /** The slot's `terms` (`SlotOptions.terms`), as recorded. */
  readonly terms: unknown
  /** When the answer came (epoch milliseconds). */
  readonly at: number
  readonly deadline: number
  /** The latest an accept may move the deadline to (epoch milliseconds); none: no bound. */
  readonly latest: number | undefined
}

/** Why an answer is refused: the field (a path in the answer, e.g. `category`) and what is wrong. */
export interface AnswerProblem {
  readonly field: string
  readonly message: string
}

/** An answer shape named `name` (unique among the shapes of a run definition). */
export const answerShape = <A, I>(
  name: string,
  schema: Schema.Schema<A, I>,
  check?: (answer: A, slot: SlotTerms) => AnswerProblem | undefined
): AnswerShape<A, I> => (check === undefined ? { name, schema } : { name, schema, check })

/** An open human slot: where to answer, with which secret, until when. */
export class Slot extends Schema.Class<Slot>("pagantic/Slot")({
  runId: Schema.String,
  /** The slot's key in its run (its structural step key). */
  key: Schema.String,
  /** The answer shape's name. */
  shape: Schema.String,
  /**
   * The capability to answer, for whoever the program hands it to (a notification
   * link): without it, or the responder the slot names, `Runs.respond` refuses and
   * records nothing. Only its hash is stored.
   */
  secret: Schema.Redacted(Schema.String),
  deadline: Schema.DateTimeUtc
}) {}

/** Why a responder declined a slot. */
export const DeclineReason = Schema.Literal("out_of_domain", "overbooked", "conflict_of_interest", "other")
export type DeclineReason = typeof DeclineReason.Type

/** How a slot was closed, as the run sees it when it goes on. */
export type SlotOutcome<A> =
  | { readonly _tag: "Answered"; readonly value: A; readonly at: DateTime.Utc }
  | { readonly _tag: "Declined"; readonly reason: DeclineReason; readonly at: DateTime.Utc }
  | { readonly _tag: "Expired"; readonly deadline: DateTime.Utc }

export interface StepOptions {
  /**
   * At most once (a call that must not be repeated, a non-idempotent tool): an
   * intent is recorded before the effect runs; when a restart finds the intent
   * without a result, the step fails with TOOL_EXECUTION_FAILED, `outcomeUnknown`.
   * Default false: the step in flight at a crash runs again (at most twice).
   */
  readonly once?: boolean | undefined
}

export interface SlotOptions {
  /** The slot's key in the run; default the shape's name. Unique among the run's keys. */
  readonly key?: string | undefined
  /** How long the slot stays open, from when it is first opened (journaled as an absolute deadline). */
  readonly sla: Duration.DurationInput
  /** The responder it is asked of: `Runs.respond` takes its answer without the secret (`{ responder }`). */
  readonly responder?: string | undefined
  /** What the shape's `check` reads for this slot (JSON), recorded with it. */
  readonly terms?: unknown
  /**
   * How late an accept may move the deadline, as a wait from when the slot is
   * first opened (recorded as an absolute time). Default: no bound but a year
   * from the accept.
   */
  readonly bound?: Duration.DurationInput | undefined
}

export interface Service {
  /** The run's id. */
  readonly runId: string
  /**
   * Runs `effect` once per run under `key` and journals its value (encoded with
   * `schema`) or its failure. A key used twice in one run is a defect naming both
   * call sites; a recorded value `schema` no longer decodes is ORCHESTRATION_REPLAY_DIVERGED.
   */
  readonly step: <A, I, R>(
    key: string,
    schema: Schema.Schema<A, I>,
    effect: Effect.Effect<A, Failure, R>,
    options?: StepOptions
  ) => Effect.Effect<A, Failure, R>
  /** The time, journaled under `key`: the same on every replay. */
  readonly now: (key: string) => Effect.Effect<DateTime.Utc, Failure>
  /** `after` from now, computed once and journaled under `key` as an absolute time. */
  readonly deadline: (key: string, after: Duration.DurationInput) => Effect.Effect<DateTime.Utc, Failure>
  /** Opens a human slot taking answers of `shape` (its deadline journaled, its secret stored only as a hash). */
  readonly slot: <A, I>(shape: AnswerShape<A, I>, options: SlotOptions) => Effect.Effect<Slot, Failure>
  /**
   * Waits for the slot to close: answered (the value decoded with the shape),
   * declined by the responder, or expired. The run is SUSPENDED while it waits and resumes when the slot closes,
   * in this process or after a restart.
   */
  readonly awaitAnswer: <A, I>(shape: AnswerShape<A, I>, slot: Slot) => Effect.Effect<SlotOutcome<A>, Failure>
  /**
   * Closes a slot the run will not wait for any more (a quorum was met without
   * it): an answer sent to it afterwards is ORCHESTRATION_SLOT_CLOSED at once, not
   * at its deadline. Closing a closed slot does nothing, so a replay may close it again.
   */
  readonly closeSlot: (slot: Slot) => Effect.Effect<void, Failure>
  /**
   * The idempotency key of a step (a hash of the run id and the step key): the
   * same on every replay, different in every run, for tools that take one.
   */
  readonly idempotencyKey: (key: string) => string
}

/** Durable execution inside a run. */
export class Durable extends Context.Tag("pagantic/Durable")<Durable, Service>() {}
