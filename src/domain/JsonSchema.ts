/**
 * Layer 0: the JSON-schema subset pagantic understands.
 *
 * pagantic's `core.Schema` covers what structured output and tool parameters need:
 * objects with typed properties, arrays, enums and primitives. It travels as plain
 * JSON (over HTTP, in plans, in tool definitions), so it is a Schema that decodes
 * from JSON; an unknown `type` or a malformed field is a decode error, not a crash.
 * Effect Schemas are converted to this form with effect's own JSONSchema module
 * (see the Constraint service).
 */
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as Schema from "effect/Schema"

export const JsonSchemaType = Schema.Literal("object", "array", "string", "number", "integer", "boolean", "null")
export type JsonSchemaType = typeof JsonSchemaType.Type

/**
 * The documented subset: type, description, properties, required, enum, items,
 * anyOf, default. `anyOf` is a value of one of several shapes (a tagged union of
 * objects, a string or a number); engines that constrain decoding write one of
 * them.
 */
export interface JsonSchema {
  readonly type?: JsonSchemaType | undefined
  readonly description?: string | undefined
  readonly properties?: { readonly [key: string]: JsonSchema } | undefined
  readonly required?: ReadonlyArray<string> | undefined
  readonly enum?: ReadonlyArray<string> | undefined
  readonly items?: JsonSchema | undefined
  readonly anyOf?: ReadonlyArray<JsonSchema> | undefined
  readonly default?: unknown
}

export const JsonSchema: Schema.Schema<JsonSchema> = Schema.Struct({
  type: Schema.optional(JsonSchemaType),
  description: Schema.optional(Schema.String),
  properties: Schema.optional(
    Schema.Record({ key: Schema.String, value: Schema.suspend((): Schema.Schema<JsonSchema> => JsonSchema) })
  ),
  required: Schema.optional(Schema.Array(Schema.String)),
  enum: Schema.optional(Schema.Array(Schema.String)),
  items: Schema.optional(Schema.suspend((): Schema.Schema<JsonSchema> => JsonSchema)),
  anyOf: Schema.optional(
    Schema.Array(Schema.suspend((): Schema.Schema<JsonSchema> => JsonSchema)).pipe(Schema.minItems(1))
  ),
  default: Schema.optional(Schema.Unknown)
}).annotations({ identifier: "JsonSchema", description: "the JSON-schema subset of pagantic" })

/** Constructors for readable schema literals in code. */
export const object = (
  properties: { readonly [key: string]: JsonSchema },
  required: ReadonlyArray<string> = Object.keys(properties),
  description?: string
): JsonSchema => ({ type: "object", properties, required, ...(description === undefined ? {} : { description }) })

export const string = (description?: string): JsonSchema => ({
  type: "string",
  ...(description === undefined ? {} : { description })
})

export const number = (description?: string): JsonSchema => ({
  type: "number",
  ...(description === undefined ? {} : { description })
})

export const integer = (description?: string): JsonSchema => ({
  type: "integer",
  ...(description === undefined ? {} : { description })
})

export const boolean = (description?: string): JsonSchema => ({
  type: "boolean",
  ...(description === undefined ? {} : { description })
})

export const enumOf = (values: ReadonlyArray<string>, description?: string): JsonSchema => ({
  type: "string",
  enum: values,
  ...(description === undefined ? {} : { description })
})

export const array = (items: JsonSchema, description?: string): JsonSchema => ({
  type: "array",
  items,
  ...(description === undefined ? {} : { description })
})

type Json7 = { readonly [key: string]: unknown }

const subsetTypes: ReadonlySet<string> = new Set(["object", "array", "string", "number", "integer", "boolean", "null"])

const asRecord = (u: unknown): Json7 | undefined =>
  typeof u === "object" && u !== null && !Array.isArray(u) ? (u as Json7) : undefined

const stringEnum = (node: Json7): ReadonlyArray<string> | undefined => {
  if (typeof node.const === "string") return [node.const]
  if (Array.isArray(node.enum) && node.enum.every((m): m is string => typeof m === "string")) return node.enum
  return undefined
}

/** A schema that constrains nothing (`{}`, or only a description or default). */
const isAnything = (schema: JsonSchema): boolean =>
  schema.type === undefined && schema.properties === undefined && schema.enum === undefined &&
  schema.items === undefined && schema.anyOf === undefined

const isNullNode = (node: Json7): boolean => node.type === "null" || (Array.isArray(node.enum) && node.enum.length === 1 && node.enum[0] === null)

const convert = (node: Json7, defs: Json7, seen: ReadonlySet<string>): JsonSchema => {
  const extras: { description?: string; default?: unknown } = {}
  if (typeof node.description === "string") extras.description = node.description
  if ("default" in node) extras.default = node.default

  if (typeof node.$ref === "string") {
    const name = node.$ref.replace(/^#\/\$defs\//, "")
    const def = asRecord(defs[name])
    // A recursive schema cannot be written in the subset: stop at the cycle.
    if (def === undefined || seen.has(name)) return { ...extras }
    return { ...convert(def, defs, new Set([...seen, name])), ...extras }
  }

  const union = Array.isArray(node.anyOf) ? node.anyOf : Array.isArray(node.oneOf) ? node.oneOf : undefined
  if (union !== undefined) {
    const members = union.map(asRecord).filter((m): m is Json7 => m !== undefined && !isNullNode(m))
    if (members.length === 1) return { ...convert(members[0]!, defs, seen), ...extras }
    const converted = members.map((m) => convert(m, defs, seen))
    if (converted.length > 0 && converted.every((m) => m.enum !== undefined)) {
      return { type: "string", enum: Array.from(new Set(converted.flatMap((m) => m.enum ?? []))), ...extras }
    }
    // A member the subset cannot describe ({}) admits anything: so does the union.
    if (converted.length === 0 || converted.some(isAnything)) return { ...extras }
    return { anyOf: converted, ...extras }
  }

  const out: {
    type?: JsonSchemaType
    properties?: Record<string, JsonSchema>
    required?: ReadonlyArray<string>
    enum?: ReadonlyArray<string>
    items?: JsonSchema
  } = {}
  const types = (Array.isArray(node.type) ? node.type : [node.type]).filter(
    (t): t is JsonSchemaType => typeof t === "string" && subsetTypes.has(t)
  )
  const nonNull = types.filter((t) => t !== "null")
  if (nonNull.length === 1) out.type = nonNull[0]!
  else if (types.length === 1) out.type = types[0]!
  const members = stringEnum(node)
  if (members !== undefined) {
    out.enum = members
    if (out.type === undefined) out.type = "string"
  }
  const properties = asRecord(node.properties)
  if (properties !== undefined && Object.keys(properties).length > 0) {
    const converted: Record<string, JsonSchema> = {}
    for (const [key, sub] of Object.entries(properties)) {
      const subNode = asRecord(sub)
      converted[key] = subNode === undefined ? {} : convert(subNode, defs, seen)
    }
    out.properties = converted
  }
  if (Array.isArray(node.required) && node.required.length > 0) {
    out.required = node.required.filter((r): r is string => typeof r === "string")
  }
  const items = asRecord(node.items)
  if (items !== undefined) out.items = convert(items, defs, seen)
  return { ...out, ...extras }
}

/**
 * Derives the subset from an Effect Schema with effect's own JSONSchema module:
 * `$ref`s are inlined (a recursive schema stops at the cycle), literal unions
 * become string enums, other unions `anyOf` (a union with a member the subset
 * cannot describe admits anything), nullable members are dropped, what the
 * subset lacks is dropped. A schema JSONSchema cannot describe gives `{}`: the engine then gets no
 * schema, and validation still runs through the Effect Schema itself.
 */
export const fromSchema = <A, I, R>(schema: Schema.Schema<A, I, R>): JsonSchema => {
  // JSONSchema.make throws on schemas it cannot describe; the engine then gets no schema,
  // and validation still runs through the Effect Schema itself.
  const made = Either.try(() => JSONSchema.make(schema as Schema.Schema<A, I, never>) as unknown)
  if (Either.isLeft(made)) return {}
  const root = asRecord(made.right) ?? {}
  return convert(root, asRecord(root.$defs) ?? {}, new Set())
}

// ---------------------------------------------------------------------------
// JSON Schema subset -> Effect Schema
// ---------------------------------------------------------------------------

const enumSchema = (members: ReadonlyArray<string>): Schema.Schema<string> => {
  const allowed = members.map((m) => JSON.stringify(m)).join(" | ")
  return Schema.String.pipe(
    Schema.filter((s) => members.includes(s) || `Expected one of ${allowed}, actual ${JSON.stringify(s)}`)
  )
}

/** Any JSON value; only absence (undefined, which JSON cannot hold) is rejected. */
const present = Schema.Unknown.pipe(Schema.filter((u) => u !== undefined))

const impliedType = (schema: JsonSchema): JsonSchemaType | undefined => {
  if (schema.type !== undefined) return schema.type
  if (schema.properties !== undefined) return "object"
  if (schema.items !== undefined) return "array"
  return undefined
}

/**
 * The Effect Schema a JSON Schema of the subset describes: the one validator for
 * raw schemas (from HTTP requests). Objects keep properties they do not name;
 * enums are string literals; `description` becomes an annotation.
 */
export const toEffectSchema = (schema: JsonSchema): Schema.Schema<unknown> => {
  const base = ((): Schema.Schema<any> => {
    if (schema.enum !== undefined) return enumSchema(schema.enum)
    if (schema.anyOf !== undefined && schema.anyOf.length > 0) {
      const members = schema.anyOf.map(toEffectSchema)
      return members.length === 1 ? members[0]! : Schema.Union(...members)
    }
    switch (impliedType(schema)) {
      case "object": {
        const required = new Set(schema.required ?? [])
        const fields: Record<string, Schema.Schema<any> | Schema.PropertySignature.Any> = {}
        for (const [key, sub] of Object.entries(schema.properties ?? {})) {
          const field = toEffectSchema(sub)
          fields[key] = required.has(key) ? field : Schema.optional(field)
        }
        for (const key of required) {
          if (!(key in fields)) fields[key] = present
        }
        // JSON Schema allows properties it does not name; keep them.
        return Schema.Struct(fields as Record<string, typeof Schema.Unknown>, Schema.Record({ key: Schema.String, value: Schema.Unknown }))
      }
      case "array":
        return Schema.Array(schema.items === undefined ? Schema.Unknown : toEffectSchema(schema.items))
      case "string":
        return Schema.String
      case "number":
        return Schema.Number
      case "integer":
        return Schema.Int
      case "boolean":
        return Schema.Boolean
      case "null":
        return Schema.Null
      case undefined:
        return Schema.Unknown
    }
  })()
  return schema.description === undefined ? base : base.annotations({ description: schema.description })
}
