/**
 * Identifiers for requests, traces, tool calls and inferences. A Context.Reference:
 * it is always there (random UUIDs by default), and tests provide `IdGenerator.Test`
 * for sequential, reproducible ids. Session ids never come from it: a session id
 * is a capability and must stay unguessable.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

export interface Service {
  /** A new id with `prefix`: `req_…`, `inf_…`, `call_…`. */
  readonly next: (prefix: string) => Effect.Effect<string>
  /**
   * The same draw made at once, for a generator that can (both built in ones
   * can): the loops draw an id per message with it, without an effect each. It
   * must draw from the same source as `next`. Absent: the loops use `next`.
   */
  readonly unsafeNext?: ((prefix: string) => string) | undefined
}

const randomId = (prefix: string): string => `${prefix}_${globalThis.crypto.randomUUID()}`

/** Random UUIDs after the prefix. */
export const random: Service = {
  next: (prefix) => Effect.sync(() => randomId(prefix)),
  unsafeNext: randomId
}

export class IdGenerator extends Context.Reference<IdGenerator>()("pagantic/IdGenerator", {
  defaultValue: (): Service => random
}) {
  /** Sequential ids (`call_1`, `call_2`, ...) per prefix, for reproducible tests. */
  static readonly Test: Layer.Layer<IdGenerator> = Layer.effect(
    IdGenerator,
    Effect.sync((): Service => {
      const counters = new Map<string, number>()
      const unsafeNext = (prefix: string): string => {
        const n = (counters.get(prefix) ?? 0) + 1
        counters.set(prefix, n)
        return `${prefix}_${n}`
      }
      return { next: (prefix) => Effect.sync(() => unsafeNext(prefix)), unsafeNext }
    })
  )
}
