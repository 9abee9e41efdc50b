/**
 * Ids for the loops: from the IdGenerator in context when there is one (tests
 * provide `IdGenerator.Test` for reproducible ids), random UUIDs otherwise.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { IdGenerator } from "../../services/IdGenerator.js"

/** A new id with `prefix`: `session_…`, `inf_…`, `req_…`. */
export type NextId = (prefix: string) => Effect.Effect<string>

/** The id source of the current context, taken once. */
export const nextId: Effect.Effect<NextId> = Effect.map(Effect.serviceOption(IdGenerator), (ids) =>
  (prefix: string) =>
    Option.isSome(ids)
      ? ids.value.next(prefix)
      : Effect.sync(() => `${prefix}_${globalThis.crypto.randomUUID()}`))
