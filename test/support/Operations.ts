/**
 * Counts the Effect operations an effect takes: a Scheduler whose `shouldYield`
 * counts (the fiber runtime asks it once per operation of every fiber that runs
 * on it). The count is deterministic: load does not move it.
 */
import * as Effect from "effect/Effect"
import * as Scheduler from "effect/Scheduler"

/**
 * The operations of one run of `effect`, fibers it forks included, less those
 * of running `Effect.void` the same way (after two warm-up runs).
 */
export const operations = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<number, E, R> =>
  Effect.suspend(() => {
    let ops = 0
    const counting: Scheduler.Scheduler = {
      scheduleTask: (task, priority) => Scheduler.defaultScheduler.scheduleTask(task, priority),
      shouldYield: (fiber) => {
        ops++
        return Scheduler.defaultScheduler.shouldYield(fiber)
      }
    }
    const counted = <A1, E1, R1>(e: Effect.Effect<A1, E1, R1>) =>
      Effect.zipRight(Effect.sync(() => (ops = 0)), Effect.zipRight(Effect.withScheduler(e, counting), Effect.sync(() => ops)))
    return Effect.zipRight(
      Effect.repeatN(effect, 1),
      Effect.flatMap(counted(Effect.void), (floor) => Effect.map(counted(effect), (n) => n - floor))
    )
  })
