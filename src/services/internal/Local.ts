/**
 * A fiber ref's value, or the context, changed for one effect, at about 40%
 * the operations of Effect's own.
 *
 * `Effect.locally`, `Effect.locallyWith`, `Effect.provide(context)` and
 * `Effect.provideService` all set a fiber ref through `acquireUseRelease`:
 * about 22 Effect operations each, on paths where the effect inside costs a few
 * (a tool call, a correlation id set for a turn). These (9 operations; 10 for
 * `locally`, which first looks whether the ref holds the value already) do the
 * same with an uninterruptible region around one match: the value is set and
 * set back by the fiber itself, in the step that reads it; the effect runs
 * in the caller's interruptibility, and the old value is set back whatever way
 * it ends (success, failure, defect, interruption) before the result goes on.
 * Fibers forked inside see the new value, as with Effect's.
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Scope from "effect/Scope"

/**
 * What `FiberRef.set` runs: the fiber's own `setFiberRef` (a method of every
 * runtime fiber that its public type leaves out), called here by the fiber
 * itself, inside `withFiberRuntime`, as Effect's fiber refs do.
 */
export const setRef = <V>(fiber: Fiber.RuntimeFiber<unknown, unknown>, ref: FiberRef.FiberRef<V>, value: V): void =>
  (fiber as unknown as { setFiberRef(ref: FiberRef.FiberRef<V>, value: V): void }).setFiberRef(ref, value)

/** `Effect.locallyWith`: `effect` with `ref` set to `f` of its value, set back afterwards. */
export const locallyWith = <A, E, R, V>(
  effect: Effect.Effect<A, E, R>,
  ref: FiberRef.FiberRef<V>,
  f: (current: V) => V
): Effect.Effect<A, E, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiberRuntime<A, E, R>((fiber) => {
      const old = fiber.getFiberRef(ref)
      setRef(fiber, ref, f(old))
      return Effect.matchCauseEffect(restore(effect), {
        onFailure: (cause) =>
          Effect.withFiberRuntime<never, E>((back) => {
            setRef(back, ref, old)
            return Effect.failCause(cause)
          }),
        onSuccess: (a) =>
          Effect.withFiberRuntime<A>((back) => {
            setRef(back, ref, old)
            return Effect.succeed(a)
          })
      })
    })
  )

/**
 * `Effect.locally`: `effect` with `ref` set to `value`, set back afterwards.
 * When `ref` holds `value` already, `effect` runs as it is (one operation): for
 * the library's own refs, which only `locally` sets (an effect that set `ref`
 * itself would keep its change).
 */
export const locally = <A, E, R, V>(effect: Effect.Effect<A, E, R>, ref: FiberRef.FiberRef<V>, value: V): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => fiber.getFiberRef(ref) === value ? effect : locallyWith(effect, ref, () => value))

/**
 * `Effect.provide(effect, context)`: the context's services added to the
 * caller's (replacing the same tags) for `effect`. When the caller's context
 * holds every one of them already (the services a loop or a registry took where
 * it was made are most often the ones its caller runs with), `effect` runs as it
 * is: the merge would give the same services.
 */
export const provide = <A, E, R, S>(
  effect: Effect.Effect<A, E, R>,
  context: Context.Context<S>
): Effect.Effect<A, E, Exclude<R, S>> =>
  Effect.withFiberRuntime((fiber) =>
    holdsAll(fiber.currentContext, context as Context.Context<unknown>)
      ? effect
      : locallyWith(effect, FiberRef.currentContext, (parent) => Context.merge(parent, context))
  ) as Effect.Effect<A, E, Exclude<R, S>>

/** `Effect.provideService`, nothing to do when the caller's context holds that service already. */
export const provideService = <A, E, R, I, S>(
  effect: Effect.Effect<A, E, R>,
  tag: Context.Tag<I, S>,
  service: NoInfer<S>
): Effect.Effect<A, E, Exclude<R, I>> =>
  Effect.withFiberRuntime((fiber) =>
    fiber.currentContext.unsafeMap.get(tag.key) === service
      ? effect
      : locallyWith(effect, FiberRef.currentContext, (parent) => Context.add(parent, tag, service))
  ) as Effect.Effect<A, E, Exclude<R, I>>

/** Whether `current` has each service of `context`, the same value under the same tag. */
export const holdsAll = (current: Context.Context<never>, context: Context.Context<unknown>): boolean => {
  if (context.unsafeMap.size > current.unsafeMap.size) return false
  for (const [key, service] of context.unsafeMap) if (current.unsafeMap.get(key) !== service) return false
  return true
}

/**
 * `Context.merge(parent, context)`, remembered for the last pair it was asked: the requests of one facade, made
 * from one caller's context onto the facade's, share one merged context instead of a new one each (a Map of every
 * service). It holds the last pair and their merge, nothing more.
 */
export class MergeMemo {
  private parent: Context.Context<never> | undefined = undefined
  private context: Context.Context<unknown> | undefined = undefined
  private merged: Context.Context<never> | undefined = undefined

  /** `parent` with `context` over it: `undefined` when `parent` holds all of `context` already (nothing to merge). */
  merge(parent: Context.Context<never>, context: Context.Context<unknown>): Context.Context<never> | undefined {
    if (parent === this.parent && context === this.context) return this.merged
    const merged = holdsAll(parent, context) ? undefined : Context.merge(parent, context) as Context.Context<never>
    this.parent = parent
    this.context = context
    this.merged = merged
    return merged
  }
}

/**
 * `Effect.scoped` (the effect `make` returns, with a scope of its own in the
 * context, the scope closed with its exit), at 14 operations (Effect's takes 37):
 * the context set and set back by the fiber itself, as the regions here
 * are, in an uninterruptible region around one match; `make` is called once the
 * scope is in the context.
 */
export const scoped = <A, E>(make: () => Effect.Effect<A, E, Scope.Scope>): Effect.Effect<A, E> =>
  Effect.flatMap(Scope.make(), (scope) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.withFiberRuntime<A, E>((fiber) => {
        const outer = fiber.getFiberRef(FiberRef.currentContext)
        setRef(fiber, FiberRef.currentContext, Context.add(outer, Scope.Scope, scope))
        // as Effect.scoped: the context set back, then the scope closed (a failure closing it fails the effect)
        const close = (exit: Exit.Exit<A, E>): Effect.Effect<A, E> =>
          Effect.withFiberRuntime((back) => {
            setRef(back, FiberRef.currentContext, outer)
            return Effect.matchCauseEffect(Scope.close(scope, exit), {
              onFailure: (cause) => Effect.failCause(Exit.isFailure(exit) ? Cause.sequential(exit.cause, cause) : cause),
              onSuccess: () => exit
            })
          })
        // the Scope it needs is in the context now
        return Effect.matchCauseEffect(restore(make() as Effect.Effect<A, E>), {
          onFailure: (cause) => close(Exit.failCause(cause)),
          onSuccess: (a) => close(Exit.succeed(a))
        })
      })
    )
  )
