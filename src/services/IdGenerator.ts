/**
 * Identifiers for requests, traces, tool calls and inferences. A service so that
 * tests get deterministic ids (`IdGenerator.Test`) and production gets UUIDs.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"

export class IdGenerator extends Effect.Service<IdGenerator>()("pagantic/IdGenerator", {
  succeed: {
    next: (prefix: string): Effect.Effect<string> => Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`)
  },
  accessors: true
}) {
  /** Sequential ids (`call_1`, `call_2`, ...) for reproducible tests. */
  static readonly Test: Layer.Layer<IdGenerator> = Layer.effect(
    IdGenerator,
    Effect.map(Ref.make(new Map<string, number>()), (counters) =>
      IdGenerator.make({
        next: (prefix: string) =>
          Ref.modify(counters, (m) => {
            const n = (m.get(prefix) ?? 0) + 1
            const copy = new Map(m)
            copy.set(prefix, n)
            return [`${prefix}_${n}`, copy] as const
          })
      })
    )
  )
}
