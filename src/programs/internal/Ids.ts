/**
 * Ids for the loops: the IdGenerator of the context (random UUIDs unless a test
 * provides `IdGenerator.Test`), taken once.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import { IdGenerator } from "../../services/IdGenerator.js"

/** A new id with `prefix`: `session_…`, `inf_…`, `req_…`. */
export type NextId = (prefix: string) => Effect.Effect<string>

/** The id source of the current context, taken once. */
export const nextId: Effect.Effect<NextId> = Effect.map(IdGenerator, (ids) => ids.next)

/** The id source of `context`: its IdGenerator (random UUIDs unless one is provided). */
export const nextIdOf = (context: Context.Context<never>): NextId => Context.get(context, IdGenerator).next

/** An id drawn at once, when the generator can (see `IdGenerator.Service.unsafeNext`). */
export type UnsafeNextId = (prefix: string) => string

/** The synchronous draw of `context`'s IdGenerator, when it has one. */
export const unsafeNextIdOf = (context: Context.Context<never>): UnsafeNextId | undefined =>
  Context.get(context, IdGenerator).unsafeNext

/**
 * A new session id: `session_` and a random UUID, whatever the IdGenerator. A
 * session id is a capability (whoever knows it continues the conversation and
 * reads its history), so it never comes from a generator a test or a user made
 * sequential.
 */
export const unsafeSessionId = (): string => `session_${globalThis.crypto.randomUUID()}`
