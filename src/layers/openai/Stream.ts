/**
 * A streamed completion: the server-sent events of `/v1/chat/completions` turned
 * into StreamParts. Text deltas go out as they arrive; tool-call deltas are
 * accumulated by index and emitted, with `Finish`, when the stream closes. A
 * server that ignored `stream: true` and sent the whole completion is replayed as
 * parts. A stream that is cut, stays silent past the deadline, or holds no event
 * fails with an InferenceFailure, never a defect.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../../domain/Failure.js"
import type { InferenceRequest } from "../../services/Engine.js"
import { InferenceResult, StreamPart } from "../../services/Engine.js"
import * as Failures from "./Failures.js"
import * as Transport from "./Transport.js"
import * as Wire from "./Wire.js"

// ---------------------------------------------------------------------------
// SSE lines -> StreamParts
// ---------------------------------------------------------------------------

/** How an error payload inside a 200 stream (llama.cpp sends `data: {"error": ...}`) becomes a failure. */
export type ErrorPayloadMapper = (payload: string) => InferenceFailure

/**
 * The state of one streamed completion. Feed it the response's lines with
 * `line`; it returns the parts to emit now (text deltas) and accumulates tool-call
 * deltas by index. `end` returns the closing parts: each assembled tool call,
 * then `Finish`. One instance per stream, never shared.
 */
export class StreamAccumulator {
  private content = ""
  private readonly calls = new Map<number, { id: string | undefined; name: string; args: string }>()
  private reason: string | null | undefined = undefined
  private usage: Wire.WireUsage | undefined = undefined
  private data: Array<string> = []
  private received = 0
  private foreign: string | undefined = undefined
  /** Whether `data: [DONE]` arrived. */
  done = false

  constructor(private readonly onErrorPayload: ErrorPayloadMapper) {}

  /** How many characters of event data arrived (for failure details). */
  get receivedChars(): number {
    return this.received
  }

  line(raw: string): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw
    if (line === "") return this.dispatch()
    if (line.startsWith(":")) return Either.right([])
    if (line.startsWith("data:")) {
      const value = line.slice(5)
      this.data.push(value.startsWith(" ") ? value.slice(1) : value)
    }
    if (this.foreign === undefined && !/^(event|id|retry):/.test(line)) this.foreign = line
    // `event:`, `id:`, `retry:` lines carry nothing an OpenAI stream needs
    return Either.right([])
  }

  private dispatch(): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> {
    if (this.data.length === 0) return Either.right([])
    const payload = this.data.join("\n")
    this.data = []
    this.received += payload.length
    if (payload.trim() === "[DONE]") {
      this.done = true
      return Either.right([])
    }
    return Either.flatMap(
      Wire.decodeChunk(payload),
      (chunk): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> => {
        if (chunk.error !== undefined && chunk.error !== null) return Either.left(this.onErrorPayload(payload))
        if (chunk.usage !== undefined && chunk.usage !== null) this.usage = chunk.usage
        const parts: Array<StreamPart> = []
        for (const choice of chunk.choices ?? []) {
          if (choice.finish_reason !== undefined && choice.finish_reason !== null) this.reason = choice.finish_reason
          const delta = choice.delta
          if (delta === undefined || delta === null) continue
          if (typeof delta.content === "string" && delta.content !== "") {
            this.content += delta.content
            parts.push(StreamPart.textDelta(delta.content))
          }
          for (const [position, call] of (delta.tool_calls ?? []).entries()) {
            const index = call.index ?? position
            const current = this.calls.get(index) ?? { id: undefined, name: "", args: "" }
            const args = call.function?.arguments
            this.calls.set(index, {
              id: current.id ?? call.id ?? undefined,
              name: current.name === "" ? call.function?.name ?? "" : current.name,
              args: current.args + (typeof args === "string" ? args : args ? JSON.stringify(args) : "")
            })
          }
        }
        return Either.right(parts)
      }
    )
  }

  /**
   * Closes the stream: the tool calls, then `Finish`. A stream that stopped
   * before `[DONE]` and before any finish reason was cut off, and fails; one that
   * never held an SSE event (an HTML page, say) is malformed.
   */
  end(measured: Wire.Measured): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> {
    const self = this
    return Either.gen(function*() {
      yield* self.dispatch()
      if (!self.done && (self.reason === undefined || self.reason === null)) {
        if (self.received === 0 && self.foreign !== undefined) {
          return yield* Either.left(Wire.malformed("the engine's reply is not a server-sent event stream", self.foreign))
        }
        return yield* Either.left(
          InferenceFailure.engineError("the engine's stream ended before it finished (no [DONE], no finish_reason)", {
            reason: "stream_cut",
            receivedChars: self.received,
            partialContent: Wire.excerpt(self.content)
          })
        )
      }
      const ordered = [...self.calls.entries()].sort(([a], [b]) => a - b).map(([, call]) => call)
      const toolCalls = yield* Wire.toToolCalls(
        ordered.map((call) => ({ id: call.id, name: call.name, arguments: call.args }))
      )
      const result = new InferenceResult({
        content: self.content,
        toolCalls,
        usage: Wire.usageOf(self.usage, measured),
        finishReason: Wire.finishReason(self.reason, toolCalls.length > 0)
      })
      return [...toolCalls.map(StreamPart.toolCall), StreamPart.finish(result)]
    })
  }
}

/** The parts of a whole (non-streamed) result, for a server that ignored `stream: true`. */
export const partsOf = (result: InferenceResult): ReadonlyArray<StreamPart> => [
  ...(result.content === "" ? [] : [StreamPart.textDelta(result.content)]),
  ...result.toolCalls.map(StreamPart.toolCall),
  StreamPart.finish(result)
]

// ---------------------------------------------------------------------------
// The HTTP stream
// ---------------------------------------------------------------------------

/** A streamed completion over `transport`. */
export const stream = (
  transport: Transport.Transport,
  request: InferenceRequest
): Stream.Stream<StreamPart, InferenceFailure> =>
  Stream.unwrap(Effect.gen(function*() {
    const { failures } = transport
    const httpRequest = yield* Transport.encode(transport, request, true)
    const start = yield* Clock.currentTimeMillis
    const response = yield* Transport.send(transport, httpRequest, Effect.succeed, "the engine did not start answering")
    const status = response.status
    if ((response.headers["content-type"] ?? "").includes("application/json")) {
      // the server ignored `stream: true` and sent the whole completion
      const text = yield* Effect.mapError(response.text, failures.fromHttpError)
      const result = yield* Transport.parseCompletion(transport, status, text, start)
      return Stream.fromIterable(partsOf(result))
    }
    const state = new StreamAccumulator(failures.errorPayload(status))
    const fromEither = <A>(either: Either.Either<A, InferenceFailure>) =>
      Either.match(either, {
        onLeft: (failure) => Effect.fail(Failures.withDetails(failure, { status })),
        onRight: Effect.succeed
      })

    const body = response.stream.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.mapError((error) => failures.streamCut(status, error, state.receivedChars)),
      Stream.timeoutFail(() => failures.timeout("the stream stayed silent"), transport.timeout),
      Stream.mapEffect((line) => fromEither(state.line(line))),
      Stream.takeUntil(() => state.done),
      Stream.flattenIterables
    )
    const end = Stream.fromIterableEffect(Effect.gen(function*() {
      const elapsedMillis = (yield* Clock.currentTimeMillis) - start
      return yield* fromEither(state.end({ elapsedMillis, contextWindow: yield* transport.contextWindow }))
    }))
    return Stream.concat(body, end)
  })).pipe(Stream.withSpan("OpenAiEngine.stream", { attributes: { "pagantic.model": transport.model } }))
