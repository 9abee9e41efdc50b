/**
 * Identifiers for requests, traces, tool calls and inferences. A Context.Reference:
 * it is always there (random UUIDs by default), and tests provide `IdGenerator.Test`
 * for sequential, reproducible ids. Session ids never come from it: a session id
 * is a capability and must stay unguessable.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"

export interface Service {
  /** A new id with `prefix`: `req_…`, `inf_…`, `call_…`. */
  readonly next: (prefix: string) => Effect.Effect<string>
}

/** Random UUIDs after the prefix. */
export const random: Service = {
  next: (prefix) => Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`)
}

export class IdGenerator extends Context.Reference<IdGenerator>()("pagantic/IdGenerator", {
  defaultValue: (): Service => random
}) {
  /** Sequential ids (`call_1`, `call_2`, ...) per prefix, for reproducible tests. */
  static readonly Test: Layer.Layer<IdGenerator> = Layer.effect(
    IdGenerator,
    Effect.map(Ref.make(new Map<string, number>()), (counters): Service => ({
      next: (prefix: string) =>
        Ref.modify(counters, (m) => {
          const n = (m.get(prefix) ?? 0) + 1
          const copy = new Map(m)
          copy.set(prefix, n)
          return [`${prefix}_${n}`, copy] as const
        })
    }))
  )
}
