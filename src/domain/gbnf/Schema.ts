/**
 * A pre-check of the JSON schemas grammars are generated from: size, nesting and
 * control characters, without recursion, before a schema reaches the generator.
 */
import * as Either from "effect/Either"
import { controlName, excerpt, sizeLabel, utf8Length } from "./Text.js"

/** Bounds on a JSON schema that a grammar is generated from. */
export interface SchemaLimits {
  /** UTF-8 bytes of its JSON text (approximately: escapes are not counted). */
  readonly maxBytes: number
  /** Objects and arrays nested inside each other (a property of an object is two levels: `properties`, then the property). */
  readonly maxDepth: number
}

/**
 * 64 KiB and 64 levels (about 30 levels of nested objects): the grammar generated
 * from such a schema stays well inside `defaultLimits`. The size also bounds
 * enums: about 7,000 short values, whose grammar llama.cpp compiles in 0.17 s.
 */
export const defaultSchemaLimits: SchemaLimits = { maxBytes: 64 * 1024, maxDepth: 64 }

const stringBytes = (text: string, max: number): number => utf8Length(text, max) + 2

/**
 * Checks a JSON schema (any JSON value) against `limits` (merged over
 * `defaultSchemaLimits`) without recursion: its size, its nesting, and no control
 * character but tab, line feed and carriage return in any string or key. The
 * schema itself when it passes, else a short problem in plain words.
 */
export const checkSchema = <A>(schema: A, limits: Partial<SchemaLimits> = {}): Either.Either<A, string> => {
  const { maxBytes, maxDepth } = { ...defaultSchemaLimits, ...limits }
  const stack: Array<{ readonly value: unknown; readonly depth: number }> = [{ value: schema, depth: 0 }]
  let bytes = 0
  // NUL ends llama.cpp's copy of the grammar; node-llama-cpp escapes tab, line feed
  // and carriage return in literals but no other control character, so the model's
  // JSON would carry it raw: invalid JSON, a schema no answer can satisfy.
  const control = (text: string): string | undefined => {
    for (let i = 0; i < text.length; i++) {
      const code = text.charCodeAt(i)
      if (code < 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) return controlName(code)
    }
    return undefined
  }
  while (stack.length > 0) {
    const { depth, value } = stack.pop()!
    if (typeof value === "string") {
      const found = control(value)
      if (found !== undefined) return Either.left(`the schema has ${found} in the string ${excerpt(value, 0)}`)
      bytes += stringBytes(value, maxBytes)
    } else if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") {
      bytes += String(value).length
    } else if (value === null) {
      bytes += 4
    } else if (typeof value === "object") {
      if (depth >= maxDepth) return Either.left(`the schema is nested more than ${maxDepth} levels deep`)
      bytes += 2
      if (Array.isArray(value)) {
        for (const item of value) {
          bytes += 1
          stack.push({ value: item, depth: depth + 1 })
        }
      } else {
        for (const [key, item] of Object.entries(value)) {
          const found = control(key)
          if (found !== undefined) return Either.left(`the schema has ${found} in the key ${excerpt(key, 0)}`)
          bytes += stringBytes(key, maxBytes) + 2
          stack.push({ value: item, depth: depth + 1 })
        }
      }
    }
    if (bytes > maxBytes) {
      return Either.left(`the schema is larger than ${sizeLabel(maxBytes)} as JSON (${sizeLabel(bytes)} or more)`)
    }
  }
  return Either.right(schema)
}
