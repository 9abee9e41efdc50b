/**
 * Layer 0: the JSON-schema subset of the documents.
 *
 * pagantic's `core.Schema` covers what structured output and tool parameters need:
 * objects with typed properties, arrays, enums and primitives. It travels as plain
 * JSON (over HTTP, in plans, in tool definitions), so it is a Schema that decodes
 * from JSON; an unknown `type` or a malformed field is a decode error, not a crash.
 * Effect Schemas are converted to this form with effect's own JSONSchema module
 * (see the Constraint service).
 */
import * as JSONSchema from "effect/JSONSchema"
import * as Schema from "effect/Schema"

export const JsonSchemaType = Schema.Literal("object", "array", "string", "number", "integer", "boolean", "null")
export type JsonSchemaType = typeof JsonSchemaType.Type

/** The documented subset: type, description, properties, required, enum, items, default. */
export interface JsonSchema {
  readonly type?: JsonSchemaType | undefined
  readonly description?: string | undefined
  readonly properties?: { readonly [key: string]: JsonSchema } | undefined
  readonly required?: ReadonlyArray<string> | undefined
  readonly enum?: ReadonlyArray<string> | undefined
  readonly items?: JsonSchema | undefined
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

/**
 * Derives the subset from an Effect Schema with effect's own JSONSchema module:
 * `$ref`s are inlined, literal unions become enums, what the subset lacks is dropped.
 */
export const fromSchema = (schema: Schema.Schema<any, any>): JsonSchema => {
  const json = JSONSchema.make(schema) as unknown as Record<string, unknown>
  const defs = (json.$defs ?? {}) as Record<string, unknown>
  const convert = (node: unknown): JsonSchema => {
    if (typeof node !== "object" || node === null) return {}
    let n = node as Record<string, unknown>
    if (typeof n.$ref === "string") {
      const target = defs[n.$ref.replace("#/$defs/", "")]
      n = { ...(target as Record<string, unknown>), ...(n.description === undefined ? {} : { description: n.description }) }
    }
    const out: { -readonly [K in keyof JsonSchema]: JsonSchema[K] } = {}
    if (Array.isArray(n.anyOf) && n.anyOf.every((m) => typeof m === "object" && m !== null && "const" in m)) {
      out.type = "string"
      out.enum = n.anyOf.map((m) => String((m as { const: unknown }).const))
    }
    if (Array.isArray(n.enum)) {
      out.type = "string"
      out.enum = n.enum.map(String)
    }
    if ("const" in n) {
      out.type = "string"
      out.enum = [String(n.const)]
    }
    const t = n.type
    if (t === "object" || t === "array" || t === "string" || t === "number" || t === "integer" || t === "boolean" || t === "null") {
      out.type = t
    }
    if (typeof n.description === "string") out.description = n.description
    if (typeof n.properties === "object" && n.properties !== null) {
      out.properties = Object.fromEntries(Object.entries(n.properties).map(([k, v]) => [k, convert(v)]))
    }
    if (Array.isArray(n.required)) out.required = n.required.map(String)
    if (n.items !== undefined && !Array.isArray(n.items)) out.items = convert(n.items)
    if ("default" in n) out.default = n.default
    return out
  }
  return convert(json)
}

