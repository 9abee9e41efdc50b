/**
 * Notification channels in process: an SSE inbox per responder, a signed webhook,
 * the application's push channels, a digest and polling, chosen per notice by the
 * Notifications rule (`selectChannel`).
 *
 * - SSE: `inbox(responder)` is a Stream of the notices sent while it is consumed
 *   (an HTTP adapter serves it as `text/event-stream`); a responder with an inbox
 *   open is "connected".
 * - Webhook: a POST of the notice as JSON (`infer.notification.v1`) to the
 *   responder's URL, signed with HMAC-SHA256 of the body under the responder's
 *   secret (`x-pagantic-signature: sha256=<hex>`), retried on `RetryPolicy.webhook`
 *   when the connection fails or the receiver answers 5xx or 429; a 4xx is final.
 * - Push channels an application supplies (Slack, SMS, e-mail) by name, tried in
 *   the responder's order of preference after its webhook; one that fails passes
 *   the notice to the next. When every push channel fails, the notice goes where it
 *   would with none: a digest or polling. A notice is never lost for a channel's
 *   failure, so `notify` does not fail.
 * - Digest and polling keep notices in memory: `takeDigest` empties a digest,
 *   `pending` lists what a polling responder has not seen expire.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import type * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import { createHmac } from "node:crypto"
import { ToolFailure } from "../domain/Failure.js"
import * as Text from "../domain/Text.js"
import type { Delivery, Notice, PushChannel, Service } from "../services/Notifications.js"
import { Notifications, selectChannel } from "../services/Notifications.js"
import * as RetryPolicy from "../services/RetryPolicy.js"

export interface Webhook {
  readonly url: string
  /** Signs every POST (HMAC-SHA256 of the body). */
  readonly secret: Redacted.Redacted<string>
}

/** How one responder can be reached besides its inbox. */
export interface Reachable {
  readonly webhook?: Webhook | undefined
  /** Names of the application's push channels, in order of preference (after the webhook). */
  readonly push?: ReadonlyArray<string> | undefined
}

export interface Options {
  /** By responder id. */
  readonly responders?: Readonly<Record<string, Reachable>> | undefined
  /** The application's push channels (Slack, SMS, e-mail...). */
  readonly channels?: ReadonlyArray<PushChannel> | undefined
  /** When a failed webhook POST is tried again. Default `RetryPolicy.webhook`. */
  readonly webhookRetry?: Schedule.Schedule<unknown> | undefined
}

/** The signature header's value for `body` under `secret`. */
export const signature = (secret: Redacted.Redacted<string>, body: string): string =>
  `sha256=${createHmac("sha256", Redacted.value(secret)).update(body).digest("hex")}`

/** The JSON a webhook receives. */
export const webhookBody = (notice: Notice): string =>
  JSON.stringify({
    kind: "infer.notification.v1",
    responder: notice.responder,
    run_id: notice.runId,
    slot: notice.slot,
    secret: Redacted.value(notice.secret),
    deadline: new Date(notice.deadline).toISOString(),
    call: notice.call,
    input: notice.input,
    max_latency_secs: notice.maxLatencySecs
  })

const webhookFailure = (url: string, problem: string, retryable: boolean) =>
  ToolFailure.unavailable("webhook", `the webhook ${Text.excerpt(url, 120)} ${problem}`, { retryable })

export const make = (options: Options = {}): Effect.Effect<Service, never, HttpClient.HttpClient> =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const reach = options.responders ?? {}
    const channels = new Map((options.channels ?? []).map((c) => [c.name, c]))
    const inboxes = new Map<string, Set<Queue.Queue<Notice>>>()
    const digests = new Map<string, Array<Notice>>()
    const polled = new Map<string, Array<Notice>>()
    const keep = (store: Map<string, Array<Notice>>, notice: Notice) =>
      Effect.sync(() => store.set(notice.responder, [...(store.get(notice.responder) ?? []), notice]))

    const postWebhook = (hook: Webhook, notice: Notice) => {
      const body = webhookBody(notice)
      const request = HttpClientRequest.post(hook.url).pipe(
        HttpClientRequest.setHeader("x-pagantic-signature", signature(hook.secret, body)),
        HttpClientRequest.bodyText(body, "application/json")
      )
      return client.execute(request).pipe(
        Effect.scoped,
        Effect.mapError((e) => webhookFailure(hook.url, `could not be reached: ${Text.excerpt(e.message, 200)}`, true)),
        Effect.flatMap((response) =>
          response.status < 300
            ? Effect.void
            : Effect.fail(webhookFailure(hook.url, `answered ${response.status}`, response.status >= 500 || response.status === 429))
        ),
        Effect.retry({ schedule: options.webhookRetry ?? RetryPolicy.webhook, while: (f) => f.retryable })
      )
    }

    /** The responder's push channels in order: its webhook first, then the named ones this layer has. */
    const pushOf = (responder: string): ReadonlyArray<{ readonly name: string; readonly send: (n: Notice) => Effect.Effect<void, unknown> }> => {
      const r = reach[responder]
      const hook = r?.webhook
      return [
        ...(hook === undefined ? [] : [{ name: "webhook", send: (n: Notice) => postWebhook(hook, n) }]),
        ...(r?.push ?? []).flatMap((name) => {
          const channel = channels.get(name)
          return channel === undefined ? [] : [{ name, send: channel.send }]
        })
      ]
    }

    const notify = (notice: Notice): Effect.Effect<Delivery> =>
      Effect.gen(function* () {
        const listening = inboxes.get(notice.responder)
        const push = pushOf(notice.responder)
        const chosen = selectChannel({
          sseConnected: listening !== undefined && listening.size > 0,
          pushChannels: push.map((p) => p.name),
          maxLatencySecs: notice.maxLatencySecs
        })
        if (chosen._tag === "Sse") {
          for (const queue of listening ?? []) yield* Queue.offer(queue, notice)
          return { _tag: "Sse" } as const
        }
        if (chosen._tag === "Push") {
          for (const channel of push) {
            const sent = yield* Effect.either(channel.send(notice))
            if (sent._tag === "Right") return { _tag: "Push", channel: channel.name } as const
            yield* Effect.logWarning(`notifying ${notice.responder} through ${channel.name} failed; trying the next channel`)
          }
        }
        // no push channel, or every one failed: where a notice goes without one
        const fallback = selectChannel({ sseConnected: false, pushChannels: [], maxLatencySecs: notice.maxLatencySecs })
        if (fallback._tag === "Digest") {
          yield* keep(digests, notice)
          return { _tag: "Digest" } as const
        }
        yield* keep(polled, notice)
        return { _tag: "Polling" } as const
      })

    const inbox = (responder: string): Stream.Stream<Notice> =>
      Stream.unwrapScoped(
        Effect.map(
          Effect.acquireRelease(
            Effect.tap(Queue.unbounded<Notice>(), (queue) =>
              Effect.sync(() => inboxes.set(responder, new Set([...(inboxes.get(responder) ?? []), queue])))),
            (queue) => Effect.zipRight(Effect.sync(() => inboxes.get(responder)?.delete(queue)), Queue.shutdown(queue))
          ),
          (queue) => Stream.fromQueue(queue)
        )
      )

    const service: Service = {
      notify,
      inbox,
      pending: (responder) =>
        Effect.map(Clock.currentTimeMillis, (now) => (polled.get(responder) ?? []).filter((n) => n.deadline > now)),
      takeDigest: (responder) =>
        Effect.sync(() => {
          const all = digests.get(responder) ?? []
          digests.delete(responder)
          return all
        })
    }
    return service
  })

/** The channels as a layer (an HttpClient for the webhooks: `NodeHttpClient.layerUndici`, `FetchHttpClient.layer`). */
export const layer = (options: Options = {}): Layer.Layer<Notifications, never, HttpClient.HttpClient> =>
  Layer.effect(Notifications, make(options))
