import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { evaluate, format } from "../src/layers/tools/Calculator.js"

describe("Calculator", () => {
  it.effect("evaluates with precedence, parentheses, unary minus and powers", () =>
    Effect.gen(function* () {
      expect(yield* evaluate("12 + 7")).toBe(19)
      expect(yield* evaluate("2 + 3 * 4")).toBe(14)
      expect(yield* evaluate("(2 + 3) * 4")).toBe(20)
      expect(yield* evaluate("-3 + 10")).toBe(7)
      expect(yield* evaluate("2 ^ 3 ^ 2")).toBe(512)
      expect(yield* evaluate("10 % 4")).toBe(2)
      expect(format(yield* evaluate("10 / 4"))).toBe("2.5")
      expect(format(yield* evaluate("1 / 3"))).toBe("0.333333")
    })
  )

  it.effect("explains malformed expressions", () =>
    Effect.gen(function* () {
      expect((yield* Effect.flip(evaluate("2 +"))).message).toBe("unexpected end of expression")
      expect((yield* Effect.flip(evaluate("(1 + 2"))).message).toBe("missing closing parenthesis")
      expect((yield* Effect.flip(evaluate("1 / 0"))).message).toBe("division by zero")
      expect((yield* Effect.flip(evaluate("2 x 3"))).message).toBe('unexpected "x"')
      expect((yield* Effect.flip(evaluate(""))).message).toBe("empty expression")
      expect((yield* Effect.flip(evaluate("process.exit()"))).message).toContain("unexpected")
    })
  )
})
