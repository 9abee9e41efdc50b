/**
 * Layer 0: JSON. Canonical JSON: two values that differ only in key order (or
 * whitespace, once parsed) have one canonical text, what voting compares and what
 * tool-argument hashes are computed over. And a model's JSON reply decoded into a
 * schema, with the taxonomy's two ways to fail.
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { ConstraintFailure } from "./Failure.js"
import { formatPath } from "./Issues.js"

/** Whether a value is a JSON object (not null, not an array). */
export const isObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The value with every object's keys in sorted order, recursively. */
export const sortKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortKeys)
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(value).sort()) out[key] = sortKeys((value as Record<string, unknown>)[key])
    return out
  }
  return value
}

/** Compact JSON with sorted keys. */
export const canonicalJson = (value: unknown): string => JSON.stringify(sortKeys(value)) ?? ""

/**
 * A model's text decoded as JSON into `schema`: text that is not JSON is
 * CONSTRAINT_JSON_INVALID, JSON of the wrong shape CONSTRAINT_SCHEMA_INVALID (each
 * violation as "path: rule"); both carry the raw text and are retryable (re-ask).
 * `what` names the expected reply in messages ("the plan", "the reranker's reply").
 */
/** JSON text to a value: made once (a schema made per call builds its parser again, every call). */
const decodeJsonText = Schema.decodeUnknownEither(Schema.parseJson())

export const decodeJsonAs = <A, I>(
  schema: Schema.Schema<A, I, never>,
  raw: string,
  what: { readonly notJson: string; readonly wrongShape: string }
): Either.Either<A, ConstraintFailure> => {
  const json = decodeJsonText(raw)
  if (Either.isLeft(json)) return Either.left(ConstraintFailure.jsonInvalid(what.notJson, { raw }))
  return Either.mapLeft(Schema.decodeUnknownEither(schema, { errors: "all" })(json.right), (error) =>
    ConstraintFailure.schemaInvalid(what.wrongShape, {
      raw,
      violations: ParseResult.ArrayFormatter.formatErrorSync(error).map((i) => `${formatPath(i.path)}: ${i.message}`)
    }))
}
