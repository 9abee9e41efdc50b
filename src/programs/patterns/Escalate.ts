/**
 * escalate: tiers of increasing authority (an LLM, a better LLM, a human). Each
 * tier is a round, folded; `escalation_expression` on the fold decides whether
 * the next tier is asked (a tier with no fold escalates). Each tier leaves a
 * LEARN. A human tier waits until its journaled deadline, which each accept moves
 * to max(deadline, answered at + eta). When a tier's deadline passes with no
 * valid answer, the previous tier's fold is committed marked expired
 * (`on_expired: "commit_previous"`, the default) or the run fails with
 * CANCELLED_TIMEOUT (`"fail"`). The last tier escalating has nowhere to go: its
 * fold is committed marked not accepted. The budget is checked before each tier.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { Failure } from "../../domain/Failure.js"
import { Cancellation, OrchestrationFailure } from "../../domain/Failure.js"
import * as Records from "../../domain/Records.js"
import * as Text from "../../domain/Text.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Folds from "../Folds.js"
import type * as Check from "../query/Check.js"
import * as Commit from "./Commit.js"
import * as Round from "./Round.js"

type EscalateOrchestration = Extract<Check.Orchestration, { readonly pattern: "escalate" }>

export const run = (
  thread: Round.Thread,
  o: EscalateOrchestration
): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const learned: Array<string> = []
    const problems: Array<string> = []
    let previous: { readonly fold: Folds.Output; readonly tier: number } | undefined
    let budget: string | undefined
    for (let tier = 0; tier < o.tiers.length; tier++) {
      budget = yield* Round.budgetExhausted(thread)
      if (budget !== undefined) break
      const round = yield* Round.runOrNoOne(thread, {
        key: `tier-${tier}`,
        role: "tier",
        predicates: o.tiers[tier]!,
        stage: tier,
        attempt: 1,
        topK: thread.checked.topK
      })
      const parents = Either.isRight(round) ? Round.doIds(round.right) : []
      const fold = Either.flatMap(round, (r) => Round.fold(thread, r.responses))
      const expired = Either.isRight(round) && round.right.expired
      const escalate = Either.isLeft(fold) ? true : yield* o.escalation.run({ fold: Folds.view(fold.right) })
      const state = yield* Round.learn(thread, `tier-${tier}/learn`, parents, {
        kind: Records.kinds.escalate,
        tier,
        fold: Either.isRight(fold) ? Round.summary(fold.right) : null,
        expression: o.escalation.source,
        escalate: expired ? false : escalate,
        expired,
        ...(Either.isLeft(fold) ? { problem: Text.excerpt(fold.left.message, 500) } : {})
      })
      learned.push(state.id)
      if (expired) {
        if (o.onExpired === "fail") {
          return yield* Cancellation.timeout(`escalate: tier ${tier}'s deadline passed with no valid answer`, {
            pattern: "escalate",
            tier,
            learned
          })
        }
        if (previous === undefined) {
          return yield* OrchestrationFailure.noConsensus(
            `escalate: tier ${tier}'s deadline passed with no valid answer and no earlier tier has one`,
            { details: { pattern: "escalate", tier, learned, problems } }
          )
        }
        return yield* Commit.know(thread, { pattern: "escalate", status: "expired", fold: previous.fold, parents: learned, stage: previous.tier })
      }
      if (Either.isLeft(fold)) {
        problems.push(`tier ${tier}: ${fold.left.message}`)
        continue
      }
      if (!escalate) {
        return yield* Commit.know(thread, { pattern: "escalate", status: "accepted", fold: fold.right, parents: learned, stage: tier })
      }
      problems.push(`tier ${tier}: ${o.escalation.field} fired`)
      previous = { fold: fold.right, tier }
    }
    if (previous !== undefined) {
      return yield* Commit.know(thread, {
        pattern: "escalate",
        status: "not_accepted",
        fold: previous.fold,
        parents: learned,
        stage: previous.tier,
        budgetExhausted: budget !== undefined
      })
    }
    return yield* OrchestrationFailure.noConsensus(
      `escalate: no tier gave a fold${budget === undefined ? "" : ` (${budget})`}: ${problems.join("; ")}`,
      { details: { pattern: "escalate", tiers: o.tiers.length, learned, problems } }
    )
  }).pipe(Effect.withSpan("Patterns.escalate", { captureStackTrace: false }))
