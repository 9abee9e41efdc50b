/**
 * The lifecycle state machine at run time.
 *
 * The facade owns one tracker per request: it holds the ExecutionState, moves it
 * only along the transitions domain/Lifecycle allows (`canTransition`), counts
 * attempts (VALIDATE -> EXECUTE is a retry) and records a LifecycleTransition
 * event for every move. The tracker
 * travels with the fiber, so a loop deep inside the request (a structured call
 * re-prompting, a plan step) reports its retries with `transition` without knowing
 * who is listening. Outside a tracked request `transition` only records the event.
 * Terminal states are the facade's: a nested loop cannot complete the request.
 *
 * Tracing: every state entered is a span, `lifecycle {STATE}`, child of the span
 * the tracker was made in (the facade's request span), open from the move into the
 * state to the move out of it; terminal states are instants. Attributes carry the
 * state, the state it came from, the attempt and the reason. Spans rather than
 * events, so a trace view shows how long the request spent in each state and a
 * tree rebuilt from parent ids lists the states in order under the request.
 * When nobody observes (no events recorded, no tracer exporting) no state span is
 * opened: the moves, the history and the attempts are the same.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import type * as Tracer from "effect/Tracer"
import * as Event from "../domain/Event.js"
import type { LifecycleState } from "../domain/Lifecycle.js"
import { canTransition, ExecutionState, terminalStates } from "../domain/Lifecycle.js"
import type { SystemError } from "../domain/System.js"
import { recordEvent, withCorrelation } from "../services/EventLog.js"
import { withMetrics } from "../services/Metrics.js"
import * as Observed from "./internal/Observed.js"
import * as Spans from "./internal/Spans.js"
import * as Local from "../services/internal/Local.js"
import * as Construct from "../domain/Construct.js"

export interface Tracker {
  /** The current ExecutionState (a copy). */
  readonly state: Effect.Effect<ExecutionState>
  /** Moves the machine; a move the machine does not allow changes nothing and returns false. */
  readonly transition: (
    to: LifecycleState,
    reason: string,
    fields?: { readonly error?: SystemError | undefined }
  ) => Effect.Effect<boolean>
  /** Counts a completed plan step. */
  readonly stepCompleted: (name: string) => Effect.Effect<void>
  /** Every move made, in order. */
  readonly history: Effect.Effect<ReadonlyArray<{ readonly from: LifecycleState; readonly to: LifecycleState }>>
  /** Ends the open state's span, for a request interrupted before it reached a terminal state. */
  readonly interrupted: Effect.Effect<void>
  /** `state`, read now (by a caller inside a step of its own). */
  readonly unsafeState: () => ExecutionState
  /** `history`, read now. */
  readonly unsafeHistory: () => ReadonlyArray<{ readonly from: LifecycleState; readonly to: LifecycleState }>
  /**
   * `transition`, made now inside the caller's step, for a tracker whose states
   * are not spans (nobody observed when it was made): `undefined` when the move
   * must be made as an effect (events are recorded or spans exported in
   * `fiber`), else whether the machine moved.
   */
  readonly unsafeTransition: (
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    to: LifecycleState,
    fields?: { readonly error?: SystemError | undefined }
  ) => boolean | undefined
}

/**
 * `effect` after the move to `to`: the move made in the step that starts
 * `effect` when the tracker can make it there (no second step, see
 * `Tracker.unsafeTransition`), else as the tracker's `transition` first.
 */
export const moveThen = <A, E, R>(
  tracker: Tracker,
  to: LifecycleState,
  reason: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => Effect.withFiberRuntime((fiber) => moveNowThen(fiber, tracker, to, reason, effect))

/**
 * `moveThen` for an effect made from the fiber that makes the move: made in the
 * same step when the move is (`f` then runs in this step), else after the move.
 */
export const moveThenIn = <A, E, R>(
  tracker: Tracker,
  to: LifecycleState,
  reason: string,
  f: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) =>
    tracker.unsafeTransition(fiber, to) === undefined
      ? Effect.zipRight(tracker.transition(to, reason), Effect.withFiberRuntime(f))
      : f(fiber)
  )

/**
 * `moveThen` from inside a step of `fiber` (the caller's own): the move made now
 * when it can be, else as an effect before `effect`.
 */
export const moveNowThen = <A, E, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  tracker: Tracker,
  to: LifecycleState,
  reason: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  tracker.unsafeTransition(fiber, to) === undefined ? Effect.zipRight(tracker.transition(to, reason), effect) : effect

/** The tracker of the request the fiber is serving, if any. */
export const currentTracker: FiberRef.FiberRef<Option.Option<Tracker>> = FiberRef.unsafeMake<Option.Option<Tracker>>(
  Option.none()
)

const record = (fromState: LifecycleState, toState: LifecycleState, attempt: number, reason: string) => {
  // built from typed values, as the other events are: not validated again
  const recorded = recordEvent(
    (base) => new Event.LifecycleTransition({ ...base, layer: "orchestrate" as const, fromState, toState, attempt, reason }, true)
  )
  return fromState === "VALIDATE" && toState === "EXECUTE"
    ? Effect.zipRight(recorded, withMetrics((m) => m.increment("retries")))
    : recorded
}

/** Opens the span of a state entered, under the request span. */
const stateSpan = (
  parent: Tracer.AnySpan,
  state: LifecycleState,
  from: LifecycleState | undefined,
  attempt: number,
  reason: string,
  error?: SystemError
): Effect.Effect<Tracer.Span> =>
  Effect.flatMap(Spans.correlationAttributes, (ids) =>
    Effect.makeSpan(`lifecycle ${state}`, {
      parent,
      captureStackTrace: false,
      attributes: {
        [Spans.Pagantic.lifecycleState]: state,
        ...(from === undefined ? {} : { [Spans.Pagantic.lifecycleFrom]: from }),
        [Spans.Pagantic.attempt]: attempt,
        [Spans.Pagantic.lifecycleReason]: reason,
        ...(error === undefined ? {} : { [Spans.Pagantic.errorCode]: error.code }),
        // the correlation's ids last: none of them is a lifecycle attribute, so the order of keys is all that moves
        ...ids
      }
    })
  )

const endSpan = (span: Tracer.Span): Effect.Effect<void> =>
  Effect.map(Clock.currentTimeNanos, (now) => span.end(now, Exit.void))

/** A tracker starting in INIT. */
export const makeTracker: Effect.Effect<Tracker> = Effect.withFiberRuntime((fiber) => {
  const machine = new Machine(fiber)
  // States are spans only when somebody observes (events recorded or spans exported), under the request's span.
  if (!Observed.listenedBy(fiber)) return Effect.succeed(machine)
  return Effect.flatMap(Effect.option(Effect.currentParentSpan), (parent) =>
    Option.isNone(parent) ? Effect.succeed(machine) : observedTracker(parent.value, machine))
})

/**
 * `makeTracker`, made now inside the caller's step when nobody observes in
 * `fiber` (its states are then no spans); `undefined` when it must be made as an
 * effect.
 */
export const unsafeMakeTracker = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Tracker | undefined =>
  Observed.listenedBy(fiber) ? undefined : new Machine(fiber)

/** A move of the machine, as its history keeps it. */
class Move {
  constructor(readonly from: LifecycleState, readonly to: LifecycleState) {}
}

/**
 * The machine in INIT, and the tracker of it whose states are no spans.
 *
 * Its state is plain fields moved in one synchronous step (atomic between fibers): no Ref, no ExecutionState built
 * per move (one is built when the state is read), and no lock unless state spans must open and close in the order of
 * the moves. A class, not a closure per method: a request makes one, and a literal of a dozen closures costs more
 * than the work its closures do; its effects (`state`, `history`) are made when read.
 */
class Machine implements Tracker {
  current: LifecycleState = "INIT"
  enteredAt: number
  attempt = 1
  totalSteps = 0
  lastStep: string | undefined = undefined
  lastError: SystemError | undefined = undefined
  readonly moves: Array<Move> = []

  constructor(fiber: Fiber.RuntimeFiber<unknown, unknown>) {
    this.enteredAt = Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeMillis()
  }

  /** Moves the machine now, if it may: the state left, or undefined. */
  move(clock: Clock.Clock, to: LifecycleState, error: SystemError | undefined): LifecycleState | undefined {
    const from = this.current
    if (!canTransition(from, to)) return undefined
    if (from === "VALIDATE" && to === "EXECUTE") this.attempt++
    this.current = to
    this.enteredAt = clock.unsafeCurrentTimeMillis()
    if (error !== undefined) this.lastError = error
    this.moves.push(new Move(from, to))
    return from
  }

  // built from the fields the moves set, which are valid by construction: not validated again
  unsafeState(): ExecutionState {
    return Construct.unchecked(ExecutionState, {
      current: this.current,
      enteredAt: DateTime.unsafeMake(this.enteredAt),
      attempt: this.attempt,
      totalSteps: this.totalSteps,
      ...(this.lastError === undefined ? {} : { lastError: this.lastError }),
      ...(this.lastStep === undefined ? {} : { lastStep: this.lastStep })
    })
  }

  unsafeHistory(): ReadonlyArray<{ readonly from: LifecycleState; readonly to: LifecycleState }> {
    return this.moves.map((m) => ({ from: m.from, to: m.to }))
  }

  get state(): Effect.Effect<ExecutionState> {
    return Effect.sync(() => this.unsafeState())
  }

  get history(): Effect.Effect<ReadonlyArray<{ readonly from: LifecycleState; readonly to: LifecycleState }>> {
    return Effect.sync(() => this.unsafeHistory())
  }

  stepCompleted(name: string): Effect.Effect<void> {
    return Effect.sync(() => {
      this.totalSteps++
      this.lastStep = name
    })
  }

  get interrupted(): Effect.Effect<void> {
    return Effect.void
  }

  // no spans: one step a move, the clock and whether anybody records read from the fiber (most moves record nothing)
  transition(to: LifecycleState, reason: string, fields: { readonly error?: SystemError | undefined } = {}): Effect.Effect<boolean> {
    return Effect.withFiberRuntime((fiber) => {
      const left = this.move(Context.get(fiber.currentDefaultServices, Clock.Clock), to, fields.error)
      if (left === undefined) return Effect.succeed(false)
      return Observed.listenedBy(fiber) ? Effect.as(record(left, to, this.attempt, reason), true) : Effect.succeed(true)
    })
  }

  // the same move when nobody listens in `fiber` (then it records nothing: no effect to run)
  unsafeTransition(
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    to: LifecycleState,
    fields?: { readonly error?: SystemError | undefined }
  ): boolean | undefined {
    return Observed.listenedBy(fiber)
      ? undefined
      : this.move(Context.get(fiber.currentDefaultServices, Clock.Clock), to, fields?.error) !== undefined
  }
}

/** A tracker whose states are spans under `request` (somebody observes). */
const observedTracker = (request: Tracer.AnySpan, machine: Machine): Effect.Effect<Tracker> => Effect.gen(function* () {
  // each move closes the open state's span and opens the next, in the order of the moves
  let open: Option.Option<Tracer.Span> = Option.some(yield* stateSpan(request, "INIT", undefined, 1, "request received"))
  const lock = yield* Effect.makeSemaphore(1)
  return {
    state: machine.state,
    history: machine.history,
    stepCompleted: (name) => machine.stepCompleted(name),
    unsafeState: () => machine.unsafeState(),
    unsafeHistory: () => machine.unsafeHistory(),
    // each move closes and opens spans, in order under the lock: always an effect
    unsafeTransition: () => undefined,
    interrupted: Effect.suspend(() => {
      const span = open
      open = Option.none()
      return Option.isSome(span)
        ? Effect.zipRight(Effect.sync(() => span.value.attribute("pagantic.lifecycle.interrupted", true)), endSpan(span.value))
        : Effect.void
    }),
    transition: (to, reason, fields = {}) =>
      lock.withPermits(1)(
        Effect.gen(function* () {
          const left = machine.move(yield* Effect.clock, to, fields.error)
          if (left === undefined) return false
          const attempt = machine.attempt
          if (Option.isSome(open)) yield* endSpan(open.value)
          const next = yield* stateSpan(request, to, left, attempt, reason, fields.error)
          // the event belongs to the state entered: its span, under the request's
          yield* record(left, to, attempt, reason).pipe(
            withCorrelation({ spanId: next.spanId, parentSpanId: request.spanId })
          )
          if (terminalStates.has(to)) {
            yield* endSpan(next)
            open = Option.none()
          } else {
            open = Option.some(next)
          }
          return true
        })
      )
  } satisfies Tracker
})

/**
 * Reports a move of the lifecycle from inside a loop. With a tracker (inside the
 * facade) the machine moves and records; without one, the event is recorded as seen.
 * Loops report only EXECUTE, VALIDATE and SUSPENDED (a durable run waiting for an
 * outside answer; SUSPENDED -> EXECUTE on resume keeps the attempt); terminal
 * states belong to the facade.
 */
export const transition = (from: LifecycleState, to: LifecycleState, attempt: number, reason: string): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    const tracker = fiber.getFiberRef(currentTracker)
    if (Option.isSome(tracker)) return Effect.asVoid(tracker.value.transition(to, reason))
    // in the same step: with nothing that records, nothing to do (the common case of a loop run alone)
    return Observed.recordsIn(fiber.currentContext) ? record(from, to, attempt, reason) : Effect.void
  })

/** Runs `effect` with `tracker` as the request's tracker. */
export const tracked =
  (tracker: Tracker) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Local.locally(effect, currentTracker, Option.some(tracker))
