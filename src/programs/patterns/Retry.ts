/**
 * retry_on_low_confidence: a single_shot round, then more while
 * `threshold_expression` fires on the fold (or there is no fold), up to
 * `max_attempts` counting the first. The retries ask with `retry_dial` (for llm
 * responders the dial scales the sampling temperature). Each attempt leaves a
 * LEARN with its index, its fold, whether it triggered a retry and the dials. The
 * first attempt the expression lets through is committed; all exhausted, the most
 * confident fold (the earliest of equals) is committed marked low confidence. The
 * budget is checked before each attempt.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { Failure } from "../../domain/Failure.js"
import { OrchestrationFailure } from "../../domain/Failure.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Folds from "../Folds.js"
import type * as Check from "../query/Check.js"
import * as Commit from "./Commit.js"
import * as Round from "./Round.js"

type RetryOrchestration = Extract<Check.Orchestration, { readonly pattern: "retry_on_low_confidence" }>

/** The dial of attempt `attempt` (from 1): the query's first, then `retry_dial` when given. */
export const dialOf = (checked: Check.Checked, o: RetryOrchestration, attempt: number): number | undefined =>
  attempt === 1 ? checked.dial : o.retryDial ?? checked.dial

export const run = (
  thread: Round.Thread,
  o: RetryOrchestration
): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const learned: Array<string> = []
    const problems: Array<string> = []
    let best: { readonly fold: Folds.Output; readonly attempt: number } | undefined
    let budget: string | undefined
    for (let attempt = 1; attempt <= o.maxAttempts; attempt++) {
      budget = yield* Round.budgetExhausted(thread)
      if (budget !== undefined) break
      const dial = dialOf(thread.checked, o, attempt)
      const round = yield* Round.run(thread, {
        key: `attempt-${attempt}`,
        role: "attempt",
        predicates: thread.checked.responders,
        stage: 0,
        attempt,
        topK: thread.checked.topK,
        dial
      })
      const fold = Round.fold(thread, round.responses)
      const retry = Either.isLeft(fold) ? true : yield* o.threshold.run({ fold: Folds.view(fold.right) })
      const nextDial = retry && attempt < o.maxAttempts ? dialOf(thread.checked, o, attempt + 1) ?? null : null
      const state = yield* Round.learn(thread, `attempt-${attempt}/learn`, Round.doIds(round), {
        kind: Records.kinds.retry,
        attempt,
        fold: Either.isRight(fold) ? Round.summary(fold.right) : null,
        expression: o.threshold.source,
        retry,
        dial: dial ?? null,
        next_dial: nextDial,
        ...(Either.isLeft(fold) ? { problem: Text.excerpt(fold.left.message, 500) } : {})
      })
      learned.push(state.id)
      if (Either.isLeft(fold)) {
        problems.push(`attempt ${attempt}: ${fold.left.message}`)
        continue
      }
      if (!retry) {
        return yield* Commit.know(thread, { pattern: "retry_on_low_confidence", status: "accepted", fold: fold.right, parents: learned, attempt })
      }
      problems.push(`attempt ${attempt}: ${o.threshold.field} fired (confidence ${fold.right.confidence})`)
      if (best === undefined || fold.right.confidence > best.fold.confidence) best = { fold: fold.right, attempt }
    }
    if (best !== undefined) {
      return yield* Commit.know(thread, {
        pattern: "retry_on_low_confidence",
        status: "low_confidence",
        fold: best.fold,
        parents: learned,
        attempt: best.attempt,
        budgetExhausted: budget !== undefined
      })
    }
    return yield* OrchestrationFailure.noConsensus(
      `retry_on_low_confidence: no attempt gave a fold${budget === undefined ? "" : ` (${budget})`}: ${problems.join("; ")}`,
      { details: { pattern: "retry_on_low_confidence", attempts: learned.length, learned, problems } }
    )
  }).pipe(Effect.withSpan("Patterns.retryOnLowConfidence", { captureStackTrace: false }))
