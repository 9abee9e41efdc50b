/**
 * `POST /v1/chat/completions`: OpenAI's chat completions, as JSON or as an SSE
 * stream. The handler only renames OpenAI's fields (`OpenAi.ts`) into a
 * SystemRequest and the answer back; OpenAI's API is stateless (the client sends
 * the whole history each time), so the session a completion opened is dropped
 * once it is answered. A request for `n` choices is n runs of the facade at once
 * (choice i under request id `<id>.<i>`); a choice that fails refuses the whole
 * request.
 *
 * A stream's status and headers wait for the first delta or the answer, so that
 * an early failure is still a plain JSON error with its status; a failure after
 * that is an error event in the stream. Events are framed by
 * `@effect/experimental`'s Sse encoder (`data: <json>` and a blank line, as
 * OpenAI sends them). The client's tool calls are sent whole, one `tool_calls`
 * delta per choice at its end (OpenAI's SDKs accumulate the pieces either way).
 */
import * as Sse from "@effect/experimental/Sse"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Issues from "../../domain/Issues.js"
import { SystemError, SystemRequest, type SystemResponse } from "../../domain/System.js"
import { PaganticSystem } from "../../programs/Facade.js"
import { ConversationStore } from "../../services/ConversationStore.js"
import { Engine } from "../../services/Engine.js"
import { type ChatCompletion, ChatCompletionRequest, type ChatFailure, type RefusalStatus } from "./Api.js"
import * as Body from "./Body.js"
import type { Settings } from "./Config.js"
import * as Refusals from "./Refusals.js"
import * as Guard from "./Guard.js"
import * as Lifetime from "./Lifetime.js"
import * as OpenAi from "./OpenAi.js"
import { RequestOwners } from "./Owners.js"
import { CurrentPrincipal } from "./Principal.js"
import { traceIdOf } from "./Status.js"

/** What a running choice sends its stream: a piece of text, then its answer. */
type Item =
  | { readonly _tag: "Delta"; readonly index: number; readonly text: string }
  | { readonly _tag: "Done"; readonly index: number; readonly response: SystemResponse }

/** One SSE `message` event holding `data` as JSON, framed by the platform's encoder. */
const sse = (data: unknown): string =>
  Sse.encoder.write({ _tag: "Event", event: "message", id: undefined, data: JSON.stringify(data) })

/** OpenAI's end of stream: a `message` event whose data is `[DONE]`. */
const done = Sse.encoder.write({ _tag: "Event", event: "message", id: undefined, data: "[DONE]" })

type Meta = Parameters<typeof OpenAi.chunk>[0]

interface StreamShape {
  readonly choices: number
  readonly structured: boolean
  readonly logprobs: boolean
  /** `stream_options.include_usage`: a last chunk with no choices and the usage of all of them. */
  readonly includeUsage: boolean
  readonly requestId: string
}

/** What the stream has seen: which choices sent text, the answers in. */
interface Seen {
  readonly streamed: ReadonlySet<number>
  readonly responses: ReadonlyMap<number, SystemResponse>
  readonly failed: boolean
}

/** The events of one finished choice: its text when none was streamed, its client tool calls, its finish chunk. */
const finishEvents = (meta: Meta, shape: StreamShape, index: number, streamed: boolean, response: SystemResponse) => {
  const content = OpenAi.contentOf(response, shape.structured)
  const calls = OpenAi.toolCallsOf(response)
  return [
    ...(streamed || content === "" ? [] : [sse(OpenAi.chunk(meta, { content }, null, {}, index))]),
    ...(calls.length === 0
      ? []
      : [sse(OpenAi.chunk(meta, { tool_calls: calls.map((call, i) => ({ index: i, ...call })) }, null, {}, index))]),
    sse(
      OpenAi.chunk(
        meta,
        {},
        OpenAi.finishReasonOf(response.stopReason),
        { pagantic: OpenAi.extensionOf(response) },
        index,
        shape.logprobs ? { logprobs: OpenAi.logprobsOf(response, true) } : {}
      )
    )
  ]
}

/**
 * The SSE events of a streamed completion, from its first item on: the role of
 * each choice, the deltas (or the whole content at the end when none came), the
 * client tool calls as `tool_calls` deltas, a finish chunk per choice with
 * pagantic's extension, the usage chunk when asked, then `[DONE]`. A failed
 * choice ends the stream with an error event.
 */
const events = (first: Item, rest: Queue.Queue<Item>, meta: Meta, shape: StreamShape) =>
  Stream.concat(Stream.succeed(first), Stream.fromQueue(rest)).pipe(
    Stream.mapAccum(
      { streamed: new Set<number>(), responses: new Map<number, SystemResponse>(), failed: false } as Seen,
      (seen, item): readonly [Seen, { readonly lines: ReadonlyArray<string>; readonly last: boolean }] => {
        if (item._tag === "Delta") {
          return [
            { ...seen, streamed: new Set([...seen.streamed, item.index]) },
            { lines: item.text === "" ? [] : [sse(OpenAi.chunk(meta, { content: item.text }, null, {}, item.index))], last: false }
          ]
        }
        const response = item.response
        if (response.error !== undefined) {
          return [{ ...seen, failed: true }, {
            lines: [sse(Refusals.openAiError(forChat(response.error), undefined, shape.requestId))],
            last: true
          }]
        }
        const responses = new Map([...seen.responses, [item.index, response]])
        const last = responses.size === shape.choices
        return [
          { ...seen, responses },
          {
            lines: [
              ...finishEvents(meta, shape, item.index, seen.streamed.has(item.index), response),
              ...(last && shape.includeUsage
                ? [sse(OpenAi.usageChunk(meta, OpenAi.totalUsage([...responses.values()])))]
                : [])
            ],
            last
          }
        ]
      }
    ),
    Stream.takeUntil((out) => out.last),
    Stream.mapConcat((out) => out.lines),
    Stream.prepend(
      Chunk.fromIterable(
        Array.from({ length: shape.choices }, (_, index) =>
          sse(OpenAi.chunk(meta, { role: "assistant", content: "" }, null, {}, index)))
      )
    ),
    Stream.concat(Stream.succeed(done)),
    Stream.encodeText
  )

/**
 * An error as the chat endpoint reports it: the field the facade names (an
 * envelope path such as `toolChoice.name`) said as the client wrote it
 * (`tool_choice.function.name`), in `param`.
 */
const forChat = (error: SystemError): SystemError => {
  const { field } = error.details
  if (typeof field !== "string" || error.details.param !== undefined) return error
  return new SystemError({ ...error, details: { ...error.details, param: OpenAi.paramOf(OpenAi.clientField(field)) } }, true)
}

/** A chat completion once started: its answers, or the first item of its stream and the queue of the rest. */
export type Started =
  | {
    readonly _tag: "Completed"
    readonly responses: ReadonlyArray<SystemResponse>
    readonly meta: Meta
    readonly structured: boolean
    readonly logprobs: boolean
  }
  | {
    readonly _tag: "Streaming"
    readonly first: Item
    readonly rest: Queue.Queue<Item>
    /** Stops every choice still running (the client went away, the stream ended). */
    readonly stop: Effect.Effect<void>
    readonly meta: Meta
    readonly shape: StreamShape
  }

/** What the caller of `makeStart` knows of the HTTP request. */
export interface StartContext {
  readonly requestId: string
  readonly traceparent?: string | undefined
}

export type { Item, Meta, StreamShape }

/**
 * Starts a chat completion from its JSON body (already read and within the body
 * limits): checks it, runs its choices, and answers them or streams them. A
 * refusal is a ChatFailure in OpenAI's shape, naming the client's field. Shared by
 * `/v1/chat/completions` and `/v1/responses` (which translates its body first).
 */
export const makeStart = (settings: Settings) =>
  Effect.gen(function* () {
    const system = yield* PaganticSystem
    const engine = yield* Engine
    const store = yield* Effect.serviceOption(ConversationStore)
    const forget = (response: SystemResponse) =>
      Option.isSome(store) && response.sessionId !== undefined ? store.value.clear(response.sessionId) : Effect.void
    const now = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

    const owners = yield* RequestOwners
    return (body: unknown, context: StartContext): Effect.Effect<Started, ChatFailure> =>
      // the server's own request id, recorded as the caller's: its events are the caller's to see
      Effect.flatMap(CurrentPrincipal, (principal) => owners.claim(context.requestId, principal)).pipe(
        Effect.zipRight(Effect.gen(() => startSteps(settings, system, engine, forget, now, body, context)))
      )
  })

/** The steps of a started chat completion, one generator function for every request (a generator function made per call costs V8 new maps). */
function* startSteps(settings: Settings, system: Context.Tag.Service<typeof PaganticSystem>, engine: Context.Tag.Service<typeof Engine>, forget: (response: SystemResponse) => Effect.Effect<void>, now: Effect.Effect<number>, body: unknown, context: StartContext) {
  const requestId = context.requestId
  const refuse = (error: SystemError, status?: RefusalStatus) => Refusals.refuseChat(forChat(error), requestId, status)
  const refuseField = (message: string, param: string | undefined, details: Record<string, unknown> = {}) =>
    refuse(Refusals.invalidRequest(message, param === undefined ? details : { ...details, param }))
  const checked = Either.flatMap(
    Guard.checkShape(body, settings.limits),
    () => Guard.checkChat(body, settings.limits)
  )
  if (Either.isLeft(checked)) {
    return yield* refuseField(`${checked.left.field}: ${checked.left.message}`, OpenAi.paramOf(checked.left.field), {
      field: checked.left.field
    })
  }
  const decoded = Schema.decodeUnknownEither(ChatCompletionRequest, { errors: "all" })(body)
  if (Either.isLeft(decoded)) {
    const issues = Issues.describe(decoded.left, "a chat completion request object")
    return yield* refuseField(`Invalid chat completion request: ${issues.join("; ")}`, OpenAi.paramOfIssue(issues[0]), {
      issues
    })
  }
  const unsupported = OpenAi.checkUnsupported(body)
  if (Either.isLeft(unsupported)) return yield* refuseField(unsupported.left.message, unsupported.left.param)
  const completion = decoded.right
  const envelope = OpenAi.toEnvelope(completion, {
    requestId,
    traceId: traceIdOf(context.traceparent),
    timeoutMs: settings.limitMs,
    limits: settings.limits
  })
  if (Either.isLeft(envelope)) return yield* refuseField(envelope.left.message, envelope.left.param)
  // decoded here rather than in the facade, so a problem names the client's field (max_tokens, not hints.maxTokens)
  const choices = OpenAi.choicesOf(completion)
  const requests: Array<SystemRequest> = []
  for (let index = 0; index < choices; index++) {
    const systemRequest = Schema.decodeUnknownEither(SystemRequest, { errors: "all" })(
      OpenAi.choiceEnvelope(envelope.right, index)
    )
    if (Either.isLeft(systemRequest)) {
      const issues = Issues.describe(systemRequest.left, "a chat completion request object", "the request", OpenAi.clientField)
      return yield* refuseField(`Invalid chat completion request: ${issues.join("; ")}`, OpenAi.paramOfIssue(issues[0]), {
        issues
      })
    }
    requests.push(systemRequest.right)
  }
  const structured = OpenAi.isStructured(completion)
  const logprobs = completion.logprobs === true
  const meta = {
    id: OpenAi.completionId(requestId),
    model: (yield* engine.modelInfo).name,
    created: yield* now
  }

  if (completion.stream !== true) {
    const answer = (one: SystemRequest) =>
      Effect.tap(Lifetime.runTied(system, one.requestId ?? requestId, system.run(one), settings.backstop), forget)
    // one choice runs in this fiber; several at once
    const responses = requests.length === 1
      ? [yield* answer(requests[0]!)]
      : yield* Effect.forEach(requests, answer, { concurrency: "unbounded" })
    const failed = responses.find((response) => response.error !== undefined)
    if (failed?.error !== undefined) return yield* refuse(failed.error)
    return { _tag: "Completed" as const, responses, meta, structured, logprobs }
  }

  const queue = yield* Queue.unbounded<Item>()
  const fibers = yield* Effect.forEach(requests, (one, index) =>
    Effect.forkDaemon(
      system
        .run(one, {
          onProgress: (p) =>
            p._tag === "TextDelta" ? Queue.offer(queue, { _tag: "Delta", index, text: p.text }) : Effect.void
        })
        .pipe(
          Effect.tap(forget),
          Effect.flatMap((response) => Queue.offer(queue, { _tag: "Done", index, response }))
        )
    ))
  const stop = Effect.forEach(
    fibers,
    (fiber, index) => Lifetime.stopRun(system, requests[index]!.requestId ?? requestId, fiber),
    { concurrency: "unbounded", discard: true }
  )
  const first = yield* Queue.take(queue).pipe(Effect.onInterrupt(() => stop))
  if (first._tag === "Done" && first.response.error !== undefined) {
    yield* stop
    return yield* refuse(first.response.error)
  }
  const shape: StreamShape = {
    choices,
    structured,
    logprobs,
    includeUsage: completion.stream_options?.include_usage === true,
    requestId
  }
  return { _tag: "Streaming" as const, first, rest: queue, stop, meta, shape }
}

/** The handler of `/v1/chat/completions`. */
export const make = (settings: Settings) =>
  Effect.gen(function* () {
    const start = yield* makeStart(settings)
    const newRequestId = yield* Lifetime.newRequestIds
    return (request: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(() => handleSteps(settings, start, newRequestId, request))
  })

/** The steps of a `/v1/chat/completions` request, one generator function for every request (a generator function made per call costs V8 new maps). */
function* handleSteps(settings: Settings, start: (body: unknown, context: StartContext) => Effect.Effect<Started, ChatFailure>, newRequestId: Effect.Effect<string>, request: HttpServerRequest.HttpServerRequest) {
  const requestId = yield* newRequestId
  const body = yield* Effect.either(Body.readJson(request, settings.maxBodyBytes))
  if (Either.isLeft(body)) {
    return yield* Refusals.refuseChat(Refusals.invalidRequest(body.left.message), requestId, body.left.status)
  }
  const started = yield* start(body.right, { requestId, traceparent: request.headers["traceparent"] })
  if (started._tag === "Completed") {
    // written as built, not encoded again by HttpApi through the endpoint's ChatCompletion schema (its success
    // schema, which the OpenAPI document shows): every field of it is plain JSON built here, so the encoding would
    // only copy it; test/HttpFuzz decodes every 200 with that schema, excess properties an error
    return HttpServerResponse.unsafeJson(
      OpenAi.toCompletion(started.responses, {
        ...started.meta,
        structured: started.structured,
        logprobs: started.logprobs
      }) satisfies ChatCompletion
    )
  }
  return HttpServerResponse.stream(
    events(started.first, started.rest, started.meta, started.shape).pipe(Stream.ensuring(started.stop)),
    {
      contentType: "text/event-stream",
      headers: { "cache-control": "no-cache", "x-request-id": requestId }
    }
  )
}
