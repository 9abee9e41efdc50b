/**
 * The live constraint layer: jsonrepair for repair, Effect Schema for validation,
 * effect's JSONSchema module to describe an Effect Schema in the JSON Schema subset.
 *
 * Raw JSON Schemas are not validated by a second, hand-written validator: they are
 * converted to an Effect Schema once (`fromJsonSchema`) and decoded like any other.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { jsonrepair } from "jsonrepair"
import { ConstraintFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import * as Issues from "../domain/Issues.js"
import { isObject } from "../domain/Json.js"
import { fromSchema, toEffectSchema } from "../domain/JsonSchema.js"
import * as Text from "../domain/Text.js"
import type { Enforced, EnforceOptions, OutputSchema, Repaired, RequestConstraints, Service, Target } from "../services/Constraint.js"
import { Constraint, isEffectSchema } from "../services/Constraint.js"
import * as Tracing from "../services/internal/Tracing.js"

// ---------------------------------------------------------------------------
// Paths and violations
// ---------------------------------------------------------------------------

/** Renders a path as `$.a.b[0]["odd key"]` (see `Issues.formatPath`). */
export const formatPath = Issues.formatPath

const expectedActual = /^Expected (.*), actual (.*)$/s

/** Merges the issues at one path ("Expected "a", actual "c"" twice becomes "Expected "a" | "b", actual "c""). */
const mergeMessages = (messages: ReadonlyArray<string>): string => {
  const unique = Array.from(new Set(messages))
  if (unique.length === 1) return unique[0]!
  const parsed = unique.map((m) => expectedActual.exec(m))
  const actuals = new Set(parsed.map((p) => p?.[2]))
  if (parsed.every((p) => p !== null) && actuals.size === 1) {
    return `Expected ${parsed.map((p) => p![1]).join(" | ")}, actual ${parsed[0]![2]}`
  }
  return unique.join(" or ")
}

interface Violation {
  readonly path: string
  readonly rule: string
}

const violationsOf = (error: ParseResult.ParseError): ReadonlyArray<Violation> => {
  const byPath = new Map<string, Array<string>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const path = formatPath(issue.path)
    const messages = byPath.get(path) ?? []
    messages.push(issue.message)
    byPath.set(path, messages)
  }
  return Array.from(byPath, ([path, messages]) => ({ path, rule: mergeMessages(messages) }))
}

const render = (v: Violation): string => `${v.path}: ${v.rule}`

// ---------------------------------------------------------------------------
// Repair
// ---------------------------------------------------------------------------


const parseJson = (text: string): Either.Either<unknown, string> =>
  Either.try({ try: (): unknown => JSON.parse(text), catch: Text.messageOf })

const repairJson = (text: string): Either.Either<string, string> =>
  Either.try({ try: () => jsonrepair(text), catch: Text.messageOf })

const jsonInvalid = (raw: string, violations: ReadonlyArray<string>, repairAttempted: boolean) =>
  ConstraintFailure.jsonInvalid(
    repairAttempted ? "the output is not valid JSON and could not be repaired" : "the output is not valid JSON",
    { raw, violations, details: { repairAttempted } }
  )

/**
 * What repair tries, in order. Models often wrap JSON in prose ("Sure! {...} Hope
 * this helps."), which jsonrepair rejects or turns into an array of strings; when
 * the text does not start with JSON (or a code fence, which jsonrepair strips), the
 * embedded block is tried first: from the first bracket to the end (a truncated
 * block), then up to the last closing bracket (trailing prose).
 */
const repairCandidates = (text: string): ReadonlyArray<string> => {
  const trimmed = text.trim()
  const start = trimmed.search(/[[{]/)
  if (start <= 0 || trimmed.startsWith("```")) return [text]
  const block = trimmed.slice(start)
  // A stray bracket after prose is not an answer.
  if (/^[\s[\]{}]*$/.test(block)) return [text]
  const close = Math.max(block.lastIndexOf("}"), block.lastIndexOf("]"))
  return close > 0 && close < block.length - 1 ? [block, block.slice(0, close + 1), text] : [block, text]
}

const repairOne = (candidate: string): Either.Either<{ readonly json: unknown; readonly text: string }, string> =>
  Either.orElse(
    Either.map(parseJson(candidate), (json) => ({ json, text: candidate })),
    () =>
      Either.flatMap(repairJson(candidate), (repaired) =>
        Either.map(
          Either.mapLeft(parseJson(repaired), (e) => `repair produced invalid JSON (${e})`),
          (json) => ({ json, text: repaired })
        )
      )
  )

/** Parses model text, repairing it first when it is not JSON and repair is allowed. */
const parseOrRepair = (
  text: string,
  repairAllowed: boolean
): Either.Either<{ readonly json: unknown; readonly text: string; readonly repaired: boolean }, ConstraintFailure> => {
  const direct = parseJson(text)
  if (Either.isRight(direct)) return Either.right({ json: direct.right, text, repaired: false })
  if (!repairAllowed) return Either.left(jsonInvalid(text, [`$: not valid JSON (${direct.left})`], false))
  const errors: Array<string> = []
  for (const candidate of repairCandidates(text)) {
    const outcome = repairOne(candidate)
    if (Either.isRight(outcome)) return Either.right({ ...outcome.right, repaired: true })
    errors.push(outcome.left)
  }
  return Either.left(
    jsonInvalid(text, [`$: not valid JSON (${direct.left})`, `$: repair failed (${errors.at(-1) ?? "no candidate"})`], true)
  )
}

// ---------------------------------------------------------------------------
// Enum normalization
// ---------------------------------------------------------------------------


const matchEnum = (value: string, members: ReadonlyArray<string>): string => {
  if (members.includes(value)) return value
  const lower = value.toLowerCase()
  const matches = new Set(members.filter((m) => m.toLowerCase() === lower))
  return matches.size === 1 ? matches.values().next().value! : value
}

/** Whether a schema (or a schema under it) lists an enum: known once per schema object. */
const enumsIn = new WeakMap<JsonSchema, boolean>()
const containsEnum = (schema: JsonSchema): boolean => {
  const known = enumsIn.get(schema)
  if (known !== undefined) return known
  const found = schema.enum !== undefined ||
    (schema.items !== undefined && containsEnum(schema.items)) ||
    (schema.properties !== undefined && Object.values(schema.properties).some(containsEnum))
  enumsIn.set(schema, found)
  return found
}

/**
 * Returns the same reference when nothing changed, so callers can tell whether it did.
 * A value under a schema with no enum anywhere is returned as it is, unwalked.
 */
export const normalizeEnums = (value: unknown, schema: JsonSchema): unknown => {
  if (!containsEnum(schema)) return value
  if (schema.enum !== undefined && typeof value === "string") return matchEnum(value, schema.enum)
  if (Array.isArray(value) && schema.items !== undefined) {
    const items = schema.items
    let changed = false
    const out = value.map((item: unknown) => {
      const next = normalizeEnums(item, items)
      if (next !== item) changed = true
      return next
    })
    return changed ? out : value
  }
  if (isObject(value) && schema.properties !== undefined) {
    const properties = schema.properties
    let changed = false
    const out: Record<string, unknown> = {}
    for (const [key, field] of Object.entries(value)) {
      const sub = Object.prototype.hasOwnProperty.call(properties, key) ? properties[key] : undefined
      const next = sub === undefined ? field : normalizeEnums(field, sub)
      if (next !== field) changed = true
      out[key] = next
    }
    return changed ? out : value
  }
  return value
}

interface UnrecognizedEnum {
  readonly path: string
  readonly value: string
  readonly allowed: ReadonlyArray<string>
}

/** Strings under an enum that are not members (after normalization). */
const unrecognizedEnums = (
  value: unknown,
  schema: JsonSchema,
  path: ReadonlyArray<PropertyKey> = []
): ReadonlyArray<UnrecognizedEnum> => {
  if (schema.enum !== undefined && typeof value === "string") {
    return schema.enum.includes(value) ? [] : [{ path: formatPath(path), value, allowed: schema.enum }]
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    const items = schema.items
    return value.flatMap((item: unknown, i) => unrecognizedEnums(item, items, [...path, i]))
  }
  if (isObject(value) && schema.properties !== undefined) {
    const properties = schema.properties
    return Object.entries(value).flatMap(([key, field]) =>
      Object.prototype.hasOwnProperty.call(properties, key) ? unrecognizedEnums(field, properties[key]!, [...path, key]) : []
    )
  }
  return []
}

// ---------------------------------------------------------------------------
// JSON Schema subset -> Effect Schema
// ---------------------------------------------------------------------------

/** The Effect Schema a JSON Schema of the subset describes (see `JsonSchema.toEffectSchema`). */
export const fromJsonSchema = (schema: JsonSchema): Schema.Schema<unknown> => toEffectSchema(schema)

// ---------------------------------------------------------------------------
// Effect Schema -> JSON Schema subset
// ---------------------------------------------------------------------------

/** Derives the JSON-schema subset from an Effect Schema (see `JsonSchema.fromSchema`). */
export const toJsonSchema = <A, I>(schema: Schema.Schema<A, I, never>): JsonSchema => fromSchema(schema)

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

/** Targets are resolved once per schema object (N replicas share one conversion). */
const targets = new WeakMap<object, Target<any>>()

const target = <A>(schema: OutputSchema<A>): Target<A> => {
  const cached = targets.get(schema)
  if (cached !== undefined) return cached as Target<A>
  const resolved: Target<A> = isEffectSchema(schema)
    ? { schema, jsonSchema: toJsonSchema(schema) }
    : { schema: fromJsonSchema(schema) as Schema.Schema<A>, jsonSchema: schema }
  targets.set(schema, resolved)
  return resolved
}

const repair = (text: string): Effect.Effect<Repaired, ConstraintFailure> =>
  Either.match(parseOrRepair(text, true), {
    onLeft: (failure) => Effect.fail(failure),
    onRight: (parsed) => Effect.succeed({ text: parsed.text, repaired: parsed.repaired })
  })

const validateEither = <A>(
  value: unknown,
  t: Target<A>,
  raw: string | undefined,
  repaired: boolean
): Either.Either<A, ConstraintFailure> => {
  const decoded = Schema.decodeUnknownEither(t.schema)(value, { errors: "all", onExcessProperty: "ignore" })
  if (Either.isRight(decoded)) return Either.right(decoded.right)
  const violations = violationsOf(decoded.left)
  const unrecognized = unrecognizedEnums(value, t.jsonSchema)
  const enumPaths = new Set(unrecognized.map((u) => u.path))
  const onlyEnums = violations.length > 0 && violations.every((v) => enumPaths.has(v.path))
  return Either.left(
    (onlyEnums ? ConstraintFailure.enumUnrecognized : ConstraintFailure.schemaInvalid)(
      onlyEnums
        ? `the output names ${unrecognized.length === 1 ? "a value" : "values"} outside the allowed enum`
        : `the output does not match the schema (${violations.length} violation${violations.length === 1 ? "" : "s"})`,
      {
        raw,
        violations: violations.map(render),
        details: { repaired, ...(unrecognized.length === 0 ? {} : { unrecognizedEnums: unrecognized }) }
      }
    )
  )
}

const contentOf = <A>(value: A, json: unknown, t: Target<A>): string => {
  const encoded = Schema.encodeEither(t.schema)(value)
  return JSON.stringify(Either.isRight(encoded) ? encoded.right : json)
}

/** Builds the live constraint service. */
export const make: Effect.Effect<Service> = Effect.sync(() => {
  const validate = <A>(value: unknown, t: Target<A>, raw?: string): Effect.Effect<A, ConstraintFailure> =>
    validateEither(value, t, raw, false)

  // the pipeline as plain functions over Either (an Either is an Effect of one step): no generator per reply
  const enforceEither = <A>(text: string, t: Target<A>, options?: EnforceOptions): Either.Either<Enforced<A>, ConstraintFailure> => {
    const parsed = parseOrRepair(text, options?.repairAllowed ?? true)
    if (Either.isLeft(parsed)) return Either.left(parsed.left)
    const { repaired } = parsed.right
    const json = normalizeEnums(parsed.right.json, t.jsonSchema)
    const value = validateEither(json, t, text, repaired)
    if (Either.isLeft(value)) return Either.left(value.left)
    return Either.right({
      value: value.right,
      json,
      content: contentOf(value.right, json, t),
      raw: text,
      repaired,
      normalized: json !== parsed.right.json
    })
  }
  // a span per reply checked when the tracer exports spans (with none, a span goes nowhere: about 35 operations
  // a call); without one the check is the pipeline's Either itself, in the step that looks at the tracer
  const enforce = <A>(text: string, t: Target<A>, options?: EnforceOptions): Effect.Effect<Enforced<A>, ConstraintFailure> =>
    Effect.withFiberRuntime((fiber) =>
      Tracing.exports(fiber.currentTracer)
        ? Tracing.withSpan("Constraint.enforce")(Effect.suspend(() => enforceEither(text, t, options)))
        : enforceEither(text, t, options)
    )

  const requestConstraints = <A>(t: Target<A>, grammar?: string): RequestConstraints =>
    grammar === undefined ? { schema: t.jsonSchema } : { schema: t.jsonSchema, grammar }

  return Constraint.of({
    target,
    toJsonSchema,
    fromJsonSchema,
    repair,
    normalizeEnums,
    validate,
    enforce,
    requestConstraints
  })
})

/** The live constraint layer. */
export const layer: Layer.Layer<Constraint> = Layer.effect(Constraint, make)
