/**
 * The responder registry: who can answer a query.
 *
 * A responder is one of four kinds. An `llm` answers through an Engine; a
 * `pattern` is a pure function registered per capability (a regex classifier, a
 * lookup); a `system` is an Effect handler (a service call, a database query); an
 * `actor` is a human, known here by its descriptor only (answers reach it through
 * a notification channel and come back as records). Each carries what selection
 * needs: a description and tags (the relevance score ranks on them), metadata (CEL
 * predicates read it), and availability (status, working hours, typical delay,
 * last seen), which the hard filter checks before anything is dispatched.
 *
 * When a responder states no typical delay, its kind's SLA default applies, and a
 * query without `max_latency_secs` waits its kind's default.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { ConfigurationFailure, Failure } from "../domain/Failure.js"
import type { ResponderKind } from "../domain/Query.js"
import type * as Engine from "./Engine.js"

/** Typical delay and default `max_latency_secs`, by responder kind. */
export const slaDefaults: Readonly<Record<ResponderKind, { readonly typicalDelaySecs: number; readonly maxLatencySecs: number }>> = {
  pattern: { typicalDelaySecs: 0.1, maxLatencySecs: 10 },
  system: { typicalDelaySecs: 5, maxLatencySecs: 60 },
  llm: { typicalDelaySecs: 30, maxLatencySecs: 300 },
  actor: { typicalDelaySecs: 86_400, maxLatencySecs: 604_800 }
}

export type AvailabilityStatus = "available" | "busy" | "away" | "offline"

/** A weekly window in UTC: `from` to `to` ("HH:MM"), on `days` (0 = Sunday; default every day). */
export interface HoursWindow {
  readonly days?: ReadonlyArray<number> | undefined
  readonly from: string
  readonly to: string
}

export interface Availability {
  /** Default available. */
  readonly status?: AvailabilityStatus | undefined
  /** When it answers; absent: always. */
  readonly hours?: ReadonlyArray<HoursWindow> | undefined
  /** Absent: its kind's SLA default. */
  readonly typicalResponseDelaySecs?: number | undefined
  /** Epoch milliseconds; absent: unknown (never stale). */
  readonly lastSeenAt?: number | undefined
}

interface Common {
  /** Unique in the registry. */
  readonly id: string
  /** What it is good at, in words: what relevance ranks on. */
  readonly description?: string | undefined
  readonly tags?: ReadonlyArray<string> | undefined
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
  readonly availability?: Availability | undefined
}

/** What a pattern or system responder is asked. */
export interface Request {
  /** The query's input as text. */
  readonly input: string
  /** The capability the query asked for, when it named one. */
  readonly capability?: string | undefined
}

/** A pure function answering with a body. */
export type PatternFunction = (request: Request) => unknown

/** An Effect answering with a body. */
export type SystemHandler = (request: Request) => Effect.Effect<unknown, Failure>

export type Responder =
  | (Common & { readonly kind: "llm"; readonly model: string; readonly engine: Engine.Service })
  | (Common & { readonly kind: "pattern"; readonly capabilities: Readonly<Record<string, PatternFunction>> })
  | (Common & {
    readonly kind: "system"
    readonly name: string
    readonly capabilities?: ReadonlyArray<string> | undefined
    readonly handle: SystemHandler
  })
  | (Common & { readonly kind: "actor"; readonly did: string; readonly name?: string | undefined })

export interface Service {
  /** Adds a responder; an id already taken or a malformed descriptor is CONFIG_INVALID_REQUEST. */
  readonly register: (responder: Responder) => Effect.Effect<void, ConfigurationFailure>
  /** Every responder, in registration order. */
  readonly responders: Effect.Effect<ReadonlyArray<Responder>>
  readonly get: (id: string) => Effect.Effect<Option.Option<Responder>>
  /** `~alias` names of models: alias (without the tilde) -> model. */
  readonly aliases: Effect.Effect<Readonly<Record<string, string>>>
}

/** The responders a query may be dispatched to. */
export class ResponderRegistry extends Context.Tag("pagantic/ResponderRegistry")<ResponderRegistry, Service>() {}
