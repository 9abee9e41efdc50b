/**
 * A Reranker that asks the Engine to rate each candidate's relevance, with a
 * reply constrained to the JSON schema `{"score": number}` (clamped to [0, 1]). A
 * reply that is not JSON is CONSTRAINT_JSON_INVALID; JSON of the wrong shape is
 * CONSTRAINT_SCHEMA_INVALID, with the raw text kept on the failure. Orders by
 * score, then by the candidate's original position, and keeps `topK`. Its calls
 * follow the request they are made in (`Engine.inRequest`): they carry its hints
 * where the reranker sets none, and count in its token usage.
 */
import * as Either from "effect/Either"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type { ConstraintFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import { decodeJsonAs } from "../domain/Json.js"
import * as Message from "../domain/Message.js"
import { Engine, InferenceRequest, inRequest } from "../services/Engine.js"
import type { RerankInput, Service } from "../services/Reranker.js"
import { Candidate, rank, Reranker } from "../services/Reranker.js"

/** The answer schema of the model reranker. */
export const scoreJsonSchema: JsonSchema = {
  type: "object",
  properties: { score: { type: "number", description: "relevance from 0 (irrelevant) to 1 (answers the query)" } },
  required: ["score"]
}

const ScoreAnswer = Schema.Struct({ score: Schema.Number })

export const defaultInstructions =
  "You rate how relevant a passage is to a query. Answer only with JSON {\"score\": number} where the score is " +
  "between 0 (irrelevant) and 1 (directly answers the query)."

export interface Options {
  /** The system prompt of each rating call. */
  readonly instructions?: string
  /** How many candidates are rated at once. Default 1 (a local model serves one at a time). */
  readonly concurrency?: number
  readonly maxTokens?: number
}

const parseScore = (raw: string): Either.Either<number, ConstraintFailure> =>
  Either.map(
    decodeJsonAs(ScoreAnswer, raw, {
      notJson: "the reranker's reply is not JSON",
      wrongShape: "the reranker's reply is not {\"score\": number}"
    }),
    (answer) => Math.min(1, Math.max(0, answer.score))
  )

/** A reranker that asks the Engine to score each candidate. */
export const make = (options: Options = {}): Effect.Effect<Service, never, Engine> =>
  Effect.gen(function* () {
    const engine = inRequest(yield* Engine)
    const instructions = options.instructions ?? defaultInstructions
    const score = (query: string, candidate: Candidate) =>
      engine.infer(
        new InferenceRequest({
          messages: [
            Message.system(instructions),
            Message.user(`Query: ${query}\n\nPassage (${candidate.source}): ${candidate.content}`)
          ],
          schema: scoreJsonSchema,
          temperature: 0,
          maxTokens: options.maxTokens ?? 32
        })
      ).pipe(Effect.flatMap((result) => parseScore(result.content)))
    return {
      rerank: Effect.fn("Reranker.model")(function* (input: RerankInput) {
        const scores = yield* Effect.forEach(input.candidates, (c) => score(input.query, c), {
          concurrency: options.concurrency ?? 1
        })
        return rank(input, scores)
      })
    }
  })

/** A model-based reranker layer on the Engine in context. */
export const layer = (options: Options = {}): Layer.Layer<Reranker, never, Engine> =>
  Layer.effect(Reranker, make(options))
