/**
 * Request bodies as the edge reads them: bounded in bytes while they arrive, JSON
 * only (a `Content-Type` other than application/json is refused, so a web page
 * cannot post to a local server without a CORS preflight), parsed once.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as Effect from "effect/Effect"
import * as Text from "../../domain/Text.js"

/** Why a body was refused, with its status. */
export interface BodyProblem {
  readonly status: 400 | 413 | 415
  readonly message: string
}

/**
 * Reads the body as text, at most `maxBytes`. Past the limit the rest is drained
 * and dropped (not destroyed, which would cut the connection before the 413).
 */
const readText = (
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number
): Effect.Effect<string, BodyProblem> =>
  Effect.async<string, BodyProblem>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let size = 0
    let settled = false
    const detach = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const settle = (result: Effect.Effect<string, BodyProblem>) => {
      if (settled) return
      settled = true
      detach()
      resume(result)
    }
    function onData(chunk: Buffer) {
      size += chunk.length
      if (size <= maxBytes) {
        chunks.push(chunk)
        return
      }
      settle(Effect.fail(tooLarge(maxBytes)))
      source.resume()
    }
    function onEnd() {
      settle(Effect.succeed(Buffer.concat(chunks).toString("utf8")))
    }
    function onError() {
      settle(Effect.fail({ status: 400, message: "The request body could not be read" }))
    }
    if (source.readableEnded) {
      settle(Effect.fail({ status: 400, message: "The request body was already consumed" }))
      return
    }
    source.on("data", onData)
    source.on("end", onEnd)
    source.on("error", onError)
    return Effect.sync(detach)
  })

const tooLarge = (maxBytes: number): BodyProblem => ({
  status: 413,
  message: `The request body exceeds the limit of ${maxBytes} bytes`
})

/** The body parsed as JSON, at most `maxBytes`, sent as application/json. */
export const readJson = (
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number
): Effect.Effect<unknown, BodyProblem> => {
  const contentType = request.headers["content-type"]
  if (contentType === undefined || !/^application\/json\s*(;|$)/i.test(contentType.trim())) {
    return Effect.fail({
      status: 415,
      message: `Content-Type must be application/json, got ${
        contentType === undefined ? "none" : JSON.stringify(Text.excerpt(contentType, 60))
      }`
    })
  }
  const declared = Number(request.headers["content-length"])
  if (Number.isFinite(declared) && declared > maxBytes) return Effect.fail(tooLarge(maxBytes))
  return Effect.flatMap(readText(request, maxBytes), (text) =>
    text.trim() === ""
      ? Effect.fail<BodyProblem>({ status: 400, message: "The request body is empty: send a JSON object" })
      : Effect.try({
          try: (): unknown => JSON.parse(text),
          catch: (e): BodyProblem => ({
            status: 400,
            message: `The request body is not valid JSON: ${Text.excerpt(Text.messageOf(e), 120)}`
          })
        })
  )
}

