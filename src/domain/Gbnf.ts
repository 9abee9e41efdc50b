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
 * reports only to its log: no rules, no `root`, an undefined rule.
 *
 * Then the shape of the rules, which llama.cpp explores without bounds: left
 * recursion through rules that may match nothing (`root ::= a root "x" | "y"`
 * with `a ::= "q"?` passes llama.cpp's own test and then grows the process by
 * gigabytes), and rules that may begin in too many ways (sixteen rules
 * `r1 ::= r2 | r2 "a"` took llama.cpp 37 s, each one more doubles it). What passes may still be refused
 * by llama.cpp (a bad escape, a token it does not know): the check is a guard,
 * not a second parser.
 *
 * This module is the reader: one pass over the text that builds the shape of
 * the rules (`gbnf/Shape.ts`, where the checks on that shape live). The JSON
 * schema check is `gbnf/Schema.ts`; how problems are worded, `gbnf/Text.ts`.
 *
 * A problem is a short sentence in plain words with the place (line, column) and
 * an excerpt of at most a few dozen characters: never the grammar itself.
 */
import * as Either from "effect/Either"
import { problemOf, Shape, TERMINAL } from "./gbnf/Shape.js"
import { controlName, excerpt, isControl, isWordChar, position, sizeLabel, utf8Length } from "./gbnf/Text.js"

export { checkSchema, defaultSchemaLimits, type SchemaLimits } from "./gbnf/Schema.js"

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
  /**
   * Ways one rule may begin: its alternatives, times the ways of the rules they
   * begin with. llama.cpp keeps a parse stack per way and compares them pairwise,
   * so time grows with the square: 4,096 take 0.2 s, 16,384 about 2 s, and rules
   * whose two alternatives begin with the next rule double them per rule.
   */
  readonly maxStarts: number
  /** The largest count of one `{m,n}` repetition (llama.cpp refuses a minimum above 2,000). */
  readonly maxRepeatCount: number
  /**
   * The counts of all `{m,n}` repetitions added up: llama.cpp writes each one
   * out as that many copies or nested rules, so this bounds what it builds.
   */
  readonly maxRepeatTotal: number
}

/**
 * 64 KiB, 64 levels, 2,048 rules. Hand-written grammars are a few hundred bytes,
 * a few levels and a few dozen rules; the grammar node-llama-cpp generates for a
 * JSON schema nested 100 levels is 43 KB, 406 rules and 2 levels of parentheses.
 * llama.cpp crashes near 20,000 levels and passes 10,000; 64 KiB also bounds
 * chains of rules (llama.cpp recurses along them, and a chain of 100,000 crashes
 * it) to about 4,000, and what a rejected grammar writes to llama.cpp's log.
 * 4,096 starts per rule: an enum of 4,096 literals, compiled in 0.2 s.
 * Repetitions: 2,000 a count, llama.cpp's own bound; 8,192 in all.
 */
export const defaultLimits: Limits = {
  maxBytes: 64 * 1024,
  maxDepth: 64,
  maxRules: 2048,
  maxStarts: 4096,
  maxRepeatCount: 2000,
  maxRepeatTotal: 8192
}

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
  const { maxBytes, maxDepth, maxRepeatCount, maxRepeatTotal, maxRules, maxStarts } = { ...defaultLimits, ...limits }
  const bytes = utf8Length(grammar, maxBytes)
  if (bytes > maxBytes) {
    return Either.left(`the grammar is larger than ${sizeLabel(maxBytes)} (${sizeLabel(bytes)} or more)`)
  }

  const fail = (problem: string, index: number) =>
    Either.left(`the grammar ${problem} ${position(grammar, index)}: ${excerpt(grammar, index)}`)

  const shape = new Shape()
  const defined = new Set<string>()
  // Each referenced name once, with where it was first seen, to name the first undefined one.
  const referenced = new Map<string, number>()
  // The rules being written: the named rule, then one per open parenthesis.
  const open: Array<number> = []
  const sequence = (): Array<number> | undefined => {
    const rule = open.at(-1)
    return rule === undefined ? undefined : shape.alternatives[rule]!.at(-1)
  }
  // Whether a repetition has something to repeat: an element just before it in its sequence.
  let repeatable = false
  const push = (element: number) => {
    sequence()?.push(element)
    repeatable = true
  }
  const synthetic = (...alternatives: Array<Array<number>>) => {
    const rule = shape.add(shape.writtenIn[open[0]!])
    shape.alternatives[rule]!.push(...alternatives)
    return rule
  }
  /**
   * The last element x repeated as llama.cpp writes it: `min` copies (two stand
   * for any more), then `r ::= x r |` without a maximum, or nested optional rules
   * `r ::= x r' |` up to it (two levels stand for any more).
   */
  const repeat = (min: number, max: number | undefined) => {
    const current = sequence()
    const element = current?.pop()
    if (current === undefined || element === undefined) return
    for (let k = 0; k < Math.min(min, 2); k++) current.push(element)
    if (max === undefined) {
      const rule = shape.add(shape.writtenIn[open[0]!])
      shape.alternatives[rule]!.push([element, rule], [])
      current.push(rule)
    } else if (max > min) {
      const inner = max - min >= 2 ? synthetic([element], []) : undefined
      current.push(synthetic(inner === undefined ? [element] : [element, inner], []))
    }
  }

  let rules = 0
  let depth = 0
  let state: State = "rule"
  let opened = 0
  let repetition: Array<string> = []
  let repeated = 0
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
        } else if (code === (state === "literal" ? 0x22 : 0x5d)) {
          // "" matches nothing: no element.
          if (state === "class" || i > opened + 1) push(TERMINAL)
          else repeatable = false
          state = "rule"
        }
        continue
      case "comment":
        if (code === 0x0a || code === 0x0d) state = "rule"
        continue
      case "braces":
        if (code === 0x7d) {
          state = "rule"
          // {m}, {m,}, {m,n}, {,n}
          const [min, max] = repetition.map((digits) => (digits === "" ? undefined : Number(digits)))
          const count = Math.max(min ?? 0, max ?? 0)
          if (count > maxRepeatCount) {
            return fail(`repeats an item more than ${maxRepeatCount.toLocaleString("en-US")} times`, opened)
          }
          repeated += count
          if (repeated > maxRepeatTotal) {
            return fail(`repeats items more than ${maxRepeatTotal.toLocaleString("en-US")} times in all`, opened)
          }
          repeat(min ?? 0, repetition.length === 1 ? min ?? 0 : max)
        } else if (code >= 0x30 && code <= 0x39) {
          repetition[repetition.length - 1] += grammar[i]!
        } else if (code === 0x2c) repetition.push("")
        else if (code !== 0x20 && code !== 0x09) {
          return fail(`has ${isControl(code) ? controlName(code) : "a character that is no digit"} inside a repetition`, i)
        }
        continue
      case "token":
        if (code === 0x3e) {
          state = "rule"
          push(TERMINAL)
        } else if (code === 0x0a || code === 0x0d) return fail("has a token '<...>' that is not closed on its line", opened)
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
        if (!repeatable) return fail("repeats nothing (a repetition needs an item before it)", i)
        repetition = [""]
        continue
      case 0x3c: // <
        state = "token"
        opened = i
        continue
      case 0x2e: // .
        push(TERMINAL)
        continue
      case 0x7c: // |
        if (open.length > 0) shape.alternatives[open.at(-1)!]!.push([])
        repeatable = false
        continue
      case 0x3f: // ?
      case 0x2a: // *
      case 0x2b: // +
        if (!repeatable) return fail("repeats nothing (a repetition needs an item before it)", i)
    }
    switch (code) {
      case 0x3f: // ?
        repeat(0, 1)
        continue
      case 0x2a: // *
        repeat(0, undefined)
        continue
      case 0x2b: // +
        repeat(1, undefined)
        continue
      case 0x28: { // (
        depth++
        if (depth > maxDepth) return fail(`nests parentheses more than ${maxDepth} deep`, i)
        openParens.push(i)
        if (open.length > 0) {
          const group = shape.add(shape.writtenIn[open[0]!])
          shape.alternatives[group]!.push([])
          push(group)
          open.push(group)
        }
        repeatable = false
        continue
      }
      case 0x29: // )
        if (depth === 0) return fail("closes a parenthesis that was never opened", i)
        depth--
        openParens.pop()
        if (open.length > 1) open.pop()
        repeatable = true
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
      const rule = shape.rule(name)
      shape.alternatives[rule]!.push([])
      open.length = 0
      open.push(rule)
      repeatable = false
      i = next + 2
    } else {
      if (!referenced.has(name)) referenced.set(name, start)
      push(shape.rule(name))
    }
  }

  if (state !== "rule" && state !== "comment") return fail(unclosed[state], opened)
  if (depth > 0) return fail("leaves a parenthesis open", openParens.at(-1)!)
  if (rules === 0) return Either.left("the grammar defines no rules (expected lines such as: root ::= \"yes\" | \"no\")")
  if (!defined.has("root")) return Either.left("the grammar has no root rule (root ::= ...)")
  for (const [name, index] of referenced) {
    if (!defined.has(name)) return fail(`uses the rule ${excerpt(name, 0)}, which it does not define,`, index)
  }

  const problem = problemOf(shape, maxStarts)
  if (problem !== undefined) return Either.left(problem)
  return Either.right(grammar)
}
