/**
 * The lifecycle state machine at run time.
 *
 * The facade owns one tracker per request: it holds the ExecutionState, moves it
 * only along the transitions seed 03 allows, counts attempts (VALIDATE -> EXECUTE
 * is a retry) and records a LifecycleTransition event for every move. The tracker
 * travels with the fiber, so a loop deep inside the request (a structured call
 * re-prompting, a plan step) reports its retries with `transition` without knowing
 * who is listening. Outside a tracked request `transition` only records the event.
 * Terminal states are the facade's: a nested loop cannot complete the request.
 */
import * as Clock from "effect/Clock"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Event from "../domain/Event.js"
import type { LifecycleState } from "../domain/Lifecycle.js"
import { canTransition, ExecutionState } from "../domain/Lifecycle.js"
import type { SystemError } from "../domain/System.js"
import { recordEvent } from "../services/Observe.js"

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
}

/** The tracker of the request the fiber is serving, if any. */
export const currentTracker: FiberRef.FiberRef<Option.Option<Tracker>> = FiberRef.unsafeMake<Option.Option<Tracker>>(
  Option.none()
)

const record = (fromState: LifecycleState, toState: LifecycleState, attempt: number, reason: string) =>
  recordEvent(
    (base) => new Event.LifecycleTransition({ ...base, layer: "orchestrate", fromState, toState, attempt, reason })
  )

/** A tracker starting in INIT. */
export const makeTracker: Effect.Effect<Tracker> = Effect.gen(function* () {
  const now = DateTime.unsafeMake(yield* Clock.currentTimeMillis)
  const state = yield* Ref.make(new ExecutionState({ current: "INIT", enteredAt: now, attempt: 1, totalSteps: 0 }))
  const history = yield* Ref.make<ReadonlyArray<{ readonly from: LifecycleState; readonly to: LifecycleState }>>([])
  const lock = yield* Effect.makeSemaphore(1)
  return {
    state: Ref.get(state),
    history: Ref.get(history),
    stepCompleted: (name) => Ref.update(state, (s) => new ExecutionState({ ...s, totalSteps: s.totalSteps + 1, lastStep: name })),
    transition: (to, reason, fields = {}) =>
      lock.withPermits(1)(
        Effect.gen(function* () {
          const current = yield* Ref.get(state)
          if (!canTransition(current.current, to)) return false
          const enteredAt = DateTime.unsafeMake(yield* Clock.currentTimeMillis)
          const attempt = current.current === "VALIDATE" && to === "EXECUTE" ? current.attempt + 1 : current.attempt
          yield* Ref.set(
            state,
            new ExecutionState({
              ...current,
              current: to,
              enteredAt,
              attempt,
              ...(fields.error === undefined ? {} : { lastError: fields.error })
            })
          )
          yield* Ref.update(history, (h) => [...h, { from: current.current, to }])
          yield* record(current.current, to, attempt, reason)
          return true
        })
      )
  } satisfies Tracker
})

/**
 * Reports a move of the lifecycle from inside a loop. With a tracker (inside the
 * facade) the machine moves and records; without one, the event is recorded as seen.
 * Loops report only EXECUTE and VALIDATE; terminal states belong to the facade.
 */
export const transition = (from: LifecycleState, to: LifecycleState, attempt: number, reason: string): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(currentTracker), (tracker) =>
    Option.isSome(tracker)
      ? Effect.asVoid(tracker.value.transition(to, reason))
      : record(from, to, attempt, reason)
  )

/** Runs `effect` with `tracker` as the request's tracker. */
export const tracked =
  (tracker: Tracker) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.locally(effect, currentTracker, Option.some(tracker))
