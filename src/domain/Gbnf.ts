/**
 * A pre-check of GBNF grammars (llama.cpp's grammar format) and of the JSON
 * schemas grammars are generated from, run before anything native sees them.
 *
 * llama.cpp parses a grammar with a recursive descent parser on the native stack:
 * parentheses nested about 20,000 deep overflow it and kill the process, a NUL
 * ends the C string early, and every rejected grammar is printed whole to stderr.
 * So a grammar from outside is scanned here first: one pass, no recursion, linear
 * in its length, bounded in size, nesting and rule count, with quoted literals,
 * character classes, comments, `{m,n}` repetitions and `<...>` tokens honoured
 * (a `(` inside `"("` is not nesting). It also names the mistakes llama.cpp
 * reports only to its log: no rules, no `root`, an undefined rule. What passes
 * may still be refused by llama.cpp (left recursion, a bad escape): the check is a
 * guard, not a second parser.
 *
 * A problem is a short sentence in plain words with the place (line, column) and
 * an excerpt of at most a few dozen characters: never the grammar itself.
 */
import * as Either from "effect/Either"

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

/** Bounds on a grammar text. */
export interface Limits {
  /** UTF-8 bytes of the text. */
  readonly maxBytes: number
  /** Parentheses nested inside each other. */
  readonly maxDepth: number
  /** Rule definitions (`name ::= ...`). */
  readonly maxRules: number
}

/**
 * 64 KiB, 64 levels, 2,048 rules. Hand-written grammars are a few hundred bytes,
 * a few levels and a few dozen rules; the grammar node-llama-cpp generates for a
 * JSON schema nested 100 levels is 43 KB, 406 rules and 2 levels of parentheses.
 * llama.cpp crashes near 20,000 levels and passes 10,000; 64 KiB also bounds
 * chains of rules (llama.cpp recurses along them, and a chain of 100,000 crashes
 * it) to about 4,000, and what a rejected grammar writes to llama.cpp's log.
 */
export const defaultLimits: Limits = { maxBytes: 64 * 1024, maxDepth: 64, maxRules: 2048 }

/** Bounds on a JSON schema that a grammar is generated from. */
export interface SchemaLimits {
  /** UTF-8 bytes of its JSON text (approximately: escapes are not counted). */
  readonly maxBytes: number
  /** Objects and arrays nested inside each other (a property of an object is two levels: `properties`, then the property). */
  readonly maxDepth: number
}

/**
 * 64 KiB and 64 levels (about 30 levels of nested objects): the grammar generated
 * from such a schema stays well inside `defaultLimits`, and generating it takes
 * milliseconds.
 */
export const defaultSchemaLimits: SchemaLimits = { maxBytes: 64 * 1024, maxDepth: 64 }

// ---------------------------------------------------------------------------
// Problems
// ---------------------------------------------------------------------------

const EXCERPT_CHARS = 24

/** At most EXCERPT_CHARS characters from `index`, quoted and escaped (control characters stay visible). */
const excerpt = (text: string, index: number): string => {
  const end = Math.min(text.length, index + EXCERPT_CHARS)
  return JSON.stringify(text.slice(index, end)) + (end < text.length ? "..." : "")
}

const sizeLabel = (bytes: number): string =>
  bytes >= 1024 * 1024
    ? `${(bytes / (1024 * 1024)).toFixed(1)} MiB`
    : bytes >= 1024
    ? `${(bytes / 1024).toFixed(1)} KiB`
    : `${bytes} bytes`

/** UTF-8 length of a string, stopping as soon as it passes `max` (then it returns a value above `max`). */
const utf8Length = (text: string, max: number): number => {
  if (text.length > max) return text.length
  let bytes = 0
  for (let i = 0; i < text.length && bytes <= max; i++) {
    const code = text.charCodeAt(i)
    if (code < 0x80) bytes += 1
    else if (code < 0x800) bytes += 2
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      bytes += 4
      i++
    } else bytes += 3
  }
  return bytes
}

/** "at line L, column C" of a UTF-16 index (counted only when a problem is reported). */
const position = (text: string, index: number): string => {
  let line = 1
  let lineStart = 0
  for (let i = 0; i < index; i++) {
    if (text.charCodeAt(i) === 0x0a) {
      line++
      lineStart = i + 1
    }
  }
  return `at line ${line}, column ${index - lineStart + 1}`
}

const isWordChar = (code: number): boolean =>
  (code >= 0x61 && code <= 0x7a) || (code >= 0x41 && code <= 0x5a) || (code >= 0x30 && code <= 0x39) || code === 0x2d

/** C0 controls but tab, line feed and carriage return; and DEL. */
const isControl = (code: number): boolean =>
  (code < 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) || code === 0x7f

const controlName = (code: number): string =>
  code === 0 ? "a NUL character" : `the control character U+${code.toString(16).toUpperCase().padStart(4, "0")}`

// ---------------------------------------------------------------------------
// Grammars
// ---------------------------------------------------------------------------

type State = "rule" | "literal" | "class" | "comment" | "braces" | "token"

const unclosed: Record<Exclude<State, "rule" | "comment">, string> = {
  literal: "does not close the quoted literal that starts",
  class: "does not close the character class that starts",
  braces: "does not close the repetition that starts",
  token: "does not close the token that starts"
}

/**
 * Checks a GBNF grammar against `limits` (merged over `defaultLimits`): the
 * grammar itself when it passes, else a short problem in plain words.
 */
export const check = (grammar: string, limits: Partial<Limits> = {}): Either.Either<string, string> => {
  const { maxBytes, maxDepth, maxRules } = { ...defaultLimits, ...limits }
  const bytes = utf8Length(grammar, maxBytes)
  if (bytes > maxBytes) {
    return Either.left(`the grammar is larger than ${sizeLabel(maxBytes)} (${sizeLabel(bytes)} or more)`)
  }

  const fail = (problem: string, index: number) =>
    Either.left(`the grammar ${problem} ${position(grammar, index)}: ${excerpt(grammar, index)}`)

  const defined = new Set<string>()
  // Each referenced name once, with where it was first seen, to name the first undefined one.
  const referenced = new Map<string, number>()
  let rules = 0
  let depth = 0
  let state: State = "rule"
  let opened = 0
  const openParens: Array<number> = []

  for (let i = 0; i < grammar.length; i++) {
    const code = grammar.charCodeAt(i)
    if (code === 0) return fail("contains a NUL character", i)
    switch (state) {
      case "literal":
      case "class":
        if (code === 0x5c) {
          // An escape: the next character is part of the literal, whatever it is.
          if (grammar.charCodeAt(i + 1) === 0) return fail("contains a NUL character", i + 1)
          i++
        } else if (code === (state === "literal" ? 0x22 : 0x5d)) state = "rule"
        continue
      case "comment":
        if (code === 0x0a || code === 0x0d) state = "rule"
        continue
      case "braces":
        if (code === 0x7d) state = "rule"
        else if (!(code >= 0x30 && code <= 0x39) && code !== 0x2c && code !== 0x20 && code !== 0x09) {
          return fail(`has ${isControl(code) ? controlName(code) : "a character that is no digit"} inside a repetition`, i)
        }
        continue
      case "token":
        if (code === 0x3e) state = "rule"
        else if (code === 0x0a || code === 0x0d) return fail("has a token '<...>' that is not closed on its line", opened)
        continue
      case "rule":
        break
    }
    switch (code) {
      case 0x22: // "
        state = "literal"
        opened = i
        continue
      case 0x5b: // [
        state = "class"
        opened = i
        continue
      case 0x23: // #
        state = "comment"
        continue
      case 0x7b: // {
        state = "braces"
        opened = i
        continue
      case 0x3c: // <
        state = "token"
        opened = i
        continue
      case 0x28: // (
        depth++
        if (depth > maxDepth) return fail(`nests parentheses more than ${maxDepth} deep`, i)
        openParens.push(i)
        continue
      case 0x29: // )
        if (depth === 0) return fail("closes a parenthesis that was never opened", i)
        depth--
        openParens.pop()
        continue
    }
    if (isControl(code)) return fail(`contains ${controlName(code)} outside a quoted literal`, i)
    if (!isWordChar(code)) continue

    // A name: a definition when `::=` follows on the same line, else a reference.
    const start = i
    while (i + 1 < grammar.length && isWordChar(grammar.charCodeAt(i + 1))) i++
    const name = grammar.slice(start, i + 1)
    let next = i + 1
    while (grammar.charCodeAt(next) === 0x20 || grammar.charCodeAt(next) === 0x09) next++
    if (grammar.startsWith("::=", next)) {
      if (depth > 0) return fail("defines a rule inside parentheses", start)
      if (!defined.has(name)) {
        rules++
        if (rules > maxRules) return fail(`defines more than ${maxRules} rules`, start)
        defined.add(name)
      }
      i = next + 2
    } else if (!referenced.has(name)) {
      referenced.set(name, start)
    }
  }

  if (state !== "rule" && state !== "comment") return fail(unclosed[state], opened)
  if (depth > 0) return fail("leaves a parenthesis open", openParens.at(-1)!)
  if (rules === 0) return Either.left("the grammar defines no rules (expected lines such as: root ::= \"yes\" | \"no\")")
  if (!defined.has("root")) return Either.left("the grammar has no root rule (root ::= ...)")
  for (const [name, index] of referenced) {
    if (!defined.has(name)) return fail(`uses the rule ${excerpt(name, 0)}, which it does not define,`, index)
  }
  return Either.right(grammar)
}

// ---------------------------------------------------------------------------
// JSON schemas
// ---------------------------------------------------------------------------

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
