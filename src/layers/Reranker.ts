/**
 * Reranker implementations.
 *
 * - `lexical` (the default): BM25 over the candidates themselves (term frequency
 *   with saturation and length normalisation, inverse document frequency across
 *   the candidate set). No model, no failure, fully deterministic.
 * - `model`: asks the Engine to rate each candidate's relevance with a reply
 *   constrained to the JSON schema `{"score": number}` (clamped to [0, 1]). A reply
 *   that is not JSON is CONSTRAINT_JSON_INVALID; JSON of the wrong shape is
 *   CONSTRAINT_SCHEMA_INVALID, with the raw text kept on the failure.
 *
 * Both order by score, then by the candidate's original position, and keep `topK`.
 */
import * as Either from "effect/Either"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { ConstraintFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import { decodeJsonAs } from "../domain/Json.js"
import * as Message from "../domain/Message.js"
import { Engine, InferenceRequest } from "../services/Engine.js"
import { Candidate, Reranker } from "../services/Reranker.js"
import type { RerankInput, Service } from "../services/Reranker.js"

// ---------------------------------------------------------------------------
// Ordering
// ---------------------------------------------------------------------------

const ordered = (input: RerankInput, scores: ReadonlyArray<number>): ReadonlyArray<Candidate> => {
  const ranked = input.candidates
    .map((candidate, i) => ({ candidate, i, score: scores[i]! }))
    .sort((a, b) => b.score - a.score || a.i - b.i)
    .map(({ candidate, score }) => new Candidate({ ...candidate, score }))
  return input.topK === undefined ? ranked : ranked.slice(0, input.topK)
}

// ---------------------------------------------------------------------------
// Lexical
// ---------------------------------------------------------------------------

/** Lowercased letter/digit runs. */
export const tokenize = (text: string): ReadonlyArray<string> => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []

export interface LexicalOptions {
  /** Term-frequency saturation. Default 1.2. */
  readonly k1?: number
  /** Length normalisation. Default 0.75. */
  readonly b?: number
}

/** BM25 scores of `documents` for `query`, the documents being the whole corpus. */
export const bm25 = (
  query: string,
  documents: ReadonlyArray<string>,
  options: LexicalOptions = {}
): ReadonlyArray<number> => {
  const k1 = options.k1 ?? 1.2
  const b = options.b ?? 0.75
  const docs = documents.map(tokenize)
  const n = docs.length
  if (n === 0) return []
  const avgLength = docs.reduce((sum, d) => sum + d.length, 0) / n || 1
  const terms = [...new Set(tokenize(query))]
  const df = new Map(terms.map((t) => [t, docs.filter((d) => d.includes(t)).length] as const))
  return docs.map((doc) => {
    const tf = new Map<string, number>()
    for (const token of doc) tf.set(token, (tf.get(token) ?? 0) + 1)
    let score = 0
    for (const term of terms) {
      const f = tf.get(term) ?? 0
      if (f === 0) continue
      const docFreq = df.get(term)!
      const idf = Math.log(1 + (n - docFreq + 0.5) / (docFreq + 0.5))
      score += idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * doc.length / avgLength))
    }
    return score
  })
}

/** A lexical reranker: BM25 of each candidate against the query, across the candidate set. */
export const makeLexical = (options: LexicalOptions = {}): Service => ({
  rerank: Effect.fn("Reranker.lexical")(function* (input: RerankInput) {
    return ordered(input, bm25(input.query, input.candidates.map((c) => c.content), options))
  })
})

/** The default reranker layer: lexical. */
export const layer = (options: LexicalOptions = {}): Layer.Layer<Reranker> =>
  Layer.succeed(Reranker, makeLexical(options))

// ---------------------------------------------------------------------------
// Model-based
// ---------------------------------------------------------------------------

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

export interface ModelOptions {
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
export const makeModel = (options: ModelOptions = {}): Effect.Effect<Service, never, Engine> =>
  Effect.gen(function* () {
    const engine = yield* Engine
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
        return ordered(input, scores)
      })
    }
  })

/** A model-based reranker layer on the Engine in context. */
export const layerModel = (options: ModelOptions = {}): Layer.Layer<Reranker, never, Engine> =>
  Layer.effect(Reranker, makeModel(options))
