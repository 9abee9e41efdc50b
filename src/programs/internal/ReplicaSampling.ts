/**
 * How the replicas of a redundant call reach the engine.
 *
 * Each replica sees its own view of the engine: its requests carry the call's
 * seed moved by the replica's index (none when the call has none). When the
 * replicas start together, their first requests meet here: if all N are the same
 * request but for the seed, one `Engine.sampleMany` call draws the N replies (an
 * engine that can decodes what they share once) and each replica gets its own;
 * otherwise each replica makes its own call. Later requests (repairs, retries)
 * are always a replica's own. An engine without its own `sampleMany` is not
 * waited on: its replicas call it independently, as its fallback would. A replica that ends without asking (it failed
 * before its first request) is counted as absent, so the others never wait for it.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { InferenceFailure } from "../../domain/Failure.js"
import * as Engine from "../../services/Engine.js"

/** How the replicas' first replies were drawn: by the engine's own `sampleMany`, or by independent calls. */
export type Sampling = "tree" | "independent"

type Outcome = Either.Either<Engine.InferenceResult, InferenceFailure>

export interface ReplicaSampling {
  /** The engine replica `index` uses. */
  readonly engineFor: (index: number) => Engine.Service
  /** Replica `index` has ended (however it ended). */
  readonly ended: (index: number) => Effect.Effect<void>
  /** Whether the first replies are gathered: false when `ended` does nothing and need not be called. */
  readonly gathers: boolean
  /** Whether the first replies came from one `sampleMany` call. */
  readonly sampling: Effect.Effect<Sampling>
}

/** The request with the replica's seed (`seed + index`), or unchanged without a seed. */
const seeded = (request: Engine.InferenceRequest, seed: number | undefined, index: number) =>
  seed === undefined ? request : new Engine.InferenceRequest({ ...request, seed: seed + index }, true)

/** What two requests must share to be samples of one: everything but the seed. */
const sampleKey = (request: Engine.InferenceRequest): string => JSON.stringify({ ...request, seed: undefined })

/** The gathering views, one generator function for every call (a generator function made per call costs V8 new maps). */
function* gatheringSteps(engine: Engine.Service, n: number, seed: number | undefined) {
  const first: Array<Engine.InferenceRequest | "absent" | undefined> = Array.from({ length: n }, () => undefined)
  const replies = yield* Effect.forEach(first, () => Deferred.make<Option.Option<Outcome>>())
  let settled = false
  let sampling: Sampling = "independent"

  const deliver = (outcomes: ReadonlyArray<Option.Option<Outcome>>) =>
    Effect.forEach(replies, (reply, i) => Deferred.succeed(reply, outcomes[i] ?? Option.none()), { discard: true })

  // Run by the replica whose arrival (or end) completes the set.
  const settle: Effect.Effect<void> = Effect.suspend(() => {
    if (settled || first.some((r) => r === undefined)) return Effect.void
    settled = true
    const requests = first.filter((r): r is Engine.InferenceRequest => r !== "absent")
    const key = requests.length === n ? sampleKey(requests[0]!) : undefined
    if (key === undefined || requests.some((r) => sampleKey(r) !== key)) {
      return deliver(first.map(() => Option.none()))
    }
    sampling = "tree"
    return Engine.sampleMany(engine, seeded(requests[0]!, seed, 0), n).pipe(
      Effect.either,
      Effect.flatMap((drawn) =>
        deliver(first.map((_, i) =>
          Option.some<Outcome>(
            Either.isLeft(drawn)
              ? Either.left(drawn.left)
              : drawn.right[i] ??
                Either.left(InferenceFailure.engineError(`sampleMany returned ${drawn.right.length} samples of ${n}`, {}))
          )
        ))
      ),
      // interrupted while drawing: the waiting replicas are interrupted too, never left waiting
      Effect.onInterrupt(() => Effect.forEach(replies, Deferred.interrupt, { discard: true }))
    )
  })

  const engineFor = (index: number): Engine.Service => ({
    infer: (request) =>
      Effect.suspend(() => {
        if (first[index] !== undefined) return engine.infer(seeded(request, seed, index))
        first[index] = request
        return settle.pipe(
          Effect.zipRight(Deferred.await(replies[index]!)),
          Effect.flatMap(Option.match({
            onNone: () => engine.infer(seeded(request, seed, index)),
            onSome: (outcome) => outcome
          }))
        )
      }),
    stream: (request) => engine.stream(seeded(request, seed, index)),
    modelInfo: engine.modelInfo
  })

  const ended = (index: number) =>
    Effect.suspend(() => {
      if (first[index] !== undefined) return Effect.void
      first[index] = "absent"
      return settle
    })

  return { engineFor, ended, gathers: true, sampling: Effect.sync(() => sampling) }
}

/**
 * The replicas' views of `engine`. With `together` (all N start at once), the
 * first requests are gathered and drawn by one `sampleMany` when they agree.
 */
export const make = (
  engine: Engine.Service,
  n: number,
  seed: number | undefined,
  together: boolean
): Effect.Effect<ReplicaSampling> => {
  // nothing to gather: each replica calls the engine itself (the engine as it is when there is no seed to move)
  if (!(together && n > 1 && engine.sampleMany !== undefined)) {
    const views = Array.from({ length: n }, (_, index): Engine.Service =>
      seed === undefined ? engine : {
        infer: (request) => engine.infer(seeded(request, seed, index)),
        stream: (request) => engine.stream(seeded(request, seed, index)),
        modelInfo: engine.modelInfo
      })
    return Effect.succeed({
      engineFor: (index) => views[index] ?? engine,
      ended: () => Effect.void,
      gathers: false,
      sampling: Effect.succeed("independent")
    })
  }
  return Effect.gen(() => gatheringSteps(engine, n, seed))
}
