/**
 * A streamed completion: the server-sent events of `/v1/chat/completions` turned
 * into StreamParts. The events are assembled by `@effect/experimental`'s SSE
 * parser, fed one line at a time (see `StreamAccumulator.lines`; not through
 * `Sse.makeChannel`, which feeds the parser each piece whole): any chunking,
 * CR/LF/CRLF, comments, multi-line data; an event past 10 MiB fails instead of
 * growing without bound. Text deltas go out as they arrive;
 * tool-call deltas are accumulated by index and emitted, with `Finish`, when the
 * stream closes. A server that ignored `stream: true` and sent the whole
 * completion is replayed as parts. A stream that is cut, stays silent past the
 * deadline, or holds no event fails with an InferenceFailure, never a defect.
 */
import * as Sse from "@effect/experimental/Sse"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../../domain/Failure.js"
import type { Logprobs } from "../../domain/Sampling.js"
import type { InferenceRequest } from "../../services/Engine.js"
import { InferenceResult, StreamPart } from "../../services/Engine.js"
import * as Failures from "./Failures.js"
import * as Transport from "./Transport.js"
import * as Wire from "./Wire.js"

// ---------------------------------------------------------------------------
// SSE text -> StreamParts
// ---------------------------------------------------------------------------

/** How an error payload inside a 200 stream (llama.cpp sends `data: {"error": ...}`) becomes a failure. */
export type ErrorPayloadMapper = (payload: string) => InferenceFailure

/** The largest event (in UTF-16 code units) a stream may hold by default: the SSE parser's bound. */
export const maxEventSize = 10 * 1024 * 1024

/** How much of a reply is kept to name it when it turns out not to be an event stream. */
const headSize = 2_048

const LF = 10
const CR = 13

/** A first line that belongs to an event stream: a field, a comment, or blank. */
const SSE_LINE = /^(data|event|id|retry)(:|$)|^:|^$/

/**
 * What a piece of a stream yields: the parts to emit now, then the failure that
 * ends the stream, if one does (the deltas before a bad event still go out).
 */
export interface Step {
  readonly parts: ReadonlyArray<StreamPart>
  readonly failure: InferenceFailure | undefined
}

/**
 * The state of one streamed completion. Feed it the response's text with
 * `text`, in chunks of any size; it returns the parts to emit now (text deltas)
 * and accumulates tool-call deltas by index. `end` returns the closing parts:
 * each assembled tool call, then `Finish`. One instance per stream, never shared.
 */
export class StreamAccumulator {
  private content = ""
  private readonly calls = new Map<number, { id: string | undefined; name: string; args: string }>()
  private reason: string | null | undefined = undefined
  private usage: Wire.WireUsage | undefined = undefined
  /** The content tokens' log-probabilities, when the server sent any. */
  private logprobs: Array<Logprobs[number]> | undefined = undefined
  private pending: Array<string> = []
  private received = 0
  private head = ""
  /** The start of a line whose end has not arrived. */
  private partial = ""
  /** Whether the last piece ended with CR (a LF opening the next one ends no line). */
  private afterCR = false
  private readonly parser: Sse.Parser
  private readonly maxEventSize: number
  /** Whether `data: [DONE]` arrived. */
  done = false

  constructor(
    private readonly onErrorPayload: ErrorPayloadMapper,
    options: { readonly maxEventSize?: number | undefined } = {}
  ) {
    this.maxEventSize = options.maxEventSize ?? maxEventSize
    this.parser = Sse.makeParser((event) => {
      // `event:`, `id:` and `retry:` carry nothing an OpenAI stream needs: only the data counts
      if (event._tag === "Event") this.pending.push(event.data)
    }, { maxEventSize: this.maxEventSize })
  }

  /** How many characters of event data arrived (for failure details). */
  get receivedChars(): number {
    return this.received
  }

  /** The next piece of the response's text: the parts of the events it completed. */
  text(chunk: string): Step {
    if (this.head.length < headSize) this.head += chunk.slice(0, headSize - this.head.length)
    const tooLarge = this.lines(chunk)
    const step = this.dispatch()
    return !tooLarge || step.failure !== undefined
      ? step
      : {
        parts: step.parts,
        failure: Wire.malformed(`a streamed event exceeds ${this.maxEventSize} characters`, this.head, {
          reason: "event_too_large"
        })
      }
  }

  /**
   * Hands the parser one line at a time (CR, LF and CRLF end a line, also across
   * pieces). The parser rescans its buffer from the start for every line, so a
   * piece of many lines fed at once costs quadratic time (measured on
   * @effect/experimental 0.61.1: 49 KB of events in one piece 1.4 s, 392 KB 21 s),
   * and a CR seen earlier in its buffer can swallow a later blank line (a CRLF
   * event followed by LF events lost the rest). A line longer than the event
   * bound fails here, before it is held whole. Whether an event grew too large.
   */
  private lines(chunk: string): boolean {
    let text = chunk
    if (this.afterCR && text.length > 0) {
      this.afterCR = false
      if (text.charCodeAt(0) === LF) text = text.slice(1)
    }
    let start = 0
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i)
      if (c !== LF && c !== CR) continue
      const line = this.partial + text.slice(start, i)
      this.partial = ""
      if (c === CR) {
        if (i + 1 === text.length) this.afterCR = true
        else if (text.charCodeAt(i + 1) === LF) i++
      }
      start = i + 1
      if (this.parser.feed(line + "\n") !== undefined) return true
    }
    this.partial += text.slice(start)
    return this.partial.length > this.maxEventSize
  }

  /** The parts of the events parsed so far, in order, up to a bad one; none after `[DONE]`. */
  private dispatch(): Step {
    const events = this.pending
    this.pending = []
    const parts: Array<StreamPart> = []
    for (const payload of events) {
      if (this.done) break
      const next = this.event(payload)
      if (Either.isLeft(next)) return { parts, failure: next.left }
      parts.push(...next.right)
    }
    return { parts, failure: undefined }
  }

  private event(payload: string): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> {
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
          if (choice.logprobs !== undefined && choice.logprobs !== null) {
            this.logprobs = [...(this.logprobs ?? []), ...Wire.logprobsOf(choice.logprobs)]
          }
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
   * Closes the stream: the tool calls, then `Finish`. An event the server did
   * not close with a blank line still counts. A stream that stopped before
   * `[DONE]` and before any finish reason was cut off, and fails; one that never
   * held an SSE event (an HTML page, say) is malformed.
   */
  end(measured: Wire.Measured): Step {
    const flushed = this.done ? { parts: [], failure: undefined } : this.text("\n\n")
    if (flushed.failure !== undefined) return flushed
    return Either.match(this.close(measured), {
      onLeft: (failure) => ({ parts: flushed.parts, failure }),
      onRight: (parts) => ({ parts: [...flushed.parts, ...parts], failure: undefined })
    })
  }

  private close(measured: Wire.Measured): Either.Either<ReadonlyArray<StreamPart>, InferenceFailure> {
    const self = this
    return Either.gen(function*() {
      if (!self.done && (self.reason === undefined || self.reason === null)) {
        const foreign = self.head.split(/\r?\n|\r/).find((line) => !SSE_LINE.test(line))
        if (self.received === 0 && foreign !== undefined) {
          return yield* Either.left(Wire.malformed("the engine's reply is not a server-sent event stream", foreign))
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
        finishReason: Wire.finishReason(self.reason, toolCalls.length > 0),
        ...(self.logprobs === undefined ? {} : { logprobs: self.logprobs })
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
    const emit = (step: Step): Stream.Stream<StreamPart, InferenceFailure> =>
      step.failure === undefined
        ? Stream.fromIterable(step.parts)
        : Stream.concat(Stream.fromIterable(step.parts), Stream.fail(Failures.withDetails(step.failure, { status })))

    const body = response.stream.pipe(
      Stream.decodeText(),
      Stream.mapError((error) => failures.streamCut(status, error, state.receivedChars)),
      Stream.timeoutFail(() => failures.timeout("the stream stayed silent"), transport.timeout),
      Stream.map((text) => state.text(text)),
      Stream.takeUntil(() => state.done),
      Stream.flatMap(emit)
    )
    const end = Stream.unwrap(Effect.gen(function*() {
      const elapsedMillis = (yield* Clock.currentTimeMillis) - start
      return emit(state.end({ elapsedMillis, contextWindow: yield* transport.contextWindow }))
    }))
    return Stream.concat(body, end)
  })).pipe(Stream.withSpan("OpenAiEngine.stream", { attributes: { "pagantic.model": transport.model } }))
