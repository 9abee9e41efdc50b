/**
 * The responder registry in memory: responders and model aliases given at
 * construction or registered later, in registration order. Every descriptor is
 * checked when it is registered (a unique non-empty id, hours as "HH:MM" windows
 * with days 0-6, a non-negative typical delay), so selection never meets a
 * malformed one.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import { ConfigurationFailure } from "../domain/Failure.js"
import * as Text from "../domain/Text.js"
import type { Responder, Service } from "../services/ResponderRegistry.js"
import { ResponderRegistry } from "../services/ResponderRegistry.js"

export interface Options {
  readonly responders?: ReadonlyArray<Responder> | undefined
  /** alias (without the tilde) -> model name. */
  readonly aliases?: Readonly<Record<string, string>> | undefined
}

const clock = /^([01]\d|2[0-3]):[0-5]\d$/

/** What is wrong with a descriptor, if anything. */
export const problemOf = (responder: Responder): string | undefined => {
  if (responder.id.length === 0) return "a responder needs a non-empty id"
  const where = `responder ${JSON.stringify(Text.excerpt(responder.id, 60))}`
  const availability = responder.availability
  for (const window of availability?.hours ?? []) {
    if (!clock.test(window.from) || !clock.test(window.to)) {
      return `${where}: hours must be "HH:MM" (UTC), got ${JSON.stringify(Text.excerpt(window.from, 20))}-${JSON.stringify(Text.excerpt(window.to, 20))}`
    }
    if ((window.days ?? []).some((d) => !Number.isInteger(d) || d < 0 || d > 6)) return `${where}: days are 0 (Sunday) to 6`
  }
  const delay = availability?.typicalResponseDelaySecs
  if (delay !== undefined && !(Number.isFinite(delay) && delay >= 0)) return `${where}: the typical delay must be a non-negative number of seconds`
  if (responder.kind === "pattern" && Object.keys(responder.capabilities).length === 0) return `${where}: a pattern responder needs a capability`
  return undefined
}

export const make = (options: Options = {}): Effect.Effect<Service, ConfigurationFailure> =>
  Effect.gen(function* () {
    const store = yield* Ref.make<ReadonlyArray<Responder>>([])
    const aliases = { ...options.aliases }
    const register = Effect.fn("ResponderRegistry.register")(function* (responder: Responder) {
      const problem = problemOf(responder)
      if (problem !== undefined) return yield* ConfigurationFailure.invalidRequest(problem, { details: { responder: Text.excerpt(responder.id, 80) } })
      const taken = (yield* Ref.get(store)).some((r) => r.id === responder.id)
      if (taken) {
        return yield* ConfigurationFailure.invalidRequest(`responder ${JSON.stringify(Text.excerpt(responder.id, 60))} is already registered`, {
          details: { responder: Text.excerpt(responder.id, 80) }
        })
      }
      yield* Ref.update(store, (all) => [...all, responder])
    })
    for (const responder of options.responders ?? []) yield* register(responder)
    const service: Service = {
      register,
      responders: Ref.get(store),
      get: (id) => Effect.map(Ref.get(store), (all) => Option.fromNullable(all.find((r) => r.id === id))),
      aliases: Effect.succeed(aliases)
    }
    return service
  })

/** The registry with these responders and aliases. */
export const layer = (options: Options = {}): Layer.Layer<ResponderRegistry, ConfigurationFailure> =>
  Layer.effect(ResponderRegistry, make(options))
