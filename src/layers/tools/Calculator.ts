/**
 * The calculator tool: evaluates an arithmetic expression (+, -, *, /, %, ^,
 * parentheses, unary minus, decimals). The bundled model was trained to call it
 * as `calculator({"expression": "12 + 7"})`. The parser is a small recursive
 * descent over a fixed grammar: no `eval`, and a malformed expression is a typed
 * failure the model sees as an error result.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Tool from "../../services/ToolRegistry.js"

/** Why an expression could not be evaluated. */
export class CalculatorError extends Schema.TaggedError<CalculatorError>()("CalculatorError", {
  expression: Schema.String,
  message: Schema.String
}) {}

/** Evaluates an expression, or explains what is wrong with it. */
export const evaluate = (expression: string): Effect.Effect<number, CalculatorError> =>
  Effect.suspend(() => {
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

/** The tool. Idempotent: a pure function may be retried. */
export const calculator = Tool.make({
  name: "calculator",
  description: "Evaluate an arithmetic expression",
  parameters: Schema.Struct({ expression: Schema.String }),
  idempotent: true,
  handler: ({ expression }) => Effect.map(evaluate(expression), format)
})
