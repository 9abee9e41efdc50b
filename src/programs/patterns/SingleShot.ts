/**
 * single_shot, durable: one round over the query's responders (top-k, in
 * parallel, every CALL and DO journaled), the fold, the KNOW. No LEARN: there is
 * no state between steps to resume from.
 */
import * as Effect from "effect/Effect"
import type { Failure } from "../../domain/Failure.js"
import type * as Records from "../../domain/Records.js"
import type { Reranker } from "../../services/Reranker.js"
import type { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Commit from "./Commit.js"
import * as Round from "./Round.js"

export const run = (thread: Round.Thread): Effect.Effect<Records.Know, Failure, ResponderRegistry | Reranker> =>
  Effect.gen(function* () {
    const round = yield* Round.run(thread, {
      key: "single_shot",
      role: "single_shot",
      predicates: thread.checked.responders,
      stage: 0,
      attempt: 1,
      topK: thread.checked.topK
    })
    const fold = yield* Round.fold(thread, round.responses)
    return yield* Commit.know(thread, { pattern: "single_shot", status: "accepted", fold })
  }).pipe(Effect.withSpan("Patterns.singleShot", { captureStackTrace: false }))
