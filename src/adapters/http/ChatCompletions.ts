/**
 * `POST /v1/chat/completions`: OpenAI's chat completions, as JSON or as an SSE
 * stream. The handler only renames OpenAI's fields (`OpenAi.ts`) into a
 * SystemRequest and the answer back; OpenAI's API is stateless (the client sends
 * the whole history each time), so the session a completion opened is dropped
 * once it is answered.
 *
 * A stream's status and headers wait for the first delta or the answer, so that
 * an early failure is still a plain JSON error with its status; a failure after
 * that is an error event in the stream. Events are framed by
 * `@effect/experimental`'s Sse encoder (`data: <json>` and a blank line, as
 * OpenAI sends them).
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Issues from "../../domain/Issues.js"
import type { SystemError } from "../../domain/System.js"
import { SystemRequest, type SystemResponse } from "../../domain/System.js"
import { PaganticSystem } from "../../programs/Facade.js"
import { ConversationStore } from "../../services/ConversationStore.js"
import { Engine } from "../../services/Engine.js"
import { ChatCompletionRequest, type RefusalStatus } from "./Api.js"
import * as Body from "./Body.js"
import type { Settings } from "./Config.js"
import * as Edge from "./Edge.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import * as OpenAi from "./OpenAi.js"
import { traceIdOf } from "./Status.js"

/** What a running request sends its stream: a piece of text, then its answer. */
type Item =
  | { readonly _tag: "Delta"; readonly text: string }
  | { readonly _tag: "Done"; readonly response: SystemResponse }

/** One SSE `message` event holding `data` as JSON, framed by the platform's encoder. */
const sse = (data: unknown): string =>
  Sse.encoder.write({ _tag: "Event", event: "message", id: undefined, data: JSON.stringify(data) })

/** OpenAI's end of stream: a `message` event whose data is `[DONE]`. */
const done = Sse.encoder.write({ _tag: "Event", event: "message", id: undefined, data: "[DONE]" })

type Meta = Parameters<typeof OpenAi.chunk>[0]

/**
 * The SSE events of a streamed completion, from its first item on: the role,
 * the deltas (or the whole content at the end when none came), a last chunk with
 * usage and pagantic's extension (or an error event), then `[DONE]`.
 */
const events = (first: Item, rest: Queue.Queue<Item>, meta: Meta, structured: boolean) =>
  Stream.concat(Stream.succeed(first), Stream.fromQueue(rest)).pipe(
    Stream.takeUntil((item) => item._tag === "Done"),
    Stream.mapAccum(false, (streamed, item): readonly [boolean, ReadonlyArray<string>] => {
      if (item._tag === "Delta") return [true, item.text === "" ? [] : [sse(OpenAi.chunk(meta, { content: item.text }))]]
      const response = item.response
      if (response.error !== undefined) return [streamed, [sse(Edge.openAiError(response.error))]]
      const content = OpenAi.contentOf(response, structured)
      return [
        streamed,
        [
          ...(streamed || content === "" ? [] : [sse(OpenAi.chunk(meta, { content }))]),
          sse(
            OpenAi.chunk(meta, {}, OpenAi.finishReasonOf(response.stopReason), {
              usage: OpenAi.usageOf(response),
              pagantic: OpenAi.extensionOf(response)
            })
          )
        ]
      ]
    }),
    Stream.mapConcat((lines) => lines),
    Stream.prepend(Chunk.of(sse(OpenAi.chunk(meta, { role: "assistant", content: "" })))),
    Stream.concat(Stream.succeed(done)),
    Stream.encodeText
  )

/** The handler of `/v1/chat/completions`. */
export const make = (settings: Settings) =>
  Effect.gen(function* () {
    const system = yield* PaganticSystem
    const engine = yield* Engine
    const store = yield* Effect.serviceOption(ConversationStore)
    const forget = (response: SystemResponse) =>
      Option.isSome(store) && response.sessionId !== undefined ? store.value.clear(response.sessionId) : Effect.void
    const newRequestId = yield* Lifetime.newRequestIds
    const now = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const requestId = yield* newRequestId
        const refuse = (error: SystemError, status?: RefusalStatus) => Edge.refuseChat(error, requestId, status)
        const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
        if (Either.isLeft(body)) return yield* refuse(Edge.invalidRequest(body.left.message), body.left.status)
        const checked = Either.flatMap(
          Guard.checkShape(body.right, settings.limits),
          () => Guard.checkChat(body.right, settings.limits)
        )
        if (Either.isLeft(checked)) return yield* refuse(Edge.fromProblem(checked.left))
        const decoded = Schema.decodeUnknownEither(ChatCompletionRequest, { errors: "all" })(body.right)
        if (Either.isLeft(decoded)) {
          const issues = Issues.describe(decoded.left, "a chat completion request object")
          return yield* refuse(Edge.invalidRequest(`Invalid chat completion request: ${issues.join("; ")}`, { issues }))
        }
        const completion = decoded.right
        const envelope = OpenAi.toEnvelope(completion, {
          requestId,
          traceId: traceIdOf(request.headers["traceparent"]),
          timeoutMs: settings.limitMs
        })
        if (Either.isLeft(envelope)) return yield* refuse(Edge.invalidRequest(envelope.left))
        // decoded here rather than in the facade, so a problem names the client's field (max_tokens, not hints.maxTokens)
        const systemRequest = Schema.decodeUnknownEither(SystemRequest, { errors: "all" })(envelope.right)
        if (Either.isLeft(systemRequest)) {
          const issues = Issues.describe(systemRequest.left, "a chat completion request object", "the request", OpenAi.clientField)
          return yield* refuse(Edge.invalidRequest(`Invalid chat completion request: ${issues.join("; ")}`, { issues }))
        }
        const structured = OpenAi.isStructured(completion)
        const meta = {
          id: OpenAi.completionId(requestId),
          model: (yield* engine.modelInfo).name,
          created: yield* now
        }

        if (completion.stream !== true) {
          const response = yield* Lifetime.runTied(system, requestId, system.run(systemRequest.right), settings.backstop)
          yield* forget(response)
          if (response.error !== undefined) return yield* refuse(response.error)
          return OpenAi.toCompletion(response, { ...meta, structured })
        }

        const queue = yield* Queue.unbounded<Item>()
        const fiber = yield* Effect.forkDaemon(
          system
            .run(systemRequest.right, {
              onProgress: (p) => (p._tag === "TextDelta" ? Queue.offer(queue, { _tag: "Delta", text: p.text }) : Effect.void)
            })
            .pipe(
              Effect.tap(forget),
              Effect.flatMap((response) => Queue.offer(queue, { _tag: "Done", response }))
            )
        )
        const stop = Lifetime.stopRun(system, requestId, fiber)
        const first = yield* Queue.take(queue).pipe(Effect.onInterrupt(() => stop))
        if (first._tag === "Done" && first.response.error !== undefined) return yield* refuse(first.response.error)
        return HttpServerResponse.stream(events(first, queue, meta, structured).pipe(Stream.ensuring(stop)), {
          contentType: "text/event-stream",
          headers: { "cache-control": "no-cache", "x-request-id": requestId }
        })
      })
  })
