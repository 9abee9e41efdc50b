/**
 * The calculator tool: evaluates an arithmetic expression (+, -, *, /, %, ^,
 * parentheses, unary minus, decimals). The bundled model was trained to call it
 * as `calculator({"expression": "12 + 7"})`. The parser is a small recursive
 * descent over a fixed grammar: no `eval`, and a malformed expression is a typed
 * failure the model sees as an error result.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { ToolFailure } from "../../domain/Failure.js"
import { excerpt } from "../../domain/Text.js"
import * as Tool from "../../services/ToolRegistry.js"

/** Why an expression could not be evaluated. */
export class CalculatorError extends Schema.TaggedError<CalculatorError>()("CalculatorError", {
  expression: Schema.String,
  message: Schema.String
}) {}

/** Longest expression evaluated, in characters. */
export const maxLength = 1_000
/** Most parentheses and powers nested in an expression. */
export const maxNesting = 64

/** Evaluates an expression, or explains what is wrong with it. */
export const evaluate = (expression: string): Effect.Effect<number, CalculatorError> =>
  Effect.suspend(() => {
    // the parser recurses per parenthesis and power: bound the input before it runs
    if (expression.length > maxLength) {
      return Effect.fail(
        new CalculatorError({ expression: expression.slice(0, 40), message: `the expression is longer than ${maxLength} characters` })
      )
    }
    let depth = 0
    for (const c of expression) {
      if (c === "(" || c === "^") depth++
      if (depth > maxNesting) {
        return Effect.fail(
          new CalculatorError({ expression: expression.slice(0, 40), message: `the expression nests deeper than ${maxNesting} levels` })
        )
      }
      if (c === ")") depth = Math.max(0, depth - 1)
    }
    const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/%^()]|\S/g) ?? []
    let i = 0
    let error: string | undefined
    const peek = () => tokens[i]
    const fail = (message: string) => {
      error ??= message
      return Number.NaN
    }
    const primary = (): number => {
      const t = tokens[i++]
      if (t === undefined) return fail("unexpected end of expression")
      if (t === "(") {
        const v = sum()
        if (tokens[i++] !== ")") return fail("missing closing parenthesis")
        return v
      }
      if (t === "-") return -power()
      if (t === "+") return power()
      if (/^\d/.test(t)) return Number(t)
      return fail(`unexpected "${t}"`)
    }
    const power = (): number => {
      const base = primary()
      if (peek() === "^") {
        i++
        return base ** power()
      }
      return base
    }
    const product = (): number => {
      let v = power()
      while (peek() === "*" || peek() === "/" || peek() === "%") {
        const op = tokens[i++]
        const r = power()
        if ((op === "/" || op === "%") && r === 0) return fail("division by zero")
        v = op === "*" ? v * r : op === "/" ? v / r : v % r
      }
      return v
    }
    const sum = (): number => {
      let v = product()
      while (peek() === "+" || peek() === "-") {
        const op = tokens[i++]
        const r = product()
        v = op === "+" ? v + r : v - r
      }
      return v
    }
    const value = tokens.length === 0 ? fail("empty expression") : sum()
    if (error === undefined && i < tokens.length) fail(`unexpected "${tokens[i]}"`)
    return error === undefined && Number.isFinite(value)
      ? Effect.succeed(value)
      : Effect.fail(new CalculatorError({ expression, message: error ?? "the result is not a finite number" }))
  })

/** Formats a result the way the bundled model was trained to read it. */
export const format = (value: number): string =>
  Number.isInteger(value) ? String(value) : String(Number(value.toFixed(6)))

/**
 * The tool. Idempotent: a pure function may be retried; but an expression that
 * does not evaluate never will, so that failure is not retryable (over HTTP: the
 * caller's input, 422, not a failing dependency).
 */
export const calculator = Tool.make({
  name: "calculator",
  description: "Evaluate an arithmetic expression",
  parameters: Schema.Struct({ expression: Schema.String }),
  idempotent: true,
  handler: ({ expression }) =>
    evaluate(expression).pipe(
      Effect.map(format),
      Effect.mapError((error) =>
        ToolFailure.executionFailed("calculator", `Tool "calculator" failed: ${error.message}`, {
          retryable: false,
          details: { expression: excerpt(error.expression) }
        })
      )
    )
})
