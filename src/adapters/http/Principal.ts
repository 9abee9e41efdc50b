/**
 * Who is calling. Every request the server admits is made by a principal: the
 * holder of one key, with a name and a role. What a request starts (a session, a
 * request, a durable run) is owned by its principal, and another principal is
 * told it does not exist (404, never 403: existence is not disclosed).
 *
 * - `client`: runs the model; sees and acts on only what it started.
 * - `responder`: a human responder (`responder:<id>`, the id a query's tier names,
 *   a DID such as `did:example:alice`); reads its own inbox and answers the slots
 *   asked of it. It is a client too: it may run the model and owns what it starts.
 * - `admin`: sees and acts on everything (the operator's key).
 *
 * The edge (`Edge.ts`) finds the principal from the request's key (`Keys.ts`)
 * and provides it to the handlers as `CurrentPrincipal`. A server started with
 * authentication off has one principal, `local`, an admin.
 */
import * as Context from "effect/Context"

export type Role = "admin" | "client" | "responder"

export interface Principal {
  /** Unique among the server's principals; what owners are recorded as. */
  readonly name: string
  readonly role: Role
  /** Role `responder`: the responder id whose slots it answers. */
  readonly responder?: string | undefined
}

/** The principal of a server with authentication off: everyone who can reach it. */
export const local: Principal = { name: "local", role: "admin" }

/** The principal handlers see when no edge set one (a handler mounted without the edge): owns nothing. */
export const nobody: Principal = { name: "", role: "client" }

/** The principal of the request being handled, set by the edge. */
export class CurrentPrincipal extends Context.Reference<CurrentPrincipal>()("pagantic/http/CurrentPrincipal", {
  defaultValue: (): Principal => nobody
}) {}

/** Whether `principal` may see and act on what `owner` started (an unowned thing: admins only). */
export const owns = (principal: Principal, owner: string | undefined): boolean =>
  principal.role === "admin" || (owner !== undefined && principal.name !== "" && owner === principal.name)

/** Whether `principal` is the human responder `responder`. */
export const isResponder = (principal: Principal, responder: string): boolean =>
  principal.role === "responder" && principal.responder === responder

/** A role as written in configuration: `admin`, `client` or `responder:<id>`. */
export const roleText = (principal: Principal): string =>
  principal.role === "responder" ? `responder:${principal.responder ?? ""}` : principal.role
