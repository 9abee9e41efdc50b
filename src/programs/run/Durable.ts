/**
 * A run loop in a durable run: each model call and each tool call is a journaled
 * step under a structural key (`<key>/model/<iteration>.<index>`,
 * `<key>/tool/<iteration>.<index>`), so a run re-driven after a crash reads the
 * replies and tool results it already has from the journal and calls the engine
 * and the tools only for what is missing.
 *
 * - A model call's seed, when the request has none, is derived from the run id
 *   and the step key: the call in flight at a crash, made again, samples the same
 *   way (on engines that honour a seed).
 * - A tool handler finds the call's idempotency key in
 *   `ToolRegistry.IdempotencyKey`.
 * - A tool the registry does not declare idempotent runs at most once: after a
 *   crash during its call, the call's result is an error the model reads
 *   (TOOL_EXECUTION_FAILED, `outcomeUnknown`), never a second call.
 *
 * A journal failure under a step (the state store down past its retries, a record
 * the code no longer reads, the run cancelled) cannot be a tool or model result;
 * it ends the loop: `runDurable` fails with it, typed.
 *
 * What a replayed step does not do again: emit its text deltas (streamed runs),
 * its inference and tool events and spans. Tool results are journaled as JSON,
 * so a handler's raw value must be a JSON value to come back the same.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { Cancellation, Failure, InferenceFailure, OrchestrationFailure } from "../../domain/Failure.js"
import { ToolFailure } from "../../domain/Failure.js"
import { ToolCallRecord } from "../../domain/System.js"
import type * as Durable from "../../services/Durable.js"
import { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import type * as ToolRegistry from "../../services/ToolRegistry.js"
import { IdempotencyKey } from "../../services/ToolRegistry.js"
import { RunToolResult } from "./Message.js"
import type { ModelStepKey, Steps, ToolOutcome, ToolStepKey } from "./Types.js"

/** A tool call's outcome as it is journaled. */
export const ToolOutcomeSchema: Schema.Schema<ToolOutcome, any> = Schema.Struct({
  record: ToolCallRecord,
  result: RunToolResult,
  failure: Schema.Option(ToolFailure)
})

export interface DurableOptions {
  /** The prefix of the loop's step keys: unique among the loops of one run. Default "run". */
  readonly key?: string | undefined
  /**
   * Whether a tool may run again when a crash came during its call. Default: the
   * registry's `idempotent`; a tool it does not declare idempotent runs at most once.
   */
  readonly idempotent?: ((name: string) => boolean) | undefined
}

export const defaultKey = "run"

/** The journal key of a model call. */
export const modelKey = (prefix: string, key: ModelStepKey): string => `${prefix}/model/${key.iteration}.${key.index}`

/** The journal key of a tool call. */
export const toolKey = (prefix: string, key: ToolStepKey): string => `${prefix}/tool/${key.iteration}.${key.index}`

/** A non-negative 31-bit seed from the run id and `key` (the same on every replay, different in every run). */
export const seedOf = (durable: Durable.Service, key: string): number =>
  Number.parseInt(durable.idempotencyKey(`seed/${key}`).slice(0, 8), 16) >>> 1

/** What a journal failure becomes under a step that can only fail with `keep`'s failures: a defect carrying it. */
const dieUnless = <E extends Failure>(keep: (failure: Failure) => failure is E) => (failure: Failure): Effect.Effect<never, E> =>
  keep(failure) ? Effect.fail(failure) : Effect.die(failure)

const isInference = (failure: Failure): failure is InferenceFailure => failure._tag === "InferenceFailure"

/** A tool call that failed as a step (its outcome unknown after a crash): an error result the model reads. */
const failedOutcome = (key: ToolStepKey, failure: ToolFailure): ToolOutcome => {
  const content = `Error [${failure.code}]: ${failure.message}`
  const { call } = key
  return {
    record: new ToolCallRecord({ id: call.id, name: call.name, arguments: call.arguments, result: content, isError: true, durationMs: 0 }),
    result: new RunToolResult({ callId: call.id, name: call.name, content, isError: true }),
    failure: Option.some(failure)
  }
}

/**
 * The steps of a run loop in the durable run of `durable`. `registry` says which
 * tools are idempotent (when `options.idempotent` does not).
 */
export const durableSteps = (
  durable: Durable.Service,
  options: DurableOptions = {},
  registry: Option.Option<ToolRegistry.Service> = Option.none()
): Steps => {
  const prefix = options.key ?? defaultKey
  const idempotent = options.idempotent ??
    ((name: string) => Option.isSome(registry) && registry.value.idempotent?.(name) === true)
  return {
    request: (key, request) =>
      request.seed !== undefined ? request : new InferenceRequest({ ...request, seed: seedOf(durable, modelKey(prefix, key)) }),
    model: (key, call) => Effect.catchAll(durable.step(modelKey(prefix, key), InferenceResult, call), dieUnless(isInference)),
    tool: (key, call) => {
      const stepKey = toolKey(prefix, key)
      return durable.step(
        stepKey,
        ToolOutcomeSchema,
        Effect.provideService(call, IdempotencyKey, Option.some(durable.idempotencyKey(stepKey))),
        { once: !idempotent(key.call.name) }
      ).pipe(
        Effect.catchAll((failure) =>
          failure._tag === "ToolFailure" ? Effect.succeed(failedOutcome(key, failure)) : Effect.die(failure)
        )
      )
    }
  }
}

/** The journal failures a durable loop ends with. */
export type DurableError = OrchestrationFailure | Cancellation

const journalFailure = (defect: unknown): Option.Option<DurableError> =>
  typeof defect === "object" && defect !== null && "_tag" in defect &&
    (defect._tag === "OrchestrationFailure" || defect._tag === "Cancellation")
    ? Option.some(defect as DurableError)
    : Option.none()

/** `effect` with the journal failures its durable steps died with as typed failures. */
export const surfaceJournalFailures = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | DurableError, R> =>
  Effect.catchSomeDefect(effect, (defect) => Option.map(journalFailure(defect), (failure) => Effect.fail(failure)))

/** `stream` with the journal failures its durable steps died with as typed failures. */
export const surfaceJournalFailuresStream = <A, E, R>(stream: Stream.Stream<A, E, R>): Stream.Stream<A, E | DurableError, R> =>
  Stream.catchAllCause(stream, (cause) =>
    Option.match(Option.flatMap(Cause.dieOption(cause), journalFailure), {
      onNone: (): Stream.Stream<A, E | DurableError> => Stream.failCause(cause),
      onSome: (failure): Stream.Stream<A, E | DurableError> => Stream.fail(failure)
    }))
