/**
 * `Effect.flip` for tests: the failure of `effect`, or, when it succeeds, a
 * defect with a short message naming what it succeeded with. A plain
 * `Effect.flip` hands the success on as if it were the failure, and vitest's
 * printer can take minutes to format that value in the diff of the assertion
 * that then fails.
 */
import * as Effect from "effect/Effect"
import { inspect } from "node:util"
import * as Text from "../../src/domain/Text.js"

const describe = (value: unknown): string =>
  Text.excerpt(inspect(value, { depth: 1, breakLength: Infinity, maxArrayLength: 4, maxStringLength: 80 }), 300)

export const flip = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<E, never, R> =>
  Effect.matchEffect(effect, {
    onFailure: Effect.succeed,
    onSuccess: (value) => Effect.dieMessage(`expected a failure, but it succeeded with ${describe(value)}`)
  })
