/**
 * Notifications: how a human responder hears that a query waits for them.
 *
 * A human answers on their own time, so the channel follows where they are and
 * how long the query can wait (`selectChannel`): the page they have open (an SSE
 * inbox) when it is connected; otherwise the push channels they registered (a
 * signed webhook, or an application's Slack, SMS or e-mail channel); with none of
 * those, a digest when the query can wait more than an hour; and polling (they
 * look when they look) otherwise. Whatever the channel, the notice names the run,
 * the slot, its secret and its deadline: what the responder needs to answer
 * through the Runs API.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Redacted from "effect/Redacted"
import type * as Stream from "effect/Stream"
import type { Failure } from "../domain/Failure.js"

/** Where a notification goes. */
export type Channel =
  | { readonly _tag: "Sse" }
  | { readonly _tag: "Push"; readonly channels: ReadonlyArray<string> }
  | { readonly _tag: "Digest" }
  | { readonly _tag: "Polling" }

export interface Reach {
  /** Whether the responder's page is listening now. */
  readonly sseConnected: boolean
  /** The push channels the responder registered, in their order of preference. */
  readonly pushChannels: ReadonlyArray<string>
  /** The query's wait. */
  readonly maxLatencySecs: number
}

/** A digest is worth it past an hour. */
export const digestAfterSecs = 3_600

/** SSE if connected, else push channels, else a digest past an hour of wait, else polling. */
export const selectChannel = (reach: Reach): Channel => {
  if (reach.sseConnected) return { _tag: "Sse" }
  if (reach.pushChannels.length > 0) return { _tag: "Push", channels: reach.pushChannels }
  if (reach.maxLatencySecs > digestAfterSecs) return { _tag: "Digest" }
  return { _tag: "Polling" }
}

/** What a human responder is told. */
export interface Notice {
  /** The responder's id in the registry. */
  readonly responder: string
  readonly runId: string
  readonly slot: string
  /** The capability to answer the slot. */
  readonly secret: Redacted.Redacted<string>
  /** Epoch milliseconds. */
  readonly deadline: number
  /** The CALL it answers (its correlation id). */
  readonly call: string
  /** The question, as the responder sees it. */
  readonly input: string
  readonly maxLatencySecs: number
}

/** A push channel an application supplies (Slack, SMS, e-mail...): sends one notice. */
export interface PushChannel {
  readonly name: string
  readonly send: (notice: Notice) => Effect.Effect<void, Failure>
}

/** How a notice went out. */
export type Delivery =
  | { readonly _tag: "Sse" }
  | { readonly _tag: "Push"; readonly channel: string }
  | { readonly _tag: "Digest" }
  | { readonly _tag: "Polling" }

export interface Service {
  /** Sends `notice` on the channel the rule selects for its responder; a push channel that fails falls to the next. */
  readonly notify: (notice: Notice) => Effect.Effect<Delivery, Failure>
  /** The responder's SSE inbox: the notices sent while it is consumed. Consuming it makes the responder "connected". */
  readonly inbox: (responder: string) => Stream.Stream<Notice>
  /** The notices waiting for a responder that polls (past their deadline: gone). */
  readonly pending: (responder: string) => Effect.Effect<ReadonlyArray<Notice>>
  /** The responder's digest so far, emptied. */
  readonly takeDigest: (responder: string) => Effect.Effect<ReadonlyArray<Notice>>
}

/** Notifications to human responders. */
export class Notifications extends Context.Tag("pagantic/Notifications")<Notifications, Service>() {}
