/**
 * `pagantic serve` for tests: the HTTP adapter on 127.0.0.1 (port 0) over
 * `Live.layer`, in the current Scope, with a client that never hangs (every call
 * has a timeout) and reads any answer (JSON or not).
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Http from "../../src/adapters/Http.js"
import * as Live from "../../src/adapters/Live.js"
import type { Event } from "../../src/domain/Event.js"
import type { Engine } from "../../src/services/Engine.js"
import { ConversationStore } from "../../src/services/ConversationStore.js"
import { EventLog } from "../../src/services/EventLog.js"
import type { Metrics } from "../../src/services/Metrics.js"
import type * as Tool from "../../src/services/ToolRegistry.js"

export interface Served {
  readonly url: string
  readonly port: number
  readonly events: Effect.Effect<ReadonlyArray<Event>>
  /** The sessions the server's ConversationStore holds. */
  readonly sessions: Effect.Effect<ReadonlyArray<string>>
  /** Drops every session the server's ConversationStore holds (what a server keeps by design). */
  readonly clearSessions: Effect.Effect<void>
}

export interface ServeOptions<E, ER = never> {
  readonly engine: Layer.Layer<Engine, E>
  readonly tools?: ReadonlyArray<Tool.Tool<any, any>>
  readonly http?: Http.Options
  /** Observability; default the in-memory event log and metrics (Live's). */
  readonly observe?: Layer.Layer<EventLog | Metrics>
  /** Live's `bundledTasks` (as `pagantic serve` sets it). */
  readonly bundledTasks?: boolean
  /** Live's `facade`, `responders` and durable `runs` (default none: queries in memory). */
  readonly facade?: Live.Options<E>["facade"]
  readonly responders?: Live.Options<E>["responders"]
  readonly runs?: Live.Options<E, ER>["runs"]
}

export const serve = <E, ER = never>(options: ServeOptions<E, ER>): Effect.Effect<Served, E, Scope.Scope> =>
  Effect.gen(function* () {
    const context = yield* Layer.build(
      Http.layer({ port: 0, ...options.http }).pipe(
        Layer.provideMerge(Live.layer({
          engine: options.engine,
          ...(options.tools === undefined ? {} : { tools: options.tools }),
          ...(options.observe === undefined ? {} : { observe: options.observe }),
          ...(options.bundledTasks === undefined ? {} : { bundledTasks: options.bundledTasks }),
          ...(options.facade === undefined ? {} : { facade: options.facade }),
          ...(options.responders === undefined ? {} : { responders: options.responders }),
          ...(options.runs === undefined ? {} : { runs: options.runs })
        }))
      )
    ).pipe(Effect.orDie)
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    const store = Context.get(context, ConversationStore)
    return {
      url: `http://127.0.0.1:${address.port}`,
      port: address.port,
      events: Context.get(context, EventLog).events,
      sessions: store.sessions,
      clearSessions: Effect.flatMap(store.sessions, (ids) => Effect.forEach(ids, store.clear, { discard: true }))
    }
  })

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: any
}

export interface SendInit {
  readonly method?: string
  readonly body?: string
  readonly headers?: Record<string, string>
  /** Default 15 s. */
  readonly timeoutMs?: number
}

/** One request with fetch; JSON content type unless `headers` say otherwise. */
export const send = (url: string, init: SendInit = {}): Effect.Effect<Reply> =>
  Effect.promise(async (): Promise<Reply> => {
    const res = await fetch(url, {
      method: init.method ?? (init.body === undefined ? "GET" : "POST"),
      headers: { "content-type": "application/json", ...init.headers },
      ...(init.body === undefined ? {} : { body: init.body }),
      signal: AbortSignal.timeout(init.timeoutMs ?? 15_000)
    })
    const text = await res.text()
    let json: unknown = undefined
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { status: res.status, headers: res.headers, text, json }
  })

export const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  send(url, { body: JSON.stringify(body), headers })

export const chatRequest = (content: string, extra: Record<string, unknown> = {}) => ({
  mode: "chat",
  messages: [{ role: "user", content }],
  ...extra
})
