/**
 * One OpenAI engine's way to the server: the request encoded as JSON, each attempt
 * under its deadline with non-2xx statuses mapped to failures, the attempts under
 * the retry policy, and the non-streamed completion built on them.
 */
import type * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as Clock from "effect/Clock"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Schedule from "effect/Schedule"
import type { InferenceFailure } from "../../domain/Failure.js"
import type { InferenceRequest } from "../../services/Engine.js"
import * as Failures from "./Failures.js"
import { retryAfterMillis } from "./Retry.js"
import * as Wire from "./Wire.js"

/** What one engine's requests share, built once by `make`. */
export interface Transport {
  /** The HttpClient with the bearer token and `Accept: application/json`. */
  readonly client: HttpClient.HttpClient
  readonly model: string
  readonly completionsUrl: string
  /** Deadline of one attempt, and the longest silence inside a stream. */
  readonly timeout: Duration.Duration
  readonly strictJsonSchema: boolean
  readonly failures: Failures.Failures
  readonly schedule: Schedule.Schedule<unknown, InferenceFailure>
  /** The model's context window as known now (0 when unknown). */
  readonly contextWindow: Effect.Effect<number>
}

/** Reads a 2xx reply. */
export type Read<A> = (response: HttpClientResponse.HttpClientResponse) => Effect.Effect<A, InferenceFailure>

/** The chat-completions POST for `request`. */
export const encode = (transport: Transport, request: InferenceRequest, stream: boolean) =>
  HttpClientRequest.post(transport.completionsUrl).pipe(
    HttpClientRequest.bodyJson(Wire.chatBody(request, {
      model: transport.model,
      stream,
      strictJsonSchema: transport.strictJsonSchema
    })),
    Effect.mapError((error) => Failures.bodyNotEncodable(String(error.reason._tag)))
  )

/** One attempt: send, map a non-2xx status, then `read` the 2xx reply; all within the deadline. */
const attempt = <A>(
  { client, failures, timeout }: Transport,
  request: HttpClientRequest.HttpClientRequest,
  read: Read<A>,
  what: string
): Effect.Effect<A, InferenceFailure> =>
  client.execute(request).pipe(
    Effect.mapError(failures.fromHttpError),
    Effect.flatMap((response) =>
      response.status >= 200 && response.status < 300
        ? read(response)
        : Effect.flatMap(
          Effect.zip(
            response.text.pipe(Effect.orElseSucceed(() => "")),
            Clock.currentTimeMillis
          ),
          ([body, now]) =>
            Effect.fail(failures.fromStatus(response.status, body, retryAfterMillis(response.headers, now)))
        )
    ),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => failures.timeout(what) })
  )

/** Attempts under the retry policy; the final failure says how many attempts were made. */
export const send = <A>(
  transport: Transport,
  request: HttpClientRequest.HttpClientRequest,
  read: Read<A>,
  what: string
): Effect.Effect<A, InferenceFailure> =>
  Effect.flatMap(Ref.make(0), (attempts) =>
    Ref.update(attempts, (n) => n + 1).pipe(
      Effect.zipRight(attempt(transport, request, read, what)),
      Effect.retry(transport.schedule),
      Effect.catchAll((failure) =>
        Effect.flatMap(Ref.get(attempts), (n) => Effect.fail(Failures.withDetails(failure, { attempts: n })))
      )
    ))

/** Decodes a whole completion body; a malformed one carries the status and a body excerpt. */
export const parseCompletion = (transport: Transport, status: number, text: string, start: number) =>
  Effect.gen(function*() {
    const elapsedMillis = (yield* Clock.currentTimeMillis) - start
    return yield* Wire.parseCompletion(text, { elapsedMillis, contextWindow: yield* transport.contextWindow }).pipe(
      Effect.mapError((failure) =>
        Failures.withDetails(failure, { status, body: transport.failures.excerpt(text) })
      )
    )
  })

/** A non-streamed completion. */
export const infer = Effect.fn("OpenAiEngine.infer")(function*(transport: Transport, request: InferenceRequest) {
  yield* Effect.annotateCurrentSpan({ "pagantic.model": transport.model })
  const httpRequest = yield* encode(transport, request, false)
  const start = yield* Clock.currentTimeMillis
  const [status, text] = yield* send(
    transport,
    httpRequest,
    (response) =>
      Effect.map(
        Effect.mapError(response.text, transport.failures.fromHttpError),
        (text) => [response.status, text] as const
      ),
    "the engine did not answer"
  )
  return yield* parseCompletion(transport, status, text, start)
})
