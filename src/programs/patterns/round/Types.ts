/**
 * The shapes a round is made of: what every round of a run shares (`Thread`),
 * what one round asks (`Spec`), what it returns (`Round`), and the options a
 * pattern passes down (`Options`, whose `notify` hands a human the `Notice`
 * that query/Notification defines).
 */
import type * as Effect from "effect/Effect"
import type * as Ref from "effect/Ref"
import type * as AnswerShape from "../../../domain/AnswerShape.js"
import type { Failure } from "../../../domain/Failure.js"
import type * as Records from "../../../domain/Records.js"
import type { Service as DurableService } from "../../../services/Durable.js"
import type * as Folds from "../../Folds.js"
import type * as Check from "../../query/Check.js"
import type { Notice } from "../../query/Notification.js"
import type * as SingleShot from "../../query/SingleShot.js"
import type { Journaled } from "./Forms.js"

export type { Notice }

export interface Options extends SingleShot.Dispatch {
  /** Hands a human slot (its secret and deadline) to the human; runs once per slot. Without it nobody can answer a human CALL. */
  readonly notify?: ((notice: Notice) => Effect.Effect<void, Failure>) | undefined
}

/** What every round of one run shares. */
export interface Thread {
  readonly durable: DurableService
  readonly runId: string
  readonly intendId: string
  readonly checked: Check.Checked
  /** The query's input as text. */
  readonly input: string
  readonly options: Options
  /** CALLs dispatched and tokens spent so far (rebuilt identically on a replay). */
  readonly spent: Ref.Ref<{ readonly calls: number; readonly tokens: number }>
}

export interface Spec {
  /** The round's key in the run, unique: `stage-1`, `attempt-2`, `verifier`... */
  readonly key: string
  readonly role: string
  readonly predicates: ReadonlyArray<Check.Responder>
  readonly stage: number
  readonly attempt: number
  readonly topK: number
  /** The text the responders are asked. Default the query's input. */
  readonly input?: string | undefined
  /** The dial; default the query's. */
  readonly dial?: number | undefined
  /** The answer shape asked for, when it is not the query's (an auditor's verdict). */
  readonly shape?: AnswerShapeOverride | undefined
}

/** A shape asked of a round instead of the query's. */
export interface AnswerShapeOverride {
  readonly wire: Check.Checked["query"]["answer_shape"]
  readonly checker: AnswerShape.Checker
}

export interface Round {
  readonly calls: ReadonlyArray<Records.Call>
  /** Every DO: the accepts, then one terminal DO per CALL, in candidate order. */
  readonly dos: ReadonlyArray<Records.Do>
  /** One per CALL, in candidate order, as the folds take them. */
  readonly responses: ReadonlyArray<Folds.Response>
  /** Every human CALL of the round expired and nothing else answered validly. */
  readonly expired: boolean
  readonly selection: Journaled
}
