/**
 * Inside a run: the Durable service a program gets (each step journaled as one
 * DO record in the run's thread under a key claimed once per execution, read
 * back when the run is replayed; times and deadlines journaled likewise; slots
 * opened as the engine's activities and awaited on their deferred), and one
 * execution of a run's program with its end recorded once.
 */
import * as Activity from "@effect/workflow/Activity"
import * as Workflow from "@effect/workflow/Workflow"
import { WorkflowEngine, WorkflowInstance } from "@effect/workflow/WorkflowEngine"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { randomBytes } from "node:crypto"
import type { Failure as FailureType } from "../../domain/Failure.js"
import { Cancellation, Failure, OrchestrationFailure, ToolFailure } from "../../domain/Failure.js"
import type { AnswerShape, SlotOutcome } from "../../services/Durable.js"
import { Durable, Slot } from "../../services/Durable.js"
import type { AnyDefinition } from "../../services/Runs.js"
import { terminalStatuses } from "../../services/Runs.js"
import { LifecycleTransition } from "../../domain/Event.js"
import type { LifecycleState } from "../../domain/Lifecycle.js"
import { recordEvent } from "../../services/EventLog.js"
import type { Outcome } from "./Encoding.js"
import { callSite, decodeFailure, describeParse, encodeFailure, failureOfCause, parseJson, sha256, slotDeferred, Ticket, toUtc } from "./Encoding.js"
import type { Runtime } from "./Runtime.js"
import type { Slots } from "./Slots.js"

export const makeDurable = (
  runtime: Runtime,
  slots: Slots,
  runId: string,
  definition: AnyDefinition,
  context: Context.Context<WorkflowEngine | WorkflowInstance>,
  done: ReadonlySet<string>
): Durable["Type"] => {
  const { appended, cancelled, changed, engine, now, recordDone, secrets, store } = runtime
  const { arm } = slots
  const claimed = new Map<string, () => string>()
  const shapes = new Set((definition.answers ?? []).map((shape) => shape.name))
  const inRun = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, context) as Effect.Effect<A, E, Exclude<R, WorkflowEngine | WorkflowInstance>>

  const claim = (key: string, site: () => string) =>
    Effect.suspend(() => {
      const claimedAt = claimed.get(key)
      if (claimedAt !== undefined) {
        const [first, again] = [claimedAt(), site()]
        return Effect.die(
          OrchestrationFailure.defect(
            `the step key "${key}" is used twice in run ${runId}: first at ${first}, again at ${again}`,
            { details: { runId, key, first, again } }
          )
        )
      }
      claimed.set(key, site)
      return cancelled.has(runId)
        ? Effect.fail(Cancellation.signal(`run ${runId} was cancelled`, { runId }))
        : Effect.void
    })

  /** Decodes what a step or a slot journaled; a value its schema no longer reads is ORCHESTRATION_REPLAY_DIVERGED. */
  const decodeRecorded = <A, I>(kind: string, key: string, schema: Schema.Schema<A, I>) => (encoded: unknown) =>
    Schema.decodeUnknown(schema)(encoded).pipe(
      Effect.mapError((error) =>
        OrchestrationFailure.replayDiverged(
          `the recorded ${kind} "${key}" of run ${runId} no longer matches its schema: ${describeParse(error)}`,
          { details: { runId, key, kind } }
        )
      )
    )

  /** A slot's opening, journaled as the engine's activity (it is done once even when its run is replayed). */
  const journal = <A, I, R>(
    kind: string,
    key: string,
    schema: Schema.Schema<A, I>,
    execute: Effect.Effect<I, FailureType, R>
  ) =>
    Effect.flatMap(
      inRun(Activity.make({ name: `${kind}/${key}`, success: Schema.Unknown, error: Failure, execute })),
      decodeRecorded(kind, key, schema)
    )

  /** The value or the failure step `key` recorded in the thread (`otherwise` when it has none). */
  const recorded = <R>(key: string, otherwise: Effect.Effect<unknown, FailureType, R>): Effect.Effect<unknown, FailureType, R> =>
    Effect.flatMap(store.findRecord(runId, "DO", key), (row) => {
      const body = row === undefined ? undefined : (parseJson(row.body) as { value?: unknown; error?: unknown } | undefined)
      if (body === undefined) return otherwise
      if ("error" in body) {
        return Option.match(decodeFailure(body.error), {
          onNone: () =>
            Effect.fail(OrchestrationFailure.replayDiverged(`the recorded failure of step "${key}" of run ${runId} is not a failure of the taxonomy`)),
          onSome: (failure) => Effect.fail(failure)
        })
      }
      return Effect.succeed(body.value)
    })

  /**
   * Records how step `key` ended, then ends so; when another execution of the
   * run recorded the step first (two runners on one run during a takeover), the
   * step ends as that record says.
   */
  const settle = <A>(key: string, body: { readonly value: unknown } | { readonly error: unknown }, outcome: Effect.Effect<A, FailureType>) =>
    Effect.flatMap(recordDone(runId, key, body), (first) => (first ? outcome : recorded(key, outcome)))

  const remember = (key: string, secret: string) => {
    const known = secrets.get(runId) ?? new Map<string, string>()
    secrets.set(runId, known.set(key, secret))
  }

  /**
   * The secret of a slot being replayed: the one this process drew, or, when it
   * drew none (a restart, another process), a new one the slot takes as well (if
   * it is still open), since the journal keeps no secret to hand out again.
   */
  const secretOf = (key: string) =>
    Effect.suspend(() => {
      const known = secrets.get(runId)?.get(key)
      if (known !== undefined) return Effect.succeed(known)
      const secret = randomBytes(24).toString("base64url")
      remember(key, secret)
      return Effect.as(Effect.orDie(store.addSecretHash(runId, key, sha256(secret))), secret)
    })

  const step: Durable["Type"]["step"] = (key, schema, effect, stepOptions) => {
    const site = callSite()
    const run = effect.pipe(
      Effect.flatMap((value) => Effect.orDie(Schema.encode(schema)(value))),
      Effect.matchEffect({
        onSuccess: (value) => settle(key, { value }, Effect.succeed(value)),
        onFailure: (error) => settle(key, { error: encodeFailure(error) }, Effect.fail(error))
      })
    )
    const once = Effect.gen(function* () {
      if (yield* store.hasRecord(runId, "CALL", key)) {
        return yield* ToolFailure.executionFailed(
          key,
          `step "${key}" of run ${runId} was started before a restart and its outcome is unknown`,
          { retryable: false, details: { outcomeUnknown: true, runId, key } }
        )
      }
      yield* store.record(runId, "CALL", key, yield* now)
      return yield* run
    })
    const fresh = stepOptions?.once === true ? once : run
    // a step done before (this run replayed after a suspension, a restart, an import) is read back, not run
    return claim(key, site).pipe(
      Effect.zipRight(done.has(key) ? recorded(key, fresh) : fresh),
      Effect.flatMap(decodeRecorded("step", key, schema))
    )
  }

  const timeStep = (key: string, after: Duration.Duration) =>
    step(key, Schema.DateTimeUtcFromNumber, Effect.map(now, (at) => toUtc(at + Duration.toMillis(after))))

  const slot: Durable["Type"]["slot"] = (shape, slotOptions) => {
    const site = callSite()
    const key = slotOptions.key ?? shape.name
    const sla = Duration.toMillis(Duration.decode(slotOptions.sla))
    const bound = slotOptions.bound === undefined ? undefined : Duration.toMillis(Duration.decode(slotOptions.bound))
    return Effect.gen(function* () {
      if (!shapes.has(shape.name)) {
        return yield* Effect.die(
          OrchestrationFailure.defect(
            `run definition "${definition.name}" does not list the answer shape "${shape.name}" (slot "${key}")`
          )
        )
      }
      yield* claim(key, site)
      const ticket = yield* journal(
        "slot",
        key,
        Ticket,
        Effect.gen(function* () {
          const secret = randomBytes(24).toString("base64url")
          const at = yield* now
          const deadline = yield* store.openSlot({
            runId,
            key,
            shape: shape.name,
            secretHash: sha256(secret),
            deadline: at + sla,
            responder: slotOptions.responder,
            terms: slotOptions.terms,
            latest: bound === undefined ? undefined : at + bound
          })
          yield* store.record(runId, "CALL", key, at, {
            slot: key,
            shape: shape.name,
            deadline,
            ...(slotOptions.responder === undefined ? {} : { responder: slotOptions.responder })
          })
          yield* appended(runId)
          remember(key, secret)
          return { deadline }
        })
      )
      yield* arm(runId, key, ticket.deadline)
      return new Slot({
        runId,
        key,
        shape: shape.name,
        secret: Redacted.make(yield* secretOf(key)),
        deadline: toUtc(ticket.deadline)
      })
    })
  }

  const awaitAnswer = <A, I>(shape: AnswerShape<A, I>, open: Slot) =>
    Effect.gen(function* () {
      const instance = Context.get(context, WorkflowInstance)
      const exit = yield* inRun(
        Workflow.wrapActivityResult(engine.deferredResult(slotDeferred(open.key)), Predicate.isUndefined)
      )
      if (exit === undefined) {
        yield* store.markSuspended(runId, open.key, yield* now).pipe(Effect.orDie)
        yield* changed(runId)
        yield* transition("EXECUTE", "SUSPENDED", `run ${runId} waits for slot "${open.key}"`)
        return yield* Workflow.suspend(instance)
      }
      const closed = yield* exit
      switch (closed._tag) {
        case "Answered": {
          const value = yield* Schema.decodeUnknown(shape.schema)(closed.value).pipe(
            Effect.mapError((error) =>
              OrchestrationFailure.replayDiverged(
                `the recorded answer of slot "${open.key}" of run ${runId} no longer matches the shape "${shape.name}": ${describeParse(error)}`,
                { details: { runId, key: open.key } }
              )
            )
          )
          return { _tag: "Answered", value, at: toUtc(closed.at) } satisfies SlotOutcome<A>
        }
        case "Declined":
          return { _tag: "Declined", reason: closed.reason, at: toUtc(closed.at) } satisfies SlotOutcome<A>
        case "Expired":
          return { _tag: "Expired", deadline: toUtc(closed.deadline) } satisfies SlotOutcome<A>
        case "Cancelled":
          return yield* Cancellation.signal(`run ${runId} was cancelled while slot "${open.key}" was open`, { runId })
      }
    })

  return {
    runId,
    step,
    now: (key) => timeStep(key, Duration.zero),
    deadline: (key, after) => timeStep(key, Duration.decode(after)),
    slot,
    awaitAnswer,
    closeSlot: (open) => Effect.asVoid(slots.close(runId, open.key, "cancelled")),
    idempotencyKey: (key) => sha256(`${runId}\u0000${key}`)
  }
}

/** A move of the run's lifecycle, recorded on the EventLog when one is in context. */
const transition = (fromState: LifecycleState, toState: LifecycleState, reason: string) =>
  recordEvent((base) => new LifecycleTransition({ ...base, layer: "orchestrate", fromState, toState, attempt: 1, reason }))

/** One execution (or replay) of a run: the program under Durable, its end recorded once. */
export const execute = (runtime: Runtime, slots: Slots, requirements: Context.Context<never>) =>
(definition: AnyDefinition) =>
(_: unknown, runId: string): Effect.Effect<Outcome, never, WorkflowEngine | WorkflowInstance> =>
  Effect.gen(function* () {
    const { changed, now, owner, store } = runtime
    const context = yield* Effect.context<WorkflowEngine | WorkflowInstance>()
    const before = yield* store.getRun(runId).pipe(Effect.orDie)
    const row = yield* store.markRunning(runId, owner, yield* now).pipe(Effect.orDie)
    yield* changed(runId)
    if (before?.status === "suspended" && row?.status === "running") {
      yield* transition("SUSPENDED", "EXECUTE", `run ${runId} resumed (slot "${before.waiting_on ?? ""}" closed)`)
    }
    if (row === undefined) {
      // pruned while the engine still held its message: nothing left to run
      yield* Effect.logWarning(`run ${runId} has no row in the run store (pruned?): not executed`)
      return { _tag: "Failed" } as const
    }
    if (terminalStatuses.has(row.status)) return { _tag: row.status === "completed" ? "Ok" : "Failed" } as const
    const done = yield* store.doneKeys(runId).pipe(Effect.orDie)
    const exit = yield* Schema.decodeUnknown(definition.payload)(parseJson(row.payload)).pipe(
      Effect.mapError((error) =>
        OrchestrationFailure.replayDiverged(
          `the recorded payload (INTEND) of run ${runId} no longer matches "${definition.name}": ${describeParse(error)}`
        )
      ),
      Effect.flatMap((input) => definition.program(input) as Effect.Effect<unknown, FailureType, Durable>),
      Effect.flatMap((value) => Effect.orDie(Schema.encode(definition.success as Schema.Schema<unknown, unknown>)(value))),
      Effect.provideService(Durable, makeDurable(runtime, slots, runId, definition, context, done)),
      Effect.provide(requirements),
      Effect.exit
    )
    // suspended (or interrupted): nothing ended
    if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) return yield* Effect.interrupt
    const end = Exit.isSuccess(exit)
      ? { status: "completed" as const, result: exit.value }
      : { status: "failed" as const, error: encodeFailure(failureOfCause(exit.cause)) }
    yield* store.finish(runId, end, yield* now).pipe(Effect.orDie)
    runtime.secrets.delete(runId)
    yield* changed(runId)
    // the run is over: a slot it left open (a human it no longer waits for) takes no late answer
    for (const open of yield* store.openSlotsOf(runId).pipe(Effect.orDie)) {
      yield* slots.close(runId, open.key, "cancelled").pipe(Effect.orDie)
    }
    return { _tag: end.status === "completed" ? "Ok" : "Failed" } as const
  })
