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
 * One concept in one module on purpose (it is longer than most): the reader, the
 * model of the rules it builds and the checks on that model share their state.
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
  /**
   * Ways one rule may begin: its alternatives, times the ways of the rules they
   * begin with. llama.cpp keeps a parse stack per way and compares them pairwise,
   * so time grows with the square: 4,096 take 0.2 s, 16,384 about 2 s, and rules
   * whose two alternatives begin with the next rule double them per rule.
   */
  readonly maxStarts: number
}

/**
 * 64 KiB, 64 levels, 2,048 rules. Hand-written grammars are a few hundred bytes,
 * a few levels and a few dozen rules; the grammar node-llama-cpp generates for a
 * JSON schema nested 100 levels is 43 KB, 406 rules and 2 levels of parentheses.
 * llama.cpp crashes near 20,000 levels and passes 10,000; 64 KiB also bounds
 * chains of rules (llama.cpp recurses along them, and a chain of 100,000 crashes
 * it) to about 4,000, and what a rejected grammar writes to llama.cpp's log.
 * 4,096 starts per rule: an enum of 4,096 literals, compiled in 0.2 s.
 */
export const defaultLimits: Limits = { maxBytes: 64 * 1024, maxDepth: 64, maxRules: 2048, maxStarts: 4096 }

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
// Scanning
// ---------------------------------------------------------------------------

type State = "rule" | "literal" | "class" | "comment" | "braces" | "token"

const unclosed: Record<Exclude<State, "rule" | "comment">, string> = {
  literal: "does not close the quoted literal that starts",
  class: "does not close the character class that starts",
  braces: "does not close the repetition that starts",
  token: "does not close the token that starts"
}

// ---------------------------------------------------------------------------
// The shape of the rules
// ---------------------------------------------------------------------------

/** An element of a sequence: a terminal, or the index of a rule. */
const TERMINAL = -1

/**
 * Rules as llama.cpp builds them: each named rule, and one more per group and
 * per repetition (`x*` is `r ::= x r |`), as alternatives of elements.
 */
class Shape {
  readonly alternatives: Array<Array<Array<number>>> = []
  /** The named rule each rule was written in (itself for a named rule). */
  readonly writtenIn: Array<number> = []
  readonly names: Array<string | undefined> = []
  private readonly ids = new Map<string, number>()

  rule(name: string): number {
    const known = this.ids.get(name)
    if (known !== undefined) return known
    const id = this.add(undefined)
    this.names[id] = name
    this.writtenIn[id] = id
    this.ids.set(name, id)
    return id
  }

  add(writtenIn: number | undefined): number {
    const id = this.alternatives.length
    this.alternatives.push([])
    this.names.push(undefined)
    this.writtenIn.push(writtenIn ?? id)
    return id
  }
}

/** Which rules may match nothing: a worklist over alternatives, linear in the grammar. */
const nullableRules = (shape: Shape): Array<boolean> => {
  const nullable = shape.alternatives.map(() => false)
  const owners: Array<number> = []
  const remaining: Array<number> = []
  const uses: Array<Array<number>> = shape.alternatives.map(() => [])
  const queue: Array<number> = []
  shape.alternatives.forEach((alternatives, rule) => {
    for (const sequence of alternatives) {
      const alternative = owners.length
      owners.push(rule)
      let refs = 0
      for (const element of sequence) {
        if (element === TERMINAL) {
          refs = -1
          break
        }
        refs++
      }
      remaining.push(refs)
      if (refs === 0) queue.push(rule)
      else if (refs > 0) for (const element of sequence) uses[element]!.push(alternative)
    }
  })
  while (queue.length > 0) {
    const rule = queue.pop()!
    if (nullable[rule]) continue
    nullable[rule] = true
    for (const alternative of uses[rule]!) {
      remaining[alternative]!--
      if (remaining[alternative] === 0) queue.push(owners[alternative]!)
    }
  }
  return nullable
}

/** A rule a rule may begin with, and whether anything follows it in that alternative. */
interface LeftEdge {
  readonly target: number
  readonly tail: boolean
}

/** The rules each rule may begin with: those at the start of an alternative, or after rules that may match nothing. */
const leftEdges = (shape: Shape, nullable: ReadonlyArray<boolean>): Array<Array<LeftEdge>> =>
  shape.alternatives.map((alternatives) => {
    const edges: Array<LeftEdge> = []
    for (const sequence of alternatives) {
      for (let i = 0; i < sequence.length; i++) {
        const element = sequence[i]!
        if (element === TERMINAL) break
        edges.push({ target: element, tail: i === sequence.length - 1 })
        if (!nullable[element]) break
      }
    }
    return edges
  })

/**
 * The strongly connected components of the left edges (Tarjan's algorithm with
 * an explicit stack), each after every component it may begin with.
 */
const leftComponents = (edges: ReadonlyArray<ReadonlyArray<LeftEdge>>): Array<Array<number>> => {
  const index = edges.map(() => -1)
  const low = edges.map(() => 0)
  const onStack = edges.map(() => false)
  const stack: Array<number> = []
  const components: Array<Array<number>> = []
  let counter = 0
  for (let root = 0; root < edges.length; root++) {
    if (index[root] !== -1) continue
    const work: Array<[number, number]> = [[root, 0]]
    while (work.length > 0) {
      const frame = work[work.length - 1]!
      const [rule, next] = frame
      if (next === 0 && index[rule] === -1) {
        index[rule] = low[rule] = counter++
        stack.push(rule)
        onStack[rule] = true
      }
      if (next < edges[rule]!.length) {
        frame[1] = next + 1
        const target = edges[rule]![next]!.target
        if (index[target] === -1) work.push([target, 0])
        else if (onStack[target]) low[rule] = Math.min(low[rule]!, index[target]!)
        continue
      }
      work.pop()
      const parent = work.at(-1)
      if (parent !== undefined) low[parent[0]] = Math.min(low[parent[0]]!, low[rule]!)
      if (low[rule] === index[rule]) {
        const component: Array<number> = []
        let member: number
        do {
          member = stack.pop()!
          onStack[member] = false
          component.push(member)
        } while (member !== rule)
        components.push(component)
      }
    }
  }
  return components
}

/**
 * A rule that may begin with itself with something left to match after it: each
 * round of llama.cpp's expansion then pushes that rest again, without end. (A
 * repetition such as `("a"?)*` loops back only at its end, which llama.cpp
 * notices.) Any edge inside a component lies on a cycle.
 */
const growingRecursion = (
  edges: ReadonlyArray<ReadonlyArray<LeftEdge>>,
  components: ReadonlyArray<ReadonlyArray<number>>
): number | undefined => {
  const componentOf = edges.map(() => 0)
  components.forEach((component, c) => {
    for (const rule of component) componentOf[rule] = c
  })
  for (let rule = 0; rule < edges.length; rule++) {
    for (const edge of edges[rule]!) {
      if (!edge.tail && componentOf[edge.target] === componentOf[rule]) return rule
    }
  }
  return undefined
}

/**
 * A rule on a cycle of left edges, if any: llama.cpp's own test for left
 * recursion, run on edges that pass over a rule only when an alternative of it
 * is empty as written (not through other rules that may match nothing).
 */
const cyclic = (edges: ReadonlyArray<ReadonlyArray<LeftEdge>>, components: ReadonlyArray<ReadonlyArray<number>>): number | undefined => {
  for (const component of components) {
    if (component.length > 1) return component[0]
    const rule = component[0]!
    if (edges[rule]!.some((edge) => edge.target === rule)) return rule
  }
  return undefined
}

/**
 * A rule whose ways to begin pass `max`, if any. Components come after those they
 * may begin with, so each count uses final counts; a rule of the same component
 * adds no new way (llama.cpp's expansion returns to a stack it has seen).
 */
const tooManyStarts = (
  shape: Shape,
  nullable: ReadonlyArray<boolean>,
  components: ReadonlyArray<ReadonlyArray<number>>,
  max: number
): number | undefined => {
  const starts = shape.alternatives.map(() => 0)
  const componentOf = shape.alternatives.map(() => -1)
  for (let c = 0; c < components.length; c++) {
    for (const rule of components[c]!) componentOf[rule] = c
    for (const rule of components[c]!) {
      let count = 0
      for (const sequence of shape.alternatives[rule]!) {
        let ended = false
        for (const element of sequence) {
          if (element === TERMINAL) count += 1
          else if (componentOf[element] !== c) count += starts[element]!
          if (element === TERMINAL || !nullable[element]) {
            ended = true
            break
          }
        }
        if (!ended) count++
        if (count > max) return rule
      }
      starts[rule] = count
    }
  }
  return undefined
}

// ---------------------------------------------------------------------------
// Grammars
// ---------------------------------------------------------------------------

/**
 * Checks a GBNF grammar against `limits` (merged over `defaultLimits`): the
 * grammar itself when it passes, else a short problem in plain words.
 */
export const check = (grammar: string, limits: Partial<Limits> = {}): Either.Either<string, string> => {
  const { maxBytes, maxDepth, maxRules, maxStarts } = { ...defaultLimits, ...limits }
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

  const nullable = nullableRules(shape)
  const edges = leftEdges(shape, nullable)
  const components = leftComponents(edges)
  const nameOf = (rule: number) => excerpt(shape.names[shape.writtenIn[rule]!] ?? "?", 0)
  const directlyEmpty = shape.alternatives.map((alternatives) => alternatives.some((sequence) => sequence.length === 0))
  const llamaEdges = leftEdges(shape, directlyEmpty)
  const recursive = growingRecursion(edges, components) ?? cyclic(llamaEdges, leftComponents(llamaEdges))
  if (recursive !== undefined) {
    return Either.left(
      `the grammar's rule ${nameOf(recursive)} is left-recursive: it can begin with itself ` +
        "(directly, or after rules that may match nothing), which llama.cpp would expand without end"
    )
  }
  const wide = tooManyStarts(shape, nullable, components, maxStarts)
  if (wide !== undefined) {
    return Either.left(
      `the grammar's rule ${nameOf(wide)} can begin in more than ${maxStarts.toLocaleString("en-US")} ways ` +
        "(alternatives that begin with rules of several alternatives multiply), and llama.cpp tracks each"
    )
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
