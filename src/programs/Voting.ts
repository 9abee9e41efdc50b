/**
 * Voting: picking one output from N candidates (N-version programming).
 *
 * A strategy is a small interface the RedundantLoop consumes: it gets the candidate
 * texts in replica order and returns the winner's index, its content and how
 * strongly the vote supports it. Strategies compare meaning, not bytes: JSON
 * candidates are compared in canonical form (keys sorted, no whitespace), so key
 * order and formatting never split a vote; anything else is compared as trimmed
 * text. Ties break by first-seen order, so the same candidates always give the
 * same winner. Both strategies are the consensus fold (see Folds) over the
 * candidates' canonical forms: the voting logic exists once.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { OrchestrationFailure } from "../domain/Failure.js"
import { canonicalJson } from "../domain/Json.js"
import * as Folds from "./Folds.js"
import * as Observed from "./internal/Observed.js"

/** The outcome of a vote. */
export interface Vote {
  /** Index of the winning candidate in the list given (its first occurrence). */
  readonly winner: number
  /** The winning candidate as given. */
  readonly content: string
  /** How strongly the vote supports the winner, in [0, 1]. */
  readonly confidence: number
}

/** A way to pick one candidate. */
export interface VotingStrategy {
  readonly name: string
  readonly vote: (candidates: ReadonlyArray<string>) => Effect.Effect<Vote, OrchestrationFailure>
}

// ---------------------------------------------------------------------------
// Canonical form
// ---------------------------------------------------------------------------

const parseJson = (text: string): Either.Either<unknown, void> =>
  Either.try({ try: (): unknown => JSON.parse(text), catch: () => undefined })

/**
 * The canonical form of a candidate: JSON with keys sorted and no whitespace, or,
 * when the text is not JSON, the trimmed text (prefixed so it can never equal a JSON form).
 */
export const canonical = (candidate: string): string => {
  const trimmed = candidate.trim()
  return Either.match(parseJson(trimmed), {
    onLeft: () => `text:${trimmed}`,
    onRight: (value) => `json:${canonicalJson(value)}`
  })
}

const noCandidates = (strategy: string) =>
  OrchestrationFailure.noConsensus(`${strategy} voting: no candidates`, { details: { strategy, candidates: 0 } })

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/** The candidates as fold responses: one per replica, each answer its canonical form. */
const asResponses = (candidates: ReadonlyArray<string>): ReadonlyArray<Folds.Response> =>
  candidates.map((candidate, i) =>
    Folds.answered({ responder: `replica ${i}`, responderIndex: i, recordId: "", body: canonical(candidate) })
  )

const consensusOf = (strategy: string, candidates: ReadonlyArray<string>) =>
  Either.mapLeft(Folds.consensus(asResponses(candidates)), () => noCandidates(strategy))

/**
 * The most frequent candidate wins; ties go to the one seen first. Confidence is
 * the winner's votes over the number of candidates (the consensus fold).
 */
export const MajorityVoting: VotingStrategy = {
  name: "majority",
  vote: Observed.fn("MajorityVoting.vote")(function* (candidates: ReadonlyArray<string>) {
    if (candidates.length === 0) return yield* noCandidates("majority")
    const folded = yield* consensusOf("majority", candidates)
    const winner = folded.chosen.responderIndex
    const vote: Vote = { winner, content: candidates[winner]!, confidence: folded.confidence }
    return vote
  })
}

/**
 * Every candidate must agree (in canonical form); confidence is then 1. Otherwise
 * fails with ORCHESTRATION_NO_CONSENSUS naming the first candidate that differs
 * (the consensus fold's second group starts with it).
 */
export const UnanimityVoting: VotingStrategy = {
  name: "unanimity",
  vote: Observed.fn("UnanimityVoting.vote")(function* (candidates: ReadonlyArray<string>) {
    if (candidates.length === 0) return yield* noCandidates("unanimity")
    const folded = yield* consensusOf("unanimity", candidates)
    const second = folded.groups[1]
    if (second !== undefined) {
      const differing = second[0]!.responderIndex
      return yield* OrchestrationFailure.noConsensus(`unanimity voting: candidate ${differing} differs from candidate 0`, {
        details: { strategy: "unanimity", candidate: differing, candidates: candidates.length }
      })
    }
    const vote: Vote = { winner: 0, content: candidates[0]!, confidence: 1 }
    return vote
  })
}
