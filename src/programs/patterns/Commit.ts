/**
 * The KNOW a pattern commits: the fold's answer as a body of the answer shape's
 * kind, described by the fold, the orchestration (pattern, status, calls and
 * tokens spent) and, for an audited ensemble, the verdict. It is the run's
 * result, computed from journaled records only, so a replay commits the same.
 */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Records from "../../domain/Records.js"
import type * as Folds from "../Folds.js"
import * as Round from "./Round.js"

export interface Commit {
  readonly pattern: Records.KnowOrchestration["pattern"]
  readonly status: Records.KnowStatus
  readonly fold: Folds.Output
  /** The records it follows from besides the fold's support (LEARNs, a verifier's DO...). */
  readonly parents?: ReadonlyArray<string> | undefined
  readonly stage?: number | undefined
  readonly attempt?: number | undefined
  readonly budgetExhausted?: boolean | undefined
  readonly audit?: Records.AuditVerdict | undefined
}

/** The KNOW of a run. */
export const know = (thread: Round.Thread, commit: Commit): Effect.Effect<Records.Know> =>
  Effect.map(Ref.get(thread.spent), (spent) => {
    const fold = Round.summary(commit.fold)
    const parents = Array.from(new Set([...fold.support, ...(commit.parents ?? [])]))
    return new Records.Know({
      id: Records.recordId(thread.runId, "know"),
      kind: "KNOW",
      parents,
      body: Records.knowBody(thread.checked.query.answer_shape.kind, commit.fold.answer, {
        fold,
        orchestration: {
          pattern: commit.pattern,
          status: commit.status,
          calls: spent.calls,
          tokens: spent.tokens,
          ...(commit.stage === undefined ? {} : { stage: commit.stage }),
          ...(commit.attempt === undefined ? {} : { attempt: commit.attempt }),
          ...(commit.budgetExhausted === true ? { budget_exhausted: true } : {})
        },
        audit: commit.audit
      })
    })
  })
