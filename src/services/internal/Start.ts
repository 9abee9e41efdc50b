/**
 * A fiber started at once on the caller's stack, as `Runtime.runFork` starts
 * one (Effect's `fork` only schedules its fiber): with the caller's context,
 * fiber refs and runtime flags, it runs until it ends or suspends before this
 * returns. An effect that does not suspend has its exit ready
 * (`fiber.unsafePoll()`), with nothing scheduled or awaited for it.
 *
 * The fiber is a root fiber, not the caller's child: whoever starts it waits
 * for it or interrupts it (services/internal/Timeout, the facade's requests),
 * from an uninterruptible region so that it is never left running.
 */
import type * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as FiberRef from "effect/FiberRef"
import * as FiberRefs from "effect/FiberRefs"
import * as Runtime from "effect/Runtime"
import type * as RuntimeFlags from "effect/RuntimeFlags"

/**
 * What the fiber starts with instead of the caller's: its context, and values
 * of fiber refs. Set when the fiber is made (one copy of its refs), they need no
 * region to set them and none to set them back: the fiber ends with them.
 */
export interface Seed {
  readonly context?: Context.Context<never> | undefined
  readonly refs?: ReadonlyArray<readonly [FiberRef.FiberRef<any>, unknown]> | undefined
}

type FiberRefsEntries = Parameters<typeof FiberRefs.updateManyAs>[1]["entries"]

/** `effect` in a fiber of its own, started now by `parent` (from inside `Effect.withFiberRuntime`). */
export const now = <A, E, R>(
  parent: Fiber.RuntimeFiber<unknown, unknown>,
  runtimeFlags: RuntimeFlags.RuntimeFlags,
  effect: Effect.Effect<A, E, R>,
  seed?: Seed
): Fiber.RuntimeFiber<A, E> => {
  const refs = seed?.refs
  return Runtime.runFork(
    Runtime.make({
      context: (seed?.context ?? parent.currentContext) as Context.Context<R>,
      runtimeFlags,
      fiberRefs: parent.getFiberRefs()
    })
  )(
    effect,
    refs === undefined || refs.length === 0 ? undefined : {
      updateRefs: (fiberRefs, fiberId) =>
        FiberRefs.updateManyAs(fiberRefs, {
          entries: refs.map(([ref, value]) => [ref, [[fiberId, value]]] as const) as unknown as FiberRefsEntries
        })
    }
  )
}
