/**
 * How a human responder hears about a query.
 *
 * A human answers on their own time, so the channel follows where they are and
 * how long the query can wait: the page they have open (an SSE inbox) when it is
 * connected; otherwise the push channels they chose (a webhook, Slack, SMS...);
 * with none of those, a digest when the query can wait more than an hour; and
 * polling (they look when they look) otherwise.
 */

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
