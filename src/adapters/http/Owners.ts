/**
 * Who owns each request the server took, and so who may see its events.
 *
 * A request id is claimed by the principal whose request used it first
 * (`claim`), and stays its own: another principal sending the same id is told
 * it is in use, exactly as when its own request with that id is still running,
 * so an id tells nobody whose it is. The events of a request (and of the
 * requests it makes, `<id>.<n>`) are shown to its owner and to admins only.
 *
 * A session is its principal's: its key in the ConversationStore is scoped by
 * the principal's name (`sessionKey`), so a session id another principal sends
 * names no session of theirs. The server with authentication off has one
 * principal, whose keys are the ids as they are.
 *
 * The map of owners is bounded (the oldest claims are forgotten first, their
 * events then visible to admins only); the event ring is smaller still.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { Event } from "../../domain/Event.js"
import { local, owns, type Principal } from "./Principal.js"

/** Request ids whose owners are remembered. */
export const capacity = 100_000

export interface Service {
  /** Claims `requestId` for `principal`: false when another principal claimed it first. */
  readonly claim: (requestId: string, principal: Principal) => Effect.Effect<boolean>
  /** The principal name that claimed `requestId` (or the request it was made by), if any. */
  readonly ownerOf: (requestId: string) => string | undefined
  /** Whether `principal` may see `event`. */
  readonly canSee: (principal: Principal, event: Event) => boolean
}

export class RequestOwners extends Context.Tag("pagantic/http/RequestOwners")<RequestOwners, Service>() {}

export const make = (limit: number = capacity): Service => {
  const owners = new Map<string, string>()
  const ownerOf = (requestId: string): string | undefined => {
    let id = requestId
    for (;;) {
      const owner = owners.get(id)
      if (owner !== undefined) return owner
      // a request made by another one (a plan step, a vote's sample): `<parent>.<n>`
      const dot = id.lastIndexOf(".")
      if (dot <= 0) return undefined
      id = id.slice(0, dot)
    }
  }
  return {
    claim: (requestId, principal) =>
      Effect.sync(() => {
        const owner = owners.get(requestId)
        if (owner !== undefined) return owner === principal.name
        owners.set(requestId, principal.name)
        if (owners.size > limit) owners.delete(owners.keys().next().value!)
        return true
      }),
    ownerOf,
    canSee: (principal, event) => owns(principal, ownerOf(event.correlation.requestId))
  }
}

/** A new map of owners for one server. */
export const layer: Layer.Layer<RequestOwners> = Layer.sync(RequestOwners, () => make())

/**
 * The ConversationStore key of `principal`'s session `sessionId` (a key of its
 * own, as a durable run's stored response names it, is its key already).
 */
export const sessionKey = (principal: Principal, sessionId: string): string =>
  principal === local || sessionId.startsWith(`${principal.name}/`) ? sessionId : `${principal.name}/${sessionId}`

/** The session id a client knows, from its ConversationStore key. */
export const sessionIdOf = (principal: Principal, key: string): string =>
  principal === local || !key.startsWith(`${principal.name}/`) ? key : key.slice(principal.name.length + 1)
