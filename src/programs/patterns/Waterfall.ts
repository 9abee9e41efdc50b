/**
 * waterfall: stages tried in order, cheapest first. Each stage is a round over
 * its responders, folded; `accept_expression` on the fold decides. The first
 * accepted fold is committed; each stage that is not (no fold, or the expression
 * false) leaves a LEARN with its index, its fold and the expression's value, so
 * a restart goes on at the next unattempted stage. All stages refused: the last
 * fold is committed marked not accepted (`on_exhausted: "commit_last"`, the
 * default) or the run fails (`"fail"`). The budget is checked before each stage.
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

type WaterfallOrchestration = Extract<Check.Orchestration, { readonly pattern: "waterfall" }>

export const run = (
  thread: Round.Thread,
  o: WaterfallOrchestration
): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const learned: Array<string> = []
    const problems: Array<string> = []
    let last: { readonly fold: Folds.Output; readonly stage: number } | undefined
    let budget: string | undefined
    for (let stage = 0; stage < o.stages.length; stage++) {
      budget = yield* Round.budgetExhausted(thread)
      if (budget !== undefined) break
      const round = yield* Round.runOrNoOne(thread, {
        key: `stage-${stage}`,
        role: "stage",
        predicates: o.stages[stage]!,
        stage,
        attempt: 1,
        topK: thread.checked.topK
      })
      const fold = Either.flatMap(round, (r) => Round.fold(thread, r.responses))
      const parents = Either.isRight(round) ? Round.doIds(round.right) : []
      if (Either.isLeft(fold)) {
        problems.push(`stage ${stage}: ${fold.left.message}`)
        learned.push((yield* Round.learn(thread, `stage-${stage}/learn`, parents, {
          kind: Records.kinds.waterfall,
          stage,
          fold: null,
          expression: o.accept.source,
          accepted: null,
          problem: Text.excerpt(fold.left.message, 500)
        })).id)
        continue
      }
      const accepted = yield* o.accept.run({ fold: Folds.view(fold.right) })
      if (accepted) {
        return yield* Commit.know(thread, { pattern: "waterfall", status: "accepted", fold: fold.right, parents: learned, stage })
      }
      problems.push(`stage ${stage}: ${o.accept.field} is false`)
      learned.push((yield* Round.learn(thread, `stage-${stage}/learn`, parents, {
        kind: Records.kinds.waterfall,
        stage,
        fold: Round.summary(fold.right),
        expression: o.accept.source,
        accepted: false
      })).id)
      last = { fold: fold.right, stage }
    }
    if (o.onExhausted === "commit_last" && last !== undefined) {
      return yield* Commit.know(thread, {
        pattern: "waterfall",
        status: "not_accepted",
        fold: last.fold,
        parents: learned,
        stage: last.stage,
        budgetExhausted: budget !== undefined
      })
    }
    return yield* OrchestrationFailure.noConsensus(
      `waterfall: no stage's fold was accepted${budget === undefined ? "" : ` (${budget})`}: ${problems.join("; ")}`,
      { details: { pattern: "waterfall", stages: o.stages.length, learned, problems, ...(budget === undefined ? {} : { budget }) } }
    )
  }).pipe(Effect.withSpan("Patterns.waterfall", { captureStackTrace: false }))
