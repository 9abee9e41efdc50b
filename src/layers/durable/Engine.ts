/**
 * The one module that touches @effect/workflow: durable runs on a WorkflowEngine
 * (the cluster's SingleRunner over SQL, or the engine's in-memory layer), with the
 * engine's known hazards out of reach of the programs:
 *
 * - Two activities with one name in a run share the first one's result: step keys
 *   are claimed per execution, and a key claimed twice is a defect naming both
 *   call sites.
 * - A sleep's countdown restarts on replay: there are no sleeps. Deadlines are
 *   absolute times computed once inside a step; a slot's SLA is a timer of this
 *   module, armed from the stored deadline (again after a restart).
 * - `raceAll` of an await and a timer returns the timer: never raced. A slot is one
 *   deferred that either the answer or the SLA timer completes; the store's
 *   conditional UPDATE decides who was first, and only the winner completes it.
 * - A deferred completed twice drops the second answer silently, and its token is
 *   derived from the payload: answers go through `respond`, which checks a random
 *   secret (drawn in a step, stored hashed) and the slot's status first.
 * - A resume can be lost when a deferred completes before the run's suspension is
 *   stored: after delivering an answer the run is resumed again until it moves.
 * - Recorded values are decoded with the program's schemas: a record the code no
 *   longer reads is ORCHESTRATION_REPLAY_DIVERGED naming the record.
 *
 * Each run is one workflow execution whose id is the run id. The program's
 * failures and defects end the run (recorded) and complete the workflow with an
 * outcome value. (The engine's SuspendOnFailure is not used: it applies to every
 * activity too, so a step's typed failure would suspend the run instead of being
 * journaled.) A store that fails under a run's own bookkeeping is a defect of
 * that execution.
 */
import * as Activity from "@effect/workflow/Activity"
import * as DurableDeferred from "@effect/workflow/DurableDeferred"
import * as Workflow from "@effect/workflow/Workflow"
import { WorkflowEngine, WorkflowInstance } from "@effect/workflow/WorkflowEngine"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import * as SqlClient from "@effect/sql/SqlClient"
import type { Failure as FailureType } from "../../domain/Failure.js"
import { Cancellation, ConfigurationFailure, Failure, OrchestrationFailure, ToolFailure } from "../../domain/Failure.js"
import type { AnswerShape, SlotOutcome } from "../../services/Durable.js"
import { Durable, Slot } from "../../services/Durable.js"
import type { AnyDefinition, Requirements, RunsError, Service as RunsService } from "../../services/Runs.js"
import { RunInfo, terminalStatuses, Thread, ThreadRecord, ThreadSlot } from "../../services/Runs.js"
import type { RecordRow, RunRow, SlotRow, Store } from "./Store.js"
import * as StoreModule from "./Store.js"

// ---------------------------------------------------------------------------
// Encodings the engine journals
// ---------------------------------------------------------------------------

/** How a run ended, as the workflow's result: the program's failures are values, not engine failures. */
const Outcome = Schema.Union(
  Schema.TaggedStruct("Ok", { value: Schema.Unknown }),
  Schema.TaggedStruct("Failed", { error: Schema.Unknown })
)
type Outcome = typeof Outcome.Type

/** A closed slot, as its deferred carries it. */
const SlotClosed = Schema.Union(
  Schema.TaggedStruct("Answered", { value: Schema.Unknown, at: Schema.Number }),
  Schema.TaggedStruct("Expired", { deadline: Schema.Number }),
  Schema.TaggedStruct("Cancelled", {})
)
type SlotClosed = typeof SlotClosed.Type

const Ticket = Schema.Struct({ secret: Schema.String, deadline: Schema.Number })

const slotDeferred = (key: string) => DurableDeferred.make(`slot/${key}`, { success: SlotClosed })

const encodeFailure = Schema.encodeSync(Failure)
const decodeFailure = Schema.decodeUnknownOption(Failure)

const workflowName = (definition: string) => `pagantic/${definition}`

const makeWorkflow = (definition: AnyDefinition) =>
  Workflow.make({
    name: workflowName(definition.name),
    payload: { input: Schema.Unknown },
    success: Outcome,
    idempotencyKey: () => ""
  })

type RunWorkflow = ReturnType<typeof makeWorkflow>

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex")

const secretMatches = (secret: string, hash: string): boolean => {
  const given = Buffer.from(sha256(secret), "hex")
  const stored = Buffer.from(hash, "hex")
  return given.length === stored.length && timingSafeEqual(given, stored)
}

/** The first stack frame outside this folder and node_modules: where a step was called. */
const callSite = (): string => {
  const frames = (new Error().stack ?? "").split("\n").slice(1)
  const frame = frames.find((line) => !line.includes("/layers/durable/") && !line.includes("node_modules"))
  return frame === undefined ? "an unknown call site" : frame.trim().replace(/^at /, "")
}

const describeParse = (error: ParseResult.ParseError): string => ParseResult.TreeFormatter.formatErrorSync(error)

const failureOfCause = (cause: Cause.Cause<FailureType>): FailureType =>
  Option.getOrElse(Cause.failureOption(cause), () =>
    OrchestrationFailure.defect(`the run's program died: ${Cause.pretty(cause)}`, { cause: Cause.squash(cause) }))

const toUtc = (millis: number) => DateTime.unsafeMake(millis)

const parseJson = (text: string | null): unknown => (text === null ? undefined : JSON.parse(text))

const recordOf = (row: RecordRow): ThreadRecord =>
  new ThreadRecord({
    runId: row.run_id,
    seq: row.seq,
    kind: row.kind,
    key: row.key,
    at: toUtc(row.at),
    ...(row.body === null ? {} : { body: parseJson(row.body) })
  })

const endsThread = (row: RecordRow) => row.kind === "KNOW" || (row.kind === "STATE" && (row.key === "failed" || row.key === "cancelled"))

// ---------------------------------------------------------------------------
// The runs
// ---------------------------------------------------------------------------

export interface Options {
  /** Identifies this process's hold on the runs (a run recorded running by another owner is stale). */
  readonly owner: string
  /** Deletes what the engine keeps of a pruned run (its journal); none for the in-memory engine. */
  readonly purge?: ((workflow: string, runId: string) => Effect.Effect<void>) | undefined
}

/**
 * Registers `definitions` with the WorkflowEngine in context and returns the
 * Runs service over them, after re-driving what a previous process left going:
 * runs recorded as going are started (or resumed) again, slots closed but not
 * delivered are delivered, and the SLA timers of open slots are armed from their
 * stored deadlines.
 */
export const make = <Defs extends AnyDefinition>(
  definitions: ReadonlyArray<Defs>,
  options: Options
): Effect.Effect<
  RunsService,
  OrchestrationFailure | ConfigurationFailure,
  WorkflowEngine | SqlClient.SqlClient | Scope.Scope | Requirements<Defs>
> =>
  Effect.gen(function* () {
    const engine = yield* WorkflowEngine
    const store: Store = yield* StoreModule.make
    const requirements = yield* Effect.context<Requirements<Defs>>()
    const scope = yield* Effect.scope
    const changes = yield* PubSub.unbounded<string>()
    const timers = yield* FiberMap.make<string>()
    const cancelled = new Set<string>()
    /**
     * Runs this process did not start (re-driven after a restart, or imported):
     * their steps look in the thread first. A run started here has every DO it
     * wrote in the engine's journal as well, so it skips the lookup.
     */
    const inherited = new Set<string>()
    const owner = options.owner

    const byName = new Map<string, { readonly definition: AnyDefinition; readonly workflow: RunWorkflow }>()
    for (const definition of definitions) {
      if (byName.has(definition.name)) {
        return yield* ConfigurationFailure.invalidRequest(`two run definitions are named "${definition.name}"`)
      }
      const shapes = new Set<string>()
      for (const shape of definition.answers ?? []) {
        if (shapes.has(shape.name)) {
          return yield* ConfigurationFailure.invalidRequest(
            `run definition "${definition.name}" lists the answer shape "${shape.name}" twice`
          )
        }
        shapes.add(shape.name)
      }
      byName.set(definition.name, { definition, workflow: makeWorkflow(definition) })
    }

    const changed = (runId: string) => PubSub.publish(changes, runId)
    const now = Clock.currentTimeMillis

    const entryOf = (runId: string, row: RunRow | undefined) =>
      row === undefined
        ? Effect.fail(ConfigurationFailure.invalidRequest(`no run has the id "${runId}"`))
        : Option.match(Option.fromNullable(byName.get(row.definition)), {
          onNone: () =>
            Effect.fail(
              ConfigurationFailure.invalidRequest(
                `run ${runId} is of definition "${row.definition}", which this Runs layer does not have`
              )
            ),
          onSome: (entry) => Effect.succeed({ row, ...entry })
        })

    const findRun = (runId: string) => Effect.flatMap(store.getRun(runId), (row) => entryOf(runId, row))

    // -- closing slots ---------------------------------------------------------

    /** Resumes a run waiting on `key` until it moves (a resume can be lost in a race with its suspension). */
    const kick = (runId: string, key: string, workflow: RunWorkflow) =>
      Effect.gen(function* () {
        for (let i = 0; i < 20; i++) {
          yield* Effect.sleep(i === 0 ? "50 millis" : "250 millis")
          const row = yield* store.getRun(runId)
          if (row === undefined || row.status !== "suspended" || row.waiting_on !== key) return
          yield* engine.resume(workflow, runId)
        }
      }).pipe(Effect.ignore, Effect.forkIn(scope), Effect.asVoid)

    /** Hands a closed slot to its run's deferred (idempotent), then makes sure the run resumes. */
    const deliver = (slot: SlotRow) =>
      Effect.gen(function* () {
        const run = yield* store.getRun(slot.run_id)
        const entry = run === undefined ? undefined : byName.get(run.definition)
        if (entry === undefined) return
        const closed: SlotClosed = slot.status === "answered"
          ? { _tag: "Answered", value: (parseJson(slot.answer) as { value: unknown }).value, at: slot.closed_at ?? 0 }
          : slot.status === "expired"
          ? { _tag: "Expired", deadline: slot.deadline }
          : { _tag: "Cancelled" }
        yield* engine.deferredDone(slotDeferred(slot.key), {
          workflowName: entry.workflow.name,
          executionId: slot.run_id,
          deferredName: `slot/${slot.key}`,
          exit: Exit.succeed(closed)
        })
        yield* store.markDelivered(slot.run_id, slot.key)
        yield* kick(slot.run_id, slot.key, entry.workflow)
      })

    /** Closes an open slot; false when another writer closed it first. The winner records DO and delivers. */
    const close = (runId: string, key: string, status: "answered" | "expired" | "cancelled", answer?: unknown) =>
      Effect.gen(function* () {
        const at = yield* now
        const won = yield* store.closeSlot(runId, key, status, answer, at)
        if (!won) return false
        yield* store.record(runId, "DO", key, at, { slot: status, ...(answer === undefined ? {} : { answer }) })
        yield* changed(runId)
        const slot = yield* store.getSlot(runId, key)
        if (slot !== undefined) yield* deliver(slot)
        return true
      })

    /** The SLA timer of a slot: closes it as expired at its absolute deadline (at once if past). */
    const arm = (runId: string, key: string, deadline: number) =>
      FiberMap.run(
        timers,
        `${runId}\u0000${key}`,
        Effect.gen(function* () {
          const wait = deadline - (yield* now)
          if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
          yield* close(runId, key, "expired")
        }).pipe(
          Effect.catchAll((error) => Effect.logWarning(`the SLA timer of slot ${key} of run ${runId} failed: ${error.message}`))
        ),
        { onlyIfMissing: true }
      ).pipe(Effect.asVoid)

    // -- inside a run ------------------------------------------------------------

    const makeDurable = (
      runId: string,
      definition: AnyDefinition,
      context: Context.Context<WorkflowEngine | WorkflowInstance>
    ): Durable["Type"] => {
      const claimed = new Map<string, string>()
      const shapes = new Set((definition.answers ?? []).map((shape) => shape.name))
      const inRun = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.provide(effect, context) as Effect.Effect<A, E, Exclude<R, WorkflowEngine | WorkflowInstance>>

      const claim = (key: string, site: string) =>
        Effect.suspend(() => {
          const first = claimed.get(key)
          if (first !== undefined) {
            return Effect.die(
              OrchestrationFailure.defect(
                `the step key "${key}" is used twice in run ${runId}: first at ${first}, again at ${site}`,
                { details: { runId, key, first, again: site } }
              )
            )
          }
          claimed.set(key, site)
          return cancelled.has(runId)
            ? Effect.fail(Cancellation.signal(`run ${runId} was cancelled`, { runId }))
            : Effect.void
        })

      const recordQuietly = (key: string, body: unknown) =>
        Effect.flatMap(now, (at) => store.record(runId, "DO", key, at, body)).pipe(
          Effect.zipRight(changed(runId)),
          Effect.catchAll((error) => Effect.logWarning(`record DO ${key} of run ${runId}: ${error.message}`))
        )

      const journal = <A, I, R>(
        kind: string,
        key: string,
        schema: Schema.Schema<A, I>,
        execute: Effect.Effect<I, FailureType, R>
      ) =>
        Effect.flatMap(
          inRun(Activity.make({ name: `${kind}/${key}`, success: Schema.Unknown, error: Failure, execute })),
          (encoded) =>
            Schema.decodeUnknown(schema)(encoded).pipe(
              Effect.mapError((error) =>
                OrchestrationFailure.replayDiverged(
                  `the recorded ${kind} "${key}" of run ${runId} no longer matches its schema: ${describeParse(error)}`,
                  { details: { runId, key, kind } }
                )
              )
            )
        )

      /** The response recorded in the thread for `key` (an imported thread, a restart after the DO was written). */
      const recorded = <I, R>(key: string, otherwise: Effect.Effect<I, FailureType, R>): Effect.Effect<I, FailureType, R> =>
        !inherited.has(runId) ? otherwise : Effect.flatMap(store.findRecord(runId, "DO", key), (row) => {
          const body = row === undefined ? undefined : (parseJson(row.body) as { value?: unknown; error?: unknown } | undefined)
          if (body === undefined) return otherwise
          if ("error" in body) {
            return Option.match(decodeFailure(body.error), {
              onNone: () =>
                Effect.fail(OrchestrationFailure.replayDiverged(`the recorded failure of step "${key}" of run ${runId} is not a failure of the taxonomy`)),
              onSome: (failure) => Effect.fail(failure)
            })
          }
          return Effect.succeed(body.value as I)
        })

      const step: Durable["Type"]["step"] = (key, schema, effect, stepOptions) => {
        const site = callSite()
        const run = effect.pipe(
          Effect.flatMap((value) => Effect.orDie(Schema.encode(schema)(value))),
          Effect.tap((value) => recordQuietly(key, { value })),
          Effect.tapError((error) => recordQuietly(key, { error: encodeFailure(error) }))
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
        return Effect.zipRight(claim(key, site), journal("step", key, schema, recorded(key, stepOptions?.once === true ? once : run)))
      }

      const timeStep = (key: string, after: Duration.Duration) =>
        step(key, Schema.DateTimeUtcFromNumber, Effect.map(now, (at) => toUtc(at + Duration.toMillis(after))))

      const slot: Durable["Type"]["slot"] = (shape, slotOptions) => {
        const site = callSite()
        const key = slotOptions.key ?? shape.name
        const sla = Duration.toMillis(Duration.decode(slotOptions.sla))
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
                deadline: at + sla
              })
              yield* store.record(runId, "CALL", key, at, { slot: key, shape: shape.name, deadline })
              yield* changed(runId)
              return { secret, deadline }
            })
          )
          yield* arm(runId, key, ticket.deadline)
          return new Slot({
            runId,
            key,
            shape: shape.name,
            secret: Redacted.make(ticket.secret),
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
        idempotencyKey: (key) => sha256(`${runId}\u0000${key}`)
      }
    }

    /** One execution (or replay) of a run: the program under Durable, its end recorded once. */
    const execute = (definition: AnyDefinition) =>
    (payload: { readonly input: unknown }, runId: string): Effect.Effect<Outcome, never, WorkflowEngine | WorkflowInstance> =>
      Effect.gen(function* () {
        const context = yield* Effect.context<WorkflowEngine | WorkflowInstance>()
        const row = yield* store.markRunning(runId, owner, yield* now).pipe(Effect.orDie)
        yield* changed(runId)
        if (row !== undefined && terminalStatuses.has(row.status)) {
          return row.status === "completed"
            ? ({ _tag: "Ok", value: parseJson(row.result) } as const)
            : ({ _tag: "Failed", error: parseJson(row.error) } as const)
        }
        const exit = yield* Schema.decodeUnknown(definition.payload)(payload.input).pipe(
          Effect.mapError((error) =>
            OrchestrationFailure.replayDiverged(
              `the recorded payload (INTEND) of run ${runId} no longer matches "${definition.name}": ${describeParse(error)}`
            )
          ),
          Effect.flatMap((input) => definition.program(input) as Effect.Effect<unknown, FailureType, Durable>),
          Effect.flatMap((value) => Effect.orDie(Schema.encode(definition.success as Schema.Schema<unknown, unknown>)(value))),
          Effect.provideService(Durable, makeDurable(runId, definition, context)),
          Effect.provide(requirements),
          Effect.exit
        )
        // suspended (or interrupted): nothing ended
        if (Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)) return yield* Effect.interrupt
        const end = Exit.isSuccess(exit)
          ? { status: "completed" as const, result: exit.value }
          : { status: "failed" as const, error: encodeFailure(failureOfCause(exit.cause)) }
        yield* store.finish(runId, end, yield* now).pipe(Effect.orDie)
        yield* changed(runId)
        return end.status === "completed"
          ? ({ _tag: "Ok", value: end.result } as const)
          : ({ _tag: "Failed", error: end.error } as const)
      })

    for (const { definition, workflow } of byName.values()) {
      yield* engine.register(workflow, execute(definition))
    }

    // -- re-drive what a previous process left going ------------------------------

    for (const row of yield* store.activeRuns) {
      const entry = byName.get(row.definition)
      if (entry === undefined) {
        yield* Effect.logWarning(`run ${row.id} is of definition "${row.definition}", not registered here: left as is`)
        continue
      }
      inherited.add(row.id)
      yield* engine.execute(entry.workflow, { executionId: row.id, payload: { input: parseJson(row.payload) }, discard: true })
      yield* engine.resume(entry.workflow, row.id)
    }
    for (const slot of yield* store.undelivered) yield* deliver(slot)
    for (const slot of yield* store.openSlots) yield* arm(slot.run_id, slot.key, slot.deadline)

    // -- the Runs API ------------------------------------------------------------------

    const infoOf = (row: RunRow): RunInfo => {
      const error = row.error === null ? Option.none() : decodeFailure(parseJson(row.error))
      return new RunInfo({
        id: row.id,
        definition: row.definition,
        status: row.status === "running" && row.owner !== owner ? "stale" : row.status,
        ...(row.waiting_on === null ? {} : { waitingOn: row.waiting_on }),
        ...(row.result === null ? {} : { result: parseJson(row.result) }),
        ...(Option.isSome(error) ? { error: error.value } : {}),
        createdAt: toUtc(row.created_at),
        updatedAt: toUtc(row.updated_at)
      })
    }

    const poll = Effect.fn("Runs.poll")(function* (runId: string) {
      const { row } = yield* findRun(runId)
      return infoOf(row)
    })

    /** Waits for a change of `runId` after subscribing, so no change is missed between a check and the wait. */
    const waitUntil = <A>(runId: string, check: Effect.Effect<Option.Option<A>, RunsError>) =>
      Effect.scoped(
        Effect.gen(function* () {
          const subscription = yield* PubSub.subscribe(changes)
          while (true) {
            const done = yield* check
            if (Option.isSome(done)) return done.value
            while ((yield* Queue.take(subscription)) !== runId) {
              // another run changed
            }
          }
        })
      )

    const service: RunsService = {
      start: Effect.fn("Runs.start")(function* (definition, payload, startOptions) {
        const entry = byName.get(definition.name)
        if (entry === undefined || entry.definition !== definition) {
          return yield* ConfigurationFailure.invalidRequest(
            `run definition "${definition.name}" is not registered with this Runs layer`
          )
        }
        const input = yield* Schema.encode(definition.payload)(payload).pipe(
          Effect.mapError((error) =>
            ConfigurationFailure.invalidRequest(`the payload of "${definition.name}" is invalid: ${describeParse(error)}`)
          )
        )
        const id = startOptions?.id ?? globalThis.crypto.randomUUID()
        if (id.length === 0) return yield* ConfigurationFailure.invalidRequest("a run id cannot be empty")
        const inserted = yield* store.insertRun({ id, definition: definition.name, payload: input, owner, at: yield* now })
        if (inserted) {
          yield* changed(id)
          yield* engine.execute(entry.workflow, { executionId: id, payload: { input }, discard: true })
        }
        return id
      }),

      poll,

      await: Effect.fn("Runs.await")(function* (runId, awaitOptions) {
        yield* findRun(runId)
        return yield* waitUntil(
          runId,
          Effect.map(poll(runId), (info) =>
            terminalStatuses.has(info.status) || (awaitOptions?.untilSuspended === true && info.status === "suspended")
              ? Option.some(info)
              : Option.none())
        )
      }),

      resume: Effect.fn("Runs.resume")(function* (runId) {
        const { row, workflow } = yield* findRun(runId)
        if (terminalStatuses.has(row.status)) return
        yield* engine.execute(workflow, { executionId: runId, payload: { input: parseJson(row.payload) }, discard: true })
        yield* engine.resume(workflow, runId)
      }),

      cancel: Effect.fn("Runs.cancel")(function* (runId) {
        const { row, workflow } = yield* findRun(runId)
        if (terminalStatuses.has(row.status)) return
        cancelled.add(runId)
        const failure = Cancellation.signal(`run ${runId} was cancelled`, { runId })
        yield* store.finish(runId, { status: "cancelled", error: encodeFailure(failure) }, yield* now)
        yield* changed(runId)
        for (const slot of yield* store.openSlotsOf(runId)) yield* close(runId, slot.key, "cancelled")
        yield* engine.interrupt(workflow, runId)
      }),

      respond: Effect.fn("Runs.respond")(function* (runId, slotKey, secret, answer) {
        const { definition } = yield* findRun(runId)
        const slot = yield* store.getSlot(runId, slotKey)
        if (slot === undefined) {
          return yield* OrchestrationFailure.slotClosed(`run ${runId} has no slot "${slotKey}"`, {
            details: { runId, slot: slotKey }
          })
        }
        if (!secretMatches(secret, slot.secret_hash)) {
          return yield* ConfigurationFailure.invalidRequest(`the secret does not open slot "${slotKey}" of run ${runId}`, {
            details: { runId, slot: slotKey }
          })
        }
        if (slot.status !== "open") {
          return yield* OrchestrationFailure.slotClosed(`slot "${slotKey}" of run ${runId} is closed (${slot.status})`, {
            details: { runId, slot: slotKey, status: slot.status }
          })
        }
        const at = yield* now
        if (at >= slot.deadline) {
          yield* close(runId, slotKey, "expired")
          return yield* OrchestrationFailure.slotClosed(
            `slot "${slotKey}" of run ${runId} passed its deadline (${new Date(slot.deadline).toISOString()})`,
            { details: { runId, slot: slotKey, status: "expired" } }
          )
        }
        const shape = (definition.answers ?? []).find((candidate) => candidate.name === slot.shape)
        if (shape === undefined) {
          return yield* ConfigurationFailure.invalidRequest(
            `slot "${slotKey}" of run ${runId} takes the answer shape "${slot.shape}", which "${definition.name}" no longer lists`
          )
        }
        const encoded = yield* Schema.decodeUnknown(shape.schema)(answer).pipe(
          Effect.flatMap(Schema.encode(shape.schema)),
          Effect.mapError((error) =>
            ConfigurationFailure.invalidRequest(
              `the answer to slot "${slotKey}" does not match the shape "${shape.name}": ${describeParse(error)}`,
              { details: { runId, slot: slotKey } }
            )
          )
        )
        const won = yield* close(runId, slotKey, "answered", { value: encoded, at })
        if (!won) {
          return yield* OrchestrationFailure.slotClosed(`slot "${slotKey}" of run ${runId} closed before this answer`, {
            details: { runId, slot: slotKey }
          })
        }
        return "Accepted" as const
      }),

      events: (runId) =>
        Stream.unwrapScoped(
          Effect.gen(function* () {
            yield* findRun(runId)
            const subscription = yield* PubSub.subscribe(changes)
            const last = yield* Ref.make(0)
            const ended = yield* Ref.make(false)
            const pull: Effect.Effect<Chunk.Chunk<ThreadRecord>, Option.Option<RunsError>> = Effect.gen(function* () {
              if (yield* Ref.get(ended)) return yield* Effect.fail(Option.none())
              while (true) {
                const rows = yield* store.records(runId, yield* Ref.get(last)).pipe(Effect.mapError(Option.some))
                if (rows.length > 0) {
                  yield* Ref.set(last, rows[rows.length - 1]!.seq)
                  if (rows.some(endsThread)) yield* Ref.set(ended, true)
                  return Chunk.fromIterable(rows.map(recordOf))
                }
                while ((yield* Queue.take(subscription)) !== runId) {
                  // another run changed
                }
              }
            })
            return Stream.repeatEffectChunkOption(pull)
          })
        ),

      list: Effect.fn("Runs.list")(function* (listOptions) {
        const limit = listOptions?.limit ?? 100
        if (!(Number.isInteger(limit) && limit >= 1)) {
          return yield* ConfigurationFailure.invalidRequest(`a list limit must be a whole number >= 1, got ${limit}`)
        }
        const rows = yield* store.list(listOptions?.status, limit)
        const infos = rows.map(infoOf)
        return listOptions?.status === undefined ? infos : infos.filter((info) => info.status === listOptions.status)
      }),

      exportThread: Effect.fn("Runs.exportThread")(function* (runId) {
        const { row } = yield* findRun(runId)
        const records = yield* store.records(runId, 0)
        const slots = yield* store.slotsOf(runId)
        return new Thread({
          runId,
          definition: row.definition,
          payload: parseJson(row.payload),
          records: records.map(recordOf),
          slots: slots.map((slot) =>
            new ThreadSlot({
              key: slot.key,
              shape: slot.shape,
              status: slot.status,
              deadline: slot.deadline,
              ...(slot.answer === null ? {} : { answer: parseJson(slot.answer) }),
              ...(slot.closed_at === null ? {} : { closedAt: slot.closed_at })
            })
          )
        })
      }),

      importThread: Effect.fn("Runs.importThread")(function* (thread) {
        const entry = byName.get(thread.definition)
        if (entry === undefined) {
          return yield* ConfigurationFailure.invalidRequest(
            `the thread of run ${thread.runId} is of definition "${thread.definition}", which this Runs layer does not have`
          )
        }
        const inserted = yield* store.importRun({
          id: thread.runId,
          definition: thread.definition,
          payload: thread.payload,
          owner,
          at: yield* now,
          records: thread.records
            .filter((r) => r.kind !== "KNOW" && r.kind !== "STATE")
            .map((r) => ({ kind: r.kind, key: r.key, at: r.at.epochMillis, body: r.body })),
          slots: thread.slots.map((slot) => ({
            key: slot.key,
            shape: slot.shape,
            status: slot.status,
            deadline: slot.deadline,
            answer: slot.answer,
            closedAt: slot.closedAt
          }))
        })
        if (!inserted) return yield* ConfigurationFailure.invalidRequest(`a run with the id "${thread.runId}" exists already`)
        inherited.add(thread.runId)
        yield* changed(thread.runId)
        yield* engine.execute(entry.workflow, { executionId: thread.runId, payload: { input: thread.payload }, discard: true })
        for (const slot of yield* store.undelivered) if (slot.run_id === thread.runId) yield* deliver(slot)
        for (const slot of yield* store.openSlotsOf(thread.runId)) yield* arm(slot.run_id, slot.key, slot.deadline)
        return thread.runId
      }),

      prune: Effect.fn("Runs.prune")(function* (pruneOptions) {
        const before = (yield* now) - Duration.toMillis(Duration.decode(pruneOptions.olderThan))
        const gone = yield* store.prune(before)
        if (options.purge !== undefined) {
          for (const run of gone) yield* options.purge(workflowName(run.definition), run.id)
        }
        return gone.length
      })
    }
    return service
  })
