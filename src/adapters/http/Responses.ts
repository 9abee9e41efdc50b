/**
 * `POST /v1/responses`: OpenAI's Responses API, the one `@effect/ai-openai`'s
 * OpenAiLanguageModel and the newer OpenAI SDK calls speak. The body is translated
 * to a chat completions body (`ResponsesWire.toChat`) and started exactly as one
 * (`ChatCompletions.makeStart`: the same checks, limits, tools protocol and
 * refusals); the answer is a `response` object, or with `stream: true` the
 * Responses stream: `response.created`, `response.in_progress`, the message item
 * and its `response.output_text.delta`s as they come, the `function_call` items of
 * client tools, then `response.completed` (or `response.incomplete` when cut by
 * `max_output_tokens`) with the usage. Refusals are OpenAI's `{ error }`, naming
 * the Responses field (`max_output_tokens`, `text.format`, `input`). Nothing is
 * stored (`store` is ignored): send the whole conversation as `input`.
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import type { SystemResponse } from "../../domain/System.js"
import { ChatFailure } from "./Api.js"
import * as Body from "./Body.js"
import * as ChatCompletions from "./ChatCompletions.js"
import type { Settings } from "./Config.js"
import * as Refusals from "./Refusals.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import * as OpenAi from "./OpenAi.js"
import * as Wire from "./ResponsesWire.js"

/** A refusal's `param` said as the Responses client wrote it. */
const forResponses = (failure: ChatFailure): ChatFailure =>
  new ChatFailure({
    status: failure.status,
    body: { error: { ...failure.body.error, param: Wire.responsesParam(failure.body.error.param) } }
  })

/** The Responses stream's events for one streamed answer. */
const events = (
  started: Extract<ChatCompletions.Started, { _tag: "Streaming" }>,
  meta: Wire.Meta,
  request: Record<string, unknown>
) => {
  let sequence = 0
  const event = (data: Record<string, unknown>): string =>
    Sse.encoder.write({
      _tag: "Event",
      event: String(data.type),
      id: undefined,
      data: JSON.stringify({ ...data, sequence_number: sequence++ })
    })
  const message = Wire.messageItem(meta, "", "in_progress")
  let text = ""
  let opened = false
  const open = (): ReadonlyArray<string> => {
    if (opened) return []
    opened = true
    return [
      event({ type: "response.output_item.added", output_index: 0, item: message }),
      event({
        type: "response.content_part.added",
        item_id: message.id,
        output_index: 0,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [] }
      })
    ]
  }
  const finish = (response: SystemResponse): ReadonlyArray<string> => {
    const structured = started.shape.structured
    const content = OpenAi.contentOf(response, structured)
    const calls = Wire.callItems(meta, response)
    const lines: Array<string> = []
    const hasMessage = opened || content !== "" || calls.length === 0
    if (hasMessage) {
      lines.push(...open())
      // the whole content when none was streamed (a structured answer, a non-streaming engine)
      if (text === "" && content !== "") {
        lines.push(event({ type: "response.output_text.delta", item_id: message.id, output_index: 0, content_index: 0, delta: content, logprobs: [] }))
      }
      const done = Wire.messageItem(meta, content, "completed")
      lines.push(
        event({ type: "response.output_text.done", item_id: message.id, output_index: 0, content_index: 0, text: content, logprobs: [] }),
        event({ type: "response.content_part.done", item_id: message.id, output_index: 0, content_index: 0, part: done.content[0] }),
        event({ type: "response.output_item.done", output_index: 0, item: done })
      )
    }
    calls.forEach((item, i) => {
      const index = (hasMessage ? 1 : 0) + i
      lines.push(
        event({ type: "response.output_item.added", output_index: index, item: { ...item, status: "in_progress", arguments: "" } }),
        event({ type: "response.function_call_arguments.delta", item_id: item.id, output_index: index, delta: item.arguments }),
        event({ type: "response.function_call_arguments.done", item_id: item.id, output_index: index, arguments: item.arguments }),
        event({ type: "response.output_item.done", output_index: index, item })
      )
    })
    const final = Wire.responseObject(meta, request, { response, structured })
    lines.push(event({ type: final.status === "incomplete" ? "response.incomplete" : "response.completed", response: final }))
    return lines
  }
  const pending = Wire.responseObject(meta, request, undefined)
  return Stream.concat(Stream.succeed(started.first), Stream.fromQueue(started.rest)).pipe(
    Stream.mapAccum(false, (_, item): readonly [boolean, { readonly lines: ReadonlyArray<string>; readonly last: boolean }] => {
      if (item._tag === "Delta") {
        if (item.text === "") return [false, { lines: [], last: false }]
        text += item.text
        return [false, {
          lines: [
            ...open(),
            event({ type: "response.output_text.delta", item_id: message.id, output_index: 0, content_index: 0, delta: item.text, logprobs: [] })
          ],
          last: false
        }]
      }
      if (item.response.error !== undefined) {
        const error = Refusals.openAiError(item.response.error, undefined, started.shape.requestId).error
        return [true, { lines: [event({ type: "error", code: error.code, message: error.message, param: error.param })], last: true }]
      }
      return [true, { lines: finish(item.response), last: true }]
    }),
    Stream.takeUntil((out) => out.last),
    Stream.mapConcat((out) => out.lines),
    Stream.prepend(
      Chunk.make(
        event({ type: "response.created", response: pending }),
        event({ type: "response.in_progress", response: pending })
      )
    ),
    Stream.encodeText
  )
}

/** The handler of `/v1/responses`. */
export const make = (settings: Settings) =>
  Effect.gen(function* () {
    const start = yield* ChatCompletions.makeStart(settings)
    const newRequestId = yield* Lifetime.newRequestIds
    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const requestId = yield* newRequestId
        const refuse = (message: string, param: string | undefined) =>
          Refusals.refuseChat(Refusals.invalidRequest(message, param === undefined ? {} : { param }), requestId)
        const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
        if (Either.isLeft(body)) {
          return yield* Refusals.refuseChat(Refusals.invalidRequest(body.left.message), requestId, body.left.status)
        }
        const shape = Guard.checkShape(body.right, settings.limits)
        if (Either.isLeft(shape)) {
          return yield* refuse(`${shape.left.field}: ${shape.left.message}`, OpenAi.paramOf(shape.left.field))
        }
        const chat = Wire.toChat(body.right)
        if (Either.isLeft(chat)) return yield* refuse(chat.left.message, chat.left.param)
        const original = body.right as Record<string, unknown>
        const started = yield* Effect.mapError(
          start(chat.right, { requestId, traceparent: request.headers["traceparent"] }),
          forResponses
        )
        const meta: Wire.Meta = { id: Wire.responseId(requestId), model: started.meta.model, created: started.meta.created }
        if (started._tag === "Completed") {
          const response = started.responses[0]!
          return HttpServerResponse.unsafeJson(
            Wire.responseObject(meta, original, { response, structured: started.structured }),
            { headers: { "x-request-id": Refusals.requestIdHeader(requestId) } }
          )
        }
        return HttpServerResponse.stream(events(started, meta, original).pipe(Stream.ensuring(started.stop)), {
          contentType: "text/event-stream",
          headers: { "cache-control": "no-cache", "x-request-id": Refusals.requestIdHeader(requestId) }
        })
      })
  })
