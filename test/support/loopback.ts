/**
 * A real HTTP server on 127.0.0.1 (port 0) for tests of HTTP clients.
 *
 * `make(handler)` starts it in the current Scope and closes it (destroying open
 * connections) when the scope closes. Every request is recorded with its headers
 * and body, and `handler` gets the 1-based request number, so a script can answer
 * differently on each attempt. A safety timer closes the server by itself after
 * `lifetime` even if a test forgets to, so a test run never hangs on it.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as http from "node:http"
import type * as net from "node:net"

export interface RecordedRequest {
  readonly method: string
  readonly url: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown
  /** Milliseconds since the epoch when the request arrived (real time). */
  readonly at: number
}

export type Handler = (request: RecordedRequest, response: http.ServerResponse, n: number) => void

export interface Loopback {
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  readonly port: number
  /** The requests received so far, in order. */
  readonly requests: ReadonlyArray<RecordedRequest>
}

const parseJson = (body: string): unknown => {
  if (body === "") return undefined
  try {
    return JSON.parse(body)
  } catch {
    return undefined
  }
}

export const make = (
  handler: Handler,
  options: { readonly lifetime?: number } = {}
): Effect.Effect<Loopback, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ server: http.Server; sockets: Set<net.Socket>; loopback: Loopback; timer: NodeJS.Timeout }>(
      (resume) => {
        const requests: Array<RecordedRequest> = []
        const sockets = new Set<net.Socket>()
        const server = http.createServer((req, res) => {
          const chunks: Array<Buffer> = []
          req.on("data", (chunk: Buffer) => chunks.push(chunk))
          req.on("end", () => {
            const body = Buffer.concat(chunks).toString("utf8")
            const recorded: RecordedRequest = {
              method: req.method ?? "",
              url: req.url ?? "",
              headers: req.headers,
              body,
              json: parseJson(body),
              at: Date.now()
            }
            requests.push(recorded)
            handler(recorded, res, requests.length)
          })
        })
        server.on("connection", (socket) => {
          sockets.add(socket)
          socket.on("close", () => sockets.delete(socket))
        })
        const timer = setTimeout(() => {
          for (const socket of sockets) socket.destroy()
          server.close()
        }, options.lifetime ?? 20_000)
        timer.unref()
        server.listen(0, "127.0.0.1", () => {
          const address = server.address() as net.AddressInfo
          resume(Effect.succeed({
            server,
            sockets,
            timer,
            loopback: { url: `http://127.0.0.1:${address.port}`, port: address.port, requests }
          }))
        })
      }
    ),
    ({ server, sockets, timer }) =>
      Effect.async<void>((resume) => {
        clearTimeout(timer)
        for (const socket of sockets) socket.destroy()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ loopback }) => loopback))

/** A port on 127.0.0.1 with nothing listening (bound, then released). */
export const closedPort: Effect.Effect<number> = Effect.async<number>((resume) => {
  const server = http.createServer()
  server.listen(0, "127.0.0.1", () => {
    const port = (server.address() as net.AddressInfo).port
    server.close(() => resume(Effect.succeed(port)))
  })
})

/** Answers with a JSON body. */
export const json = (response: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  response.writeHead(status, { "content-type": "application/json", ...headers })
  response.end(JSON.stringify(body))
}

/** Answers with raw text. */
export const text = (
  response: http.ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {}
) => {
  response.writeHead(status, { "content-type": "text/plain", ...headers })
  response.end(body)
}

/** Writes a Server-Sent Events stream: each item becomes a `data:` event; `end` closes it. */
export const sse = (
  response: http.ServerResponse,
  events: ReadonlyArray<unknown>,
  options: { readonly done?: boolean; readonly end?: boolean } = {}
) => {
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
  for (const event of events) {
    response.write(`data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`)
  }
  if (options.done ?? true) response.write("data: [DONE]\n\n")
  if (options.end ?? true) response.end()
}
