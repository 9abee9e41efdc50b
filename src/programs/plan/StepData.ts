/**
 * The data that flows between the built-in steps (the plan-level IR): a query
 * with scored candidates, a query with context messages, a validated text, a
 * tool call and its result. Each is a Schema, so a step's output is checked and
 * encoded, and a JSON plan can give any of them as a step's explicit input.
 */
import * as Schema from "effect/Schema"
import * as Message from "../../domain/Message.js"
import { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import { Candidate } from "../../services/Reranker.js"
import { ValidationReport } from "../../services/Validator.js"

/** A query with scored candidates: what `retrieve` and `rerank` produce, and `rerank` and `infer` accept. */
export class CandidateSet extends Schema.Class<CandidateSet>("CandidateSet")({
  query: Schema.String,
  candidates: Schema.Array(Candidate)
}) {}

/** A query with ephemeral context messages: what `retrieve` produces over a ContextProvider. */
export class ContextSet extends Schema.Class<ContextSet>("ContextSet")({
  query: Schema.String,
  messages: Schema.Array(Message.Message)
}) {}

/** An output that passed validation, with its report (the pass rate is the confidence). */
export class Validated extends Schema.Class<Validated>("Validated")({
  content: Schema.String,
  report: ValidationReport
}) {}

/** What a `tool` step takes: a tool name and arguments (the call id defaults to the step name). */
export const ToolStepInput = Schema.Struct({
  name: Schema.String,
  arguments: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  }),
  id: Schema.optional(Schema.String)
})

/** What a `tool` step produces. */
export const ToolStepOutput = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  content: Schema.String,
  value: Schema.Unknown
})

/** What a `retrieve` step takes: a query, or a query with its own limit. */
export const QueryInput = Schema.Union(
  Schema.String,
  Schema.Struct({ query: Schema.String, limit: Schema.optional(Schema.Int.pipe(Schema.positive())) })
)

/** The query and the limit it asks for (none for a bare string). */
export const queryOf = (input: typeof QueryInput.Type): { readonly query: string; readonly limit?: number | undefined } =>
  typeof input === "string" ? { query: input, limit: undefined } : input

/** What an `infer` step accepts: a prompt, a full request, candidates for a query, or context for a query. */
export const InferInput = Schema.Union(Schema.String, InferenceRequest, CandidateSet, ContextSet)

/** What a `validate` step accepts: text, an inference result, or anything with a `content` text. */
export const TextInput = Schema.Union(Schema.String, InferenceResult, Schema.Struct({ content: Schema.String }))
