/**
 * A pool of the context sequences of one llama.cpp context.
 *
 * Each concurrent inference takes a sequence for its duration, so concurrent
 * requests decode in the same batches instead of queueing; when every sequence is
 * busy, callers wait for one to come back. A sequence keeps the tokens it last
 * evaluated, so a conversation that returns to the same sequence pays only for
 * its new tokens: a request with a session key is pinned to the sequence it used
 * last, and any other request goes to the free sequence that already holds the
 * longest part of its prompt. Pins are bounded (least recently used first out), and a free pinned
 * sequence is still lent to others when no unpinned one is free, so sessions never
 * starve other callers; the evicted session merely re-evaluates its history.
 */
import * as Effect from "effect/Effect"
import * as Permits from "../../services/internal/Permits.js"

/** One sequence of the pool, with its bookkeeping. */
export interface Slot<A> {
  readonly index: number
  readonly value: A
}

interface SlotState<A> extends Slot<A> {
  busy: boolean
  session: string | undefined
  lastUsed: number
}

export interface SequencePool<A> {
  /**
   * Runs `use` with a sequence, waiting while all are busy, and returns the
   * sequence when `use` ends however it ends. Without a pinned sequence, the free
   * unpinned sequence with the highest `affinity` (e.g. the longest prefix
   * already evaluated) wins.
   */
  readonly withSlot: <B, E, R>(
    sessionKey: string | undefined,
    affinity: ((value: A) => number) | undefined,
    use: (slot: Slot<A>) => Effect.Effect<B, E, R>
  ) => Effect.Effect<B, E, R>
  /** How many sequences are busy, and which session each one is pinned to. */
  readonly snapshot: Effect.Effect<{
    readonly busy: number
    readonly sessions: ReadonlyArray<string | undefined>
  }>
}

/** Makes a pool over the given sequences; at most `maxPinnedSessions` sessions keep a sequence. */
export const make = <A>(
  values: ReadonlyArray<A>,
  options: { readonly maxPinnedSessions: number }
): Effect.Effect<SequencePool<A>> =>
  Effect.gen(function*() {
    // a free sequence is taken in the step that asks (Effect's Semaphore suspends even then: services/internal/Permits)
    const permits = Permits.unsafeMake(values.length)
    const slots: Array<SlotState<A>> = values.map((value, index) => ({
      index,
      value,
      busy: false,
      session: undefined,
      lastUsed: 0
    }))
    let clock = 0

    const leastRecent = (candidates: ReadonlyArray<SlotState<A>>): SlotState<A> | undefined =>
      candidates.reduce<SlotState<A> | undefined>(
        (best, s) => (best === undefined || s.lastUsed < best.lastUsed ? s : best),
        undefined
      )

    // Called only while holding a permit, so a free slot exists.
    const best = (
      candidates: ReadonlyArray<SlotState<A>>,
      affinity: ((value: A) => number) | undefined
    ): SlotState<A> | undefined => {
      if (affinity === undefined) return leastRecent(candidates)
      let chosen: SlotState<A> | undefined
      let chosenScore = -Infinity
      for (const s of candidates) {
        const score = affinity(s.value)
        if (score > chosenScore || (score === chosenScore && chosen !== undefined && s.lastUsed < chosen.lastUsed)) {
          chosen = s
          chosenScore = score
        }
      }
      return chosen
    }

    const pick = (sessionKey: string | undefined, affinity: ((value: A) => number) | undefined): SlotState<A> => {
      const free = slots.filter((s) => !s.busy)
      const own = sessionKey === undefined ? undefined : free.find((s) => s.session === sessionKey)
      const slot = own ??
        best(free.filter((s) => s.session === undefined), affinity) ??
        best(free, affinity)!
      slot.busy = true
      slot.lastUsed = ++clock
      if (slot.session !== sessionKey) {
        slot.session = undefined
        if (sessionKey !== undefined && options.maxPinnedSessions > 0) {
          for (const s of slots) if (s.session === sessionKey) s.session = undefined
          const pinned = slots.filter((s) => s.session !== undefined)
          if (pinned.length >= options.maxPinnedSessions) leastRecent(pinned)!.session = undefined
          slot.session = sessionKey
        }
      }
      return slot
    }

    const release = (slot: SlotState<A>) =>
      Effect.suspend(() => {
        slot.busy = false
        slot.lastUsed = ++clock
        return permits.release
      })

    // Not Effect.scoped: a scope per call costs more than the bookkeeping itself. The slot is
    // picked in the step after the permit is taken (no step of its own).
    const withSlot = <B, E, R>(
      sessionKey: string | undefined,
      affinity: ((value: A) => number) | undefined,
      use: (slot: Slot<A>) => Effect.Effect<B, E, R>
    ): Effect.Effect<B, E, R> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(restore(permits.take), () => {
          const slot = pick(sessionKey, affinity)
          // `ensuring` in this uninterruptible region (Effect's would open one more): the slot goes back however `use` ends
          return Effect.matchCauseEffect(restore(use(slot)), {
            onFailure: (cause) => Effect.zipRight(release(slot), Effect.failCause(cause)),
            onSuccess: (b) => Effect.as(release(slot), b)
          })
        })
      )

    const snapshot = Effect.sync(() => ({
      busy: slots.filter((s) => s.busy).length,
      sessions: slots.map((s) => s.session)
    }))

    return { withSlot, snapshot }
  })
