/**
 * Layer 5: constraint.
 *
 * A model asked for JSON does not always return it: the text may be truncated,
 * wrapped in a code fence, use single quotes, or name an enum member in the wrong
 * case. The constraint layer turns model text into a value the caller can trust, in
 * a fixed pipeline where each step runs only when needed:
 *
 *   parse -> (repair, only if the text is not JSON and repair is allowed)
 *         -> normalize enums -> validate
 *
 * A target is what the output must conform to. Callers hold one of two kinds of
 * schema: an Effect Schema (the typed path: the caller gets the Schema's Type back)
 * or a raw JSON Schema of the documented subset (the path a SystemRequest over HTTP
 * takes). Both become a `Target`: an Effect Schema that validates, and the JSON
 * Schema subset that is sent to the engine (so engines that constrain decoding by
 * schema do) and that drives enum normalization. There is one validator, Effect
 * Schema's decoder: a raw JSON Schema is converted into an Effect Schema, and an
 * Effect Schema is described as JSON Schema with effect's own JSONSchema module.
 *
 * Every failure is a ConstraintFailure that carries the raw model text and the
 * violations, each as "path: rule", so structured output never fails silently.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { ConstraintFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"

/** What a caller may give as the shape of the output: an Effect Schema, or a raw JSON Schema of the subset. */
export type OutputSchema<A> = Schema.Schema<A, any, never> | JsonSchema

/** Whether an output schema is an Effect Schema (the typed path). */
export const isEffectSchema = <A>(schema: OutputSchema<A>): schema is Schema.Schema<A, any, never> =>
  Schema.isSchema(schema)

/** A resolved target: the validator and the JSON Schema subset that describes it. */
export interface Target<A> {
  /** Decodes (validates) the parsed, normalized JSON into the caller's type. */
  readonly schema: Schema.Schema<A, any, never>
  /** Sent to the engine and used for enum normalization. */
  readonly jsonSchema: JsonSchema
}

/** The outcome of repair: the text to parse and whether it was changed. */
export interface Repaired {
  readonly text: string
  readonly repaired: boolean
}

export interface EnforceOptions {
  /** Whether JSON repair may be applied to text that is not JSON (default true). */
  readonly repairAllowed?: boolean | undefined
}

/** Model text that went through the pipeline and conforms to its target. */
export interface Enforced<A> {
  /** The validated value, of the target's type. */
  readonly value: A
  /** The parsed, normalized JSON, before decoding. */
  readonly json: unknown
  /** `json` as compact JSON text: the content to hand on. */
  readonly content: string
  /** The model's text as it came. */
  readonly raw: string
  /** Whether JSON repair was needed (it counts as one repair attempt). */
  readonly repaired: boolean
  /** Whether enum normalization changed anything. */
  readonly normalized: boolean
}

/** What the engine request should carry for a target. */
export interface RequestConstraints {
  readonly schema: JsonSchema
  readonly grammar?: string | undefined
}

export interface Service {
  /** Resolves either kind of output schema to a target. */
  readonly target: <A>(schema: OutputSchema<A>) => Target<A>
  /** Describes an Effect Schema in the JSON Schema subset (enums kept, what the subset lacks dropped). */
  readonly toJsonSchema: <A, I>(schema: Schema.Schema<A, I, never>) => JsonSchema
  /** Derives the validating Effect Schema of a JSON Schema of the subset. */
  readonly fromJsonSchema: (schema: JsonSchema) => Schema.Schema<unknown>
  /** Repairs text that is not valid JSON; valid JSON is returned unchanged. Never throws. */
  readonly repair: (text: string) => Effect.Effect<Repaired, ConstraintFailure>
  /**
   * Replaces each string that matches exactly one enum member case-insensitively
   * with that member, in nested objects and arrays. Ambiguous and unknown values are
   * left for validation. Idempotent; does not mutate its input.
   */
  readonly normalizeEnums: (value: unknown, schema: JsonSchema) => unknown
  /** Validates a JSON value against a target; violations name the path and the rule. */
  readonly validate: <A>(value: unknown, target: Target<A>, raw?: string) => Effect.Effect<A, ConstraintFailure>
  /** The full pipeline: parse -> (repair if invalid and allowed) -> normalize -> validate. */
  readonly enforce: <A>(
    text: string,
    target: Target<A>,
    options?: EnforceOptions
  ) => Effect.Effect<Enforced<A>, ConstraintFailure>
  /** The schema and grammar to put on an inference request; a GBNF grammar passes through unchanged. */
  readonly requestConstraints: <A>(target: Target<A>, grammar?: string) => RequestConstraints
}

/** The constraint layer. */
export class Constraint extends Context.Tag("pagantic/Constraint")<Constraint, Service>() {}
