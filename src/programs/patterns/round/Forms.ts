/**
 * The journal forms of a round: its selection (the candidates chosen, those
 * dropped and why, predicates that matched no one) and a machine call's
 * terminal DO with the tokens it spent, as schemas the durable steps encode.
 */
import * as Schema from "effect/Schema"
import * as Records from "../../../domain/Records.js"

export const JournaledCandidate = Schema.Struct({
  responder: Schema.String,
  predicate: Schema.String,
  index: Schema.Number,
  score: Schema.Number,
  max_latency_secs: Schema.Number
})

/** A round's selection as the journal keeps it. */
export const Journaled = Schema.Struct({
  candidates: Schema.Array(JournaledCandidate),
  dropped: Schema.Array(Schema.Struct({ responder: Schema.String, predicate: Schema.String, reason: Schema.String })),
  unmatched: Schema.Array(Schema.String)
})
export type Journaled = typeof Journaled.Type

/** A machine call's terminal DO and the tokens it spent. */
export const DoStep = Schema.Struct({ record: Records.Do, tokens: Schema.Number })

