/**
 * CEL: the expressions a query may carry, in exactly three kinds of place.
 *
 * A query is not a program: its orchestration is one of six named patterns. CEL
 * (the Common Expression Language: no loops, no side effects, always terminating)
 * is allowed only where a scalar needs to be computed per query: a responder
 * predicate over the candidate (`responder`), a fold's weight over one response
 * (`response`) or choice over all of them (`responses`), and a pattern's
 * threshold over the fold (`fold`, and `audit` for the auditor's verdict). Each
 * place declares its variables and the type its result must have; an expression
 * is compiled and type-checked against that declaration once, when the query is
 * checked, so a typo in a field name or a predicate that yields a number is a
 * CONFIG_INVALID_REQUEST naming the field and the position before anything runs.
 *
 * At run time an expression can still fail on its inputs (a missing key in an
 * answer, a division by zero): that is a typed OrchestrationFailure naming the
 * expression, the position and short excerpts of the inputs, never a crash.
 *
 * Values follow CEL's JSON mapping: numbers in answers and metadata are doubles,
 * counters and indexes (`index`, `attempt`, `stage`, `valid`...) are ints.
 *
 * This module compiles and runs; the variables are in cel/Views and the places
 * with their environments in cel/Places.
 */
import type { ASTNode, TypeCheckResult } from "@marcbachmann/cel-js"
import * as Either from "effect/Either"
import { ConfigurationFailure, OrchestrationFailure } from "../domain/Failure.js"
import * as Text from "../domain/Text.js"
import type { Place, ResultOf, VariablesOf } from "./cel/Places.js"
import { acceptedTypes, environment, limits, places } from "./cel/Places.js"

export type { Place, ResultOf, VariablesOf } from "./cel/Places.js"
export { limits, places }
export { AnswerView, AuditView, FoldView, ResponderView, ResponseView } from "./cel/Views.js"

// ---------------------------------------------------------------------------
// Compiling
// ---------------------------------------------------------------------------

/** A checked expression, ready to run many times. */
export interface Compiled<P extends Place> {
  readonly place: P
  /** Where it came from in the query, e.g. `responders[0].expression`. */
  readonly field: string
  readonly source: string
  /** The type the checker inferred. */
  readonly type: string
  readonly run: (variables: VariablesOf<P>) => Either.Either<ResultOf<P>, OrchestrationFailure>
}

interface CelErrorLike {
  readonly name?: string
  readonly code?: string
  readonly summary?: string
  readonly message?: string
  readonly range?: { readonly start: number; readonly end: number } | undefined
}

const asCelError = (u: unknown): CelErrorLike => (typeof u === "object" && u !== null ? (u as CelErrorLike) : { summary: String(u) })

/** Line and column (both from 1) of an offset. */
const lineColumn = (source: string, offset: number): { readonly line: number; readonly column: number } => {
  const before = source.slice(0, offset).split("\n")
  return { line: before.length, column: before[before.length - 1]!.length + 1 }
}

const refuse = (field: string, source: string, problem: string, range: CelErrorLike["range"], code: string) => {
  const at = range === undefined ? "" : (() => {
    const { column, line } = lineColumn(source, range.start)
    return ` at position ${range.start} (line ${line}, column ${column})`
  })()
  return ConfigurationFailure.invalidRequest(`${field}: ${problem}${at} in the CEL expression ${JSON.stringify(Text.excerpt(source, 120))}`, {
    details: {
      field,
      expression: Text.excerpt(source, 200),
      problem,
      code,
      ...(range === undefined ? {} : { position: range.start, end: range.end, ...lineColumn(source, range.start) })
    }
  })
}

/**
 * Functions refused in queries: `matches` runs a JavaScript regular expression
 * (CEL specifies RE2, which never backtracks); a client's pattern over a
 * responder's answer could backtrack exponentially and stall the process.
 */
const refusedFunctions: ReadonlyMap<string, string> = new Map([
  ["matches", "matches() is not allowed: JavaScript regular expressions can backtrack without bound (use contains, startsWith, endsWith)"]
])

/** The CEL macros that iterate (what the nesting bound counts). */
const comprehensions = new Set(["all", "exists", "exists_one", "map", "filter"])

interface Scan {
  /** The deepest nesting of comprehensions, and where the deepest one starts. */
  readonly depth: number
  readonly at: number
  /** A refused function, where it is called. */
  readonly refused?: { readonly problem: string; readonly at: number } | undefined
}

/** Walks `node` without recursion: comprehension nesting and refused functions. */
const scan = (node: ASTNode): Scan => {
  let best: { depth: number; at: number } = { depth: 0, at: node.start }
  let refused: Scan["refused"]
  const stack: Array<{ readonly node: unknown; readonly depth: number }> = [{ node, depth: 0 }]
  while (stack.length > 0) {
    const { depth, node: current } = stack.pop()!
    if (Array.isArray(current)) {
      for (const item of current) stack.push({ node: item, depth })
      continue
    }
    if (typeof current !== "object" || current === null || !("op" in current)) continue
    const ast = current as ASTNode
    const name = ast.op === "rcall" || ast.op === "call" ? ast.args[0] : undefined
    const problem = name === undefined ? undefined : refusedFunctions.get(name)
    if (problem !== undefined && (refused === undefined || ast.start < refused.at)) refused = { problem, at: ast.start }
    const inner = ast.op === "rcall" && comprehensions.has(ast.args[0]) ? depth + 1 : depth
    if (inner > best.depth) best = { depth: inner, at: ast.start }
    stack.push({ node: ast.args, depth: inner })
  }
  return { ...best, refused }
}

/** The result as `returns` wants it, or what is wrong with it. */
const coerce = (returns: "bool" | "number" | "int", value: unknown): boolean | number | string => {
  switch (returns) {
    case "bool":
      return typeof value === "boolean" ? value : `yielded ${describeValue(value)}, not a bool`
    case "number":
      if (typeof value === "bigint") return Number(value)
      return typeof value === "number" && Number.isFinite(value) ? value : `yielded ${describeValue(value)}, not a finite number`
    case "int":
      if (typeof value === "bigint") return Number(value)
      return typeof value === "number" && Number.isInteger(value) ? value : `yielded ${describeValue(value)}, not an int`
  }
}

/**
 * Runs a compiled program: its value, or the error it threw. A plain try/catch
 * because this is the hot path of a weighted fold (Either.try costs more than the
 * evaluation of a small expression).
 */
const evaluate = (
  program: (context: Record<string, unknown>) => unknown,
  variables: Record<string, unknown>
): { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: CelErrorLike } => {
  try {
    return { ok: true, value: program(variables) }
  } catch (error) {
    return { ok: false, error: asCelError(error) }
  }
}

const describeValue = (value: unknown): string =>
  Text.excerpt(typeof value === "bigint" ? `${value}` : JSON.stringify(Text.bounded(value, { maxString: 40, maxDepth: 2, maxItems: 4 })) ?? String(value), 60)

/**
 * Compiles `source` for `place` and type-checks it against the place's
 * declaration and result type. A syntax or type error, a result of the wrong
 * type, or an expression past the bounds is CONFIG_INVALID_REQUEST naming
 * `field` and the position.
 */
export const compile = <P extends Place>(place: P, field: string, source: string): Either.Either<Compiled<P>, ConfigurationFailure> => {
  const env = environment(place)
  const parsed = Either.try({ try: () => env.parse(source), catch: asCelError })
  if (Either.isLeft(parsed)) {
    const e = parsed.left
    return Either.left(refuse(field, source, e.summary ?? e.message ?? "does not parse", e.range, e.code ?? "parse_error"))
  }
  const program = parsed.right
  const deepest = scan(program.ast)
  if (deepest.refused !== undefined) {
    return Either.left(refuse(field, source, deepest.refused.problem, { start: deepest.refused.at, end: deepest.refused.at }, "refused_function"))
  }
  if (deepest.depth > limits.maxComprehensionNesting) {
    return Either.left(
      refuse(field, source, `comprehensions nested ${deepest.depth} deep (at most ${limits.maxComprehensionNesting})`, {
        start: deepest.at,
        end: deepest.at
      }, "nesting")
    )
  }
  const checked = Either.try({ try: (): TypeCheckResult => program.check(), catch: asCelError })
  if (Either.isLeft(checked)) {
    const e = checked.left
    return Either.left(refuse(field, source, e.summary ?? e.message ?? "does not type-check", e.range, e.code ?? "type_error"))
  }
  if (!checked.right.valid) {
    const e = asCelError(checked.right.error)
    return Either.left(refuse(field, source, e.summary ?? e.message ?? "does not type-check", e.range, e.code ?? "type_error"))
  }
  const type = checked.right.type ?? "dyn"
  const returns = places[place].returns
  if (!acceptedTypes[returns].includes(type)) {
    const wanted = returns === "number" ? "a number (double or int)" : `a ${returns}`
    return Either.left(refuse(field, source, `must yield ${wanted}, yields ${type}`, { start: 0, end: source.length }, "result_type"))
  }
  const run = (variables: VariablesOf<P>): Either.Either<ResultOf<P>, OrchestrationFailure> => {
    const failed = (problem: string, range?: CelErrorLike["range"], code?: string) =>
      OrchestrationFailure.expressionFailed(`${field}: the CEL expression ${JSON.stringify(Text.excerpt(source, 120))} failed: ${problem}`, {
        details: {
          field,
          expression: Text.excerpt(source, 200),
          problem,
          ...(code === undefined ? {} : { code }),
          ...(range === undefined ? {} : { position: range.start }),
          inputs: Text.bounded(variables, { maxString: 80, maxDepth: 4, maxItems: 8 })
        }
      })
    const value = evaluate(program, variables as unknown as Record<string, unknown>)
    if (!value.ok) return Either.left(failed(value.error.summary ?? value.error.message ?? "evaluation error", value.error.range, value.error.code))
    const result = coerce(returns, value.value)
    return typeof result === "string" ? Either.left(failed(result)) : Either.right(result as ResultOf<P>)
  }
  return Either.right({ place, field, source, type, run })
}
