/**
 * What a request has spent and done so far: the token usage of every inference
 * the engine answered and every tool call the registry ran, in the order they
 * happened, whatever the mode and however the request ends.
 *
 * A request that fails has no Outcome, so its response reads this: a failure
 * reports the tokens and tool calls it cost before it failed; an answer reports
 * it too where it saw more than the mode counted. The recorder sits on the
 * engine and the registry the request runs with, and on every engine that
 * follows the request (`Engine.inRequest`: a model reranker's, a judge's, a
 * planner's, a query's responders'), so every inference and tool call of every
 * loop, step, processor and service is seen. A tool call retried under the same
 * id is one record, its last attempt's.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as Message from "../../domain/Message.js"
import { ToolCallRecord } from "../../domain/System.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as Engine from "../../services/Engine.js"
import type * as ToolRegistry from "../../services/ToolRegistry.js"
import * as Construct from "../../domain/Construct.js"

export interface Spent {
  /** `engine`, recording the usage of every inference it answers. */
  readonly engine: (engine: Engine.Service) => Engine.Service
  /** `registry`, recording every tool call it runs, failed ones as error records. */
  readonly registry: (registry: ToolRegistry.Service) => ToolRegistry.Service
  /** The usage of every inference answered so far, combined. */
  readonly usage: Effect.Effect<TokenUsage.TokenUsage>
  /** Every tool call run so far, in the order they were first made. */
  readonly toolCalls: Effect.Effect<ReadonlyArray<ToolCallRecord>>
  /** `usage` and `toolCalls` read at once, by a caller inside a synchronous step of its fiber. */
  readonly unsafeSoFar: () => { readonly usage: TokenUsage.TokenUsage; readonly toolCalls: ReadonlyArray<ToolCallRecord> }
}

/** A recorder for one request. */
export const make: Effect.Effect<Spent> = Effect.sync(() => unsafeMake())

/** `make` at once (the recorder holds only its own state). */
export const unsafeMake = (): Spent => new Recorder()

/**
 * A request's recorder. Each update is one synchronous step (as
 * a Ref's is): the request's fibers may record at once.
 */
class Recorder implements Spent {
  private total = TokenUsage.empty
  private readonly calls = new Map<string, ToolCallRecord>()
  private readonly used = (result: Engine.InferenceResult) =>
    Effect.sync(() => void (this.total = TokenUsage.combine(this.total, result.usage)))
  private readonly called = (record: ToolCallRecord) => Effect.sync(() => void this.calls.set(record.id, record))

  readonly engine = (inner: Engine.Service): Engine.Service => new RecordedEngine(inner, this.used)

  readonly registry = (inner: ToolRegistry.Service): ToolRegistry.Service => ({
    ...inner,
    execute: (call: Message.ToolCall, options?: ToolRegistry.ExecuteOptions) =>
      Effect.flatMap(Clock.currentTimeMillis, (started) =>
        Effect.onExit(inner.execute(call, options), (exit) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => {
            if (Exit.isSuccess(exit)) return this.called(record(call, exit.value.content, false, now - started))
            // interrupted or a defect: the call did not finish, there is nothing to report
            return Option.match(Cause.failureOption(exit.cause), {
              onNone: () => Effect.void,
              onSome: (failure) => this.called(record(call, `Error [${failure.code}]: ${failure.message}`, true, now - started))
            })
          })))
  })

  get usage(): Effect.Effect<TokenUsage.TokenUsage> {
    return Effect.sync(() => this.total)
  }

  get toolCalls(): Effect.Effect<ReadonlyArray<ToolCallRecord>> {
    return Effect.sync(() => Array.from(this.calls.values()))
  }

  readonly unsafeSoFar = () => ({ usage: this.total, toolCalls: Array.from(this.calls.values()) })
}

/** An engine whose every answered inference is recorded (`used`). */
class RecordedEngine implements Engine.Service {
  readonly modelInfo: Engine.Service["modelInfo"]
  // an engine's own sampling of many is kept (it shares their work), each sample it answered recorded
  readonly sampleMany: Engine.Service["sampleMany"]
  constructor(
    private readonly inner: Engine.Service,
    private readonly used: (result: Engine.InferenceResult) => Effect.Effect<void>
  ) {
    this.modelInfo = inner.modelInfo
    const sampleMany = inner.sampleMany
    this.sampleMany = sampleMany === undefined ? undefined : (request: Engine.InferenceRequest, n: number) =>
      Effect.tap(sampleMany(request, n), (samples) =>
        Effect.forEach(samples, (sample) => (Either.isRight(sample) ? used(sample.right) : Effect.void), { discard: true }))
  }
  readonly infer: Engine.Service["infer"] = (request) => Effect.tap(this.inner.infer(request), this.used)
  readonly stream: Engine.Service["stream"] = (request) =>
    Engine.tapParts(this.inner.stream(request), (part) => (part._tag === "Finish" ? this.used(part.result) : undefined))
}

// built from the call the loop checked and a measured duration: not validated again
const record = (call: Message.ToolCall, result: string, isError: boolean, durationMs: number) =>
  Construct.unchecked(ToolCallRecord, {
    id: call.id,
    name: call.name,
    arguments: call.arguments,
    result,
    isError,
    durationMs: Math.max(0, durationMs)
  })
