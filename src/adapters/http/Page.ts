/**
 * The runs page: a small web page served by `pagantic serve`, and the read-only
 * routes it reads the EventLog through.
 *
 *   GET /                  the page (HTML; no data in it, so it needs no key)
 *   GET /ui/page.css, /ui/page.js   its stylesheet and script
 *   GET /v1/events         the EventLog's recent events, oldest first: `{ events }`
 *                          (`?requestId=` one request's, `?limit=` the newest N, default 2,000)
 *   GET /v1/events/stream  the same as server-sent events, then each new event as it is recorded
 *
 * The page shows what the library already records, nothing of its own: the
 * EventLog's events (a bounded ring) and the durable runs through the runs routes.
 * The events routes sit behind the edge like every other route (host check, the
 * API key); the page and its two assets are static and open, like /health. The
 * page takes the key from a field or, once, from its address's fragment
 * (`/#key=...`, which no request carries) and sends it as a Bearer header, never
 * in a request's URL; its Content-Security-Policy allows only its own script, style and
 * origin, and it renders every value as text (`PageAssets.ts`).
 *
 * A trace file is the events (and runs) as JSON: what `GET /v1/events` answers,
 * or JSON lines (one event a line, or `{ "_tag": "Run", run, records }`) as the
 * page's "Download trace" writes them. `traceHtml` makes the same page from one,
 * self-contained (`pagantic trace show`).
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as Sse from "@effect/experimental/Sse"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { createHash } from "node:crypto"
import { Event } from "../../domain/Event.js"
import * as Text from "../../domain/Text.js"
import { EventLog, type Service as EventLogService } from "../../services/EventLog.js"
import * as Admission from "./Admission.js"
import * as Refusals from "./Refusals.js"
import type * as Guard from "./Guard.js"
import { RequestOwners, type Service as OwnersService } from "./Owners.js"
import { CurrentPrincipal } from "./Principal.js"
import { body, css, script } from "./PageAssets.js"

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

/** The page's static paths: open (no key), like /health. */
export const staticPaths: ReadonlyArray<string> = ["/", "/ui/page.css", "/ui/page.js"]

/** The events routes (behind the key). */
export const eventsPaths: ReadonlyArray<string> = ["/v1/events", "/v1/events/stream"]

/** Most events one answer of `/v1/events` holds (the in-memory ring keeps 10,000 by default). */
export const maxEventsLimit = 10_000

/** Events sent when no `limit` is given. */
export const defaultEventsLimit = 2_000

/** How often the stream looks at the ring for new events, on a log that does not push them (no `subscribe`). */
const pollEvery = "250 millis"

// ---------------------------------------------------------------------------
// Pages
// ---------------------------------------------------------------------------

/** The live page's policy: its own script, style and origin only; nothing inline, no frames, no forms. */
const livePolicy =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const pageHeaders = (policy: string) => ({
  "content-security-policy": policy,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
})

/** The live page's HTML (its assets under `ui/`, its data from the events and runs routes). */
export const liveHtml = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pagantic runs</title>
<link rel="stylesheet" href="ui/page.css">
<script src="ui/page.js" defer></script>
</head>
<body>${body(true)}
</body>
</html>
`

const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`

/** A trace's data as the page reads it. */
export interface Trace {
  /** Encoded events, oldest first. */
  readonly events: ReadonlyArray<unknown>
  /** Durable runs: the run as the runs routes send it and its thread records. */
  readonly runs: ReadonlyArray<{ readonly run: unknown; readonly records: ReadonlyArray<unknown> }>
}

/**
 * JSON that may sit inside a `<script>` element: every `<`, `>` and `&` escaped
 * (so `</script>` in the data cannot end the element), and the line separators
 * some parsers stop at.
 */
export const scriptSafeJson = (value: unknown): string =>
  JSON.stringify(value)
    .replace(/</g, "\\u003c")
    .replace(/>/g, "\\u003e")
    .replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029")

/**
 * The page from a trace, self-contained: the stylesheet, the script and the data
 * inline, allowed by their hashes only (the data is a JSON block, never run), with
 * no network access at all.
 */
export const traceHtml = (trace: Trace, title = "pagantic trace"): string => {
  const policy =
    `default-src 'none'; script-src ${sha256(script)}; style-src ${sha256(css)}; img-src blob:; base-uri 'none'; form-action 'none'`
  const safeTitle = title.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${safeTitle}</title>
<style>${css}</style>
</head>
<body>${body(false)}
<script type="application/json" id="pagantic-trace">${scriptSafeJson(trace)}</script>
<script>${script}</script>
</body>
</html>
`
}

// ---------------------------------------------------------------------------
// The events routes
// ---------------------------------------------------------------------------

const encodeEvent = Schema.encodeSync(Event)

const quote = (value: string) => JSON.stringify(Text.excerpt(value, 60))

/** Most characters of a request id asked for. */
const maxRequestIdLength = 512

interface EventsQuery {
  readonly requestId?: string | undefined
  readonly limit: number
}

/** The query of the events routes: `requestId` and `limit`, each at most once. */
export const eventsQuery = (url: string): Either.Either<EventsQuery, Guard.Problem> => {
  const params = new URL(url, "http://localhost").searchParams
  for (const name of params.keys()) {
    if (name !== "requestId" && name !== "limit") {
      return Either.left({ field: name, message: `unknown query parameter ${quote(name)}: use requestId or limit` })
    }
  }
  const ids = params.getAll("requestId")
  const limits = params.getAll("limit")
  if (ids.length > 1) return Either.left({ field: "requestId", message: "give requestId at most once" })
  if (limits.length > 1) return Either.left({ field: "limit", message: "give limit at most once" })
  const requestId = ids[0]
  if (requestId !== undefined && (requestId.length === 0 || requestId.length > maxRequestIdLength)) {
    return Either.left({ field: "requestId", message: `expected 1 to ${maxRequestIdLength} characters, got ${requestId.length}` })
  }
  const limitText = limits[0]
  if (limitText === undefined) return Either.right({ requestId, limit: defaultEventsLimit })
  const limit = Number(limitText)
  return /^\d{1,6}$/.test(limitText) && limit >= 1 && limit <= maxEventsLimit
    ? Either.right({ requestId, limit })
    : Either.left({ field: "limit", message: `expected a whole number from 1 to ${maxEventsLimit}, got ${quote(limitText)}` })
}

/** Whether `event` is one the query asks for and the caller may see (`visible`: its own, or any for an admin). */
const matches = (query: EventsQuery, visible: (event: Event) => boolean) => (event: Event): boolean =>
  (query.requestId === undefined || event.correlation.requestId === query.requestId) && visible(event)

/** The newest `limit` events `keep` keeps, oldest first. */
const select = (events: ReadonlyArray<Event>, keep: (event: Event) => boolean, limit: number): ReadonlyArray<Event> => {
  const kept = events.filter(keep)
  return kept.length > limit ? kept.slice(kept.length - limit) : kept
}

/** The caller's view of the log: its own events (an admin's: all). */
const visibleTo = (owners: OwnersService) =>
  Effect.map(CurrentPrincipal, (principal) => (event: Event) => owners.canSee(principal, event))

/**
 * The events recorded after `last` (by identity: the ring keeps each event
 * object as recorded and drops the oldest first, so when `last` is gone, every
 * event left is newer).
 */
export const newerThan = <A>(events: ReadonlyArray<A>, last: A | undefined): ReadonlyArray<A> => {
  if (last === undefined) return events
  const at = events.lastIndexOf(last)
  return at === -1 ? events : events.slice(at + 1)
}

const sseEvent = (data: unknown) => Sse.encoder.write({ _tag: "Event", event: "message", id: undefined, data: JSON.stringify(data) })

const noEventLog = (path: string) =>
  Refusals.errorResponse(
    path,
    404,
    Refusals.invalidRequest("this server keeps no event log (provide an EventLog to its HTTP layer)", { field: "path" }),
    `req_${globalThis.crypto.randomUUID()}`
  )

const badQuery = (path: string, problem: Guard.Problem) =>
  Refusals.errorResponse(path, 400, Refusals.fromProblem(problem), `req_${globalThis.crypto.randomUUID()}`)

const eventsJson = (log: EventLogService, owners: OwnersService, path: string, url: string) =>
  Effect.gen(function* () {
    const query = eventsQuery(url)
    if (Either.isLeft(query)) return badQuery(path, query.left)
    const keep = matches(query.right, yield* visibleTo(owners))
    const events = select(yield* log.events, keep, query.right.limit)
    return HttpServerResponse.unsafeJson({ events: events.map((e) => encodeEvent(e)) }, { headers: { "cache-control": "no-store" } })
  })

/**
 * The events recorded after the `first` look, `keep`'s only: pushed by the log
 * as recorded when it can (`subscribe`), else found by looking again every
 * 250 ms. Subscribed before the look, so nothing recorded in between is lost;
 * what was queued by then and the look holds too is dropped.
 */
const recorded = (log: EventLogService, keep: (event: Event) => boolean, limit: number): Stream.Stream<ReadonlyArray<Event>> => {
  const subscribe = log.subscribe
  if (subscribe === undefined) {
    return Stream.unwrap(Effect.gen(function* () {
      const first = yield* log.events
      // the last event sent (or passed over), to know which are new at the next look
      const last = yield* Ref.make<Event | undefined>(first[first.length - 1])
      const fresh = Stream.repeatEffectWithSchedule(
        Effect.flatMap(log.events, (events) =>
          Ref.modify(last, (previous) => {
            const newer = newerThan(events, previous)
            return [newer.filter(keep), newer.length > 0 ? newer[newer.length - 1] : previous]
          })),
        Schedule.spaced(pollEvery)
      )
      return Stream.concat(Stream.make(select(first, keep, limit)), fresh)
    }))
  }
  return Stream.unwrapScoped(Effect.gen(function* () {
    const pushed = yield* subscribe
    const first = yield* log.events
    const queued = newerThan(Array.from(yield* Queue.takeAll(pushed)), first[first.length - 1])
    const fresh = Stream.fromQueue(pushed).pipe(Stream.filter(keep), Stream.chunks, Stream.map((chunk) => Array.from(chunk)))
    return Stream.concat(Stream.make(select(first, keep, limit), queued.filter(keep)), fresh)
  }))
}

/**
 * `/v1/events/stream`: the caller's newest events, then each one as it is
 * recorded, as server-sent events, with a comment every 15 s to keep the
 * connection. A listener holds one of the server's `maxEventListeners` places
 * until its stream closes; past them 429 with `Retry-After`.
 */
const eventsStream = (log: EventLogService, owners: OwnersService, listeners: Admission.Places, path: string, url: string) =>
  Effect.gen(function* () {
    const query = eventsQuery(url)
    if (Either.isLeft(query)) return badQuery(path, query.left)
    const keep = matches(query.right, yield* visibleTo(owners))
    const place = yield* listeners.take((yield* CurrentPrincipal).name)
    if (Either.isLeft(place)) return Admission.response(path, place.left, `req_${globalThis.crypto.randomUUID()}`)
    const body = recorded(log, keep, query.right.limit).pipe(
      Stream.map((events) => events.map((e) => sseEvent(encodeEvent(e))).join("")),
      Stream.filter((text) => text.length > 0),
      Stream.merge(Stream.repeatEffectWithSchedule(Effect.succeed(": keep-alive\n\n"), Schedule.spaced("15 seconds")), {
        haltStrategy: "left"
      }),
      Stream.encodeText,
      Stream.ensuring(place.right)
    )
    return HttpServerResponse.stream(body, { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } })
  })

/** The places of `/v1/events/stream` listeners a server has. */
export const listenerPlaces = (settings: { readonly maxEventListeners: number }): Admission.Places =>
  Admission.make({
    max: settings.maxEventListeners,
    what: "event-stream listeners",
    option: "maxEventListeners",
    variable: "PAGANTIC_MAX_EVENT_LISTENERS"
  })

// ---------------------------------------------------------------------------
// The middleware
// ---------------------------------------------------------------------------

const pathOf = (url: string): string => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/**
 * The page's routes in front of the API's (inside the edge, which checks the
 * host and, except on the static paths, the key). The EventLog is the server's
 * own; without one the events routes answer 404 saying so. Other paths and
 * methods go on to the API. At most `maxEventListeners` event streams are open
 * at once (a HEAD of the stream opens none).
 */
export const middleware = (
  settings: { readonly maxEventListeners: number }
): Effect.Effect<(app: HttpApp.Default) => HttpApp.Default, never, RequestOwners> =>
  Effect.map(
    Effect.all([Effect.serviceOption(EventLog), RequestOwners]),
    ([log, owners]) => {
      const listeners = listenerPlaces(settings)
      return (app) =>
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
          if (request.method !== "GET" && request.method !== "HEAD") return app
          const path = pathOf(request.url)
          switch (path) {
            case "/":
              return Effect.succeed(HttpServerResponse.html(liveHtml).pipe(HttpServerResponse.setHeaders(pageHeaders(livePolicy))))
            case "/ui/page.css":
              return Effect.succeed(HttpServerResponse.text(css, { contentType: "text/css; charset=utf-8", headers: pageHeaders(livePolicy) }))
            case "/ui/page.js":
              return Effect.succeed(
                HttpServerResponse.text(script, { contentType: "text/javascript; charset=utf-8", headers: pageHeaders(livePolicy) })
              )
            case "/v1/events":
              return Option.isNone(log) ? Effect.succeed(noEventLog(path)) : eventsJson(log.value, owners, path, request.url)
            case "/v1/events/stream":
              if (Option.isNone(log)) return Effect.succeed(noEventLog(path))
              return request.method === "HEAD"
                ? Effect.succeed(HttpServerResponse.empty({ status: 200, headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } }))
                : eventsStream(log.value, owners, listeners, path, request.url)
            default:
              return app
          }
        })
    }
  )
