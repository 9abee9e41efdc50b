/**
 * Prompt sharing between the sequences of one llama.cpp context.
 *
 * Sequences keep what they last evaluated, but a request that lands on a sequence
 * holding another conversation would evaluate its whole prompt again, although
 * another sequence may already hold most of it: the same system prompt and tool
 * definitions, or, for RedundantLoop replicas, the very same prompt. Before a
 * generation, `prepare` brings the borrowed sequence up to the longest prefix of
 * the prompt that any sequence holds, by copying that sequence's KV cells
 * (llama.cpp `llama_memory_seq_cp`) instead of evaluating the tokens again.
 *
 * Requests that arrive together with the same prompt (replicas started at once)
 * find no sequence holding it yet: the first becomes the leader and evaluates the
 * prompt; the others wait for it and copy. A copy from a sequence at rest costs a
 * memory copy of its cache, which is why such copies are made only for prefixes of
 * at least `minTokens` more tokens than the sequence already holds.
 *
 * Identical prompts that arrive together are shared whatever the length of what
 * they miss: each of them would otherwise evaluate the same tokens at the same
 * time, N times the work in one batch. A request missing fewer than `minTokens`
 * tokens yields once (so that replicas forked in the same tick reach this point)
 * and looks for others with its very prompt; only when one came does it lead, so a
 * request alone evaluates its prompt in one decode, as without sharing.
 *
 * Everything here is an optimization: when a copy is refused (the donor changed
 * meanwhile), the sequence is left as llama.cpp needs it and the generation
 * evaluates what is missing, exactly as without sharing.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type { LlamaContextSequence, Token } from "node-llama-cpp"

/** What `prepare` did for one request. */
export type Outcome =
  | { readonly _tag: "Held"; readonly tokens: number }
  | { readonly _tag: "Copied"; readonly tokens: number; readonly waited: boolean }
  | { readonly _tag: "Led"; readonly tokens: number }

export interface Options {
  /** The fewest tokens a copy must save (default 32); 0 disables sharing. */
  readonly minTokens: number
  /**
   * Whether a sequence is generating right now. Such a sequence is no donor: its
   * tokens run ahead of its cells mid-decode, llama.cpp would refuse the copy, and
   * the refusal costs the borrower its own prefix.
   */
  readonly isGenerating?: (sequence: LlamaContextSequence) => boolean
}

export interface PromptSharing {
  /** Fills `sequence` with as much of `prompt` as another sequence holds or is about to hold. */
  readonly prepare: (sequence: LlamaContextSequence, prompt: ReadonlyArray<Token>) => Effect.Effect<Outcome>
}

export const DEFAULT_MIN_TOKENS = 32

export const commonPrefixLength = (a: ReadonlyArray<Token>, b: ReadonlyArray<Token>): number => {
  const n = Math.min(a.length, b.length)
  let i = 0
  while (i < n && a[i] === b[i]) i++
  return i
}

/**
 * How much of `tokens` `sequence` holds: `commonPrefixLength(sequence.contextTokens, tokens)`
 * without copying the sequence's tokens (its `contextTokens` is a copy, made for every
 * sequence of the pool on every request).
 */
export const heldPrefix = (sequence: LlamaContextSequence, tokens: ReadonlyArray<Token>): number =>
  // it only reads them
  Math.min(sequence.compareContextTokens(tokens as Array<Token>).firstDifferentIndex, tokens.length)

/** node-llama-cpp's own prefix copy (used by its LlamaDecisionContext); absent in other versions. */
interface CopyingSequence {
  readonly _copyStateFromOtherSequence: (other: LlamaContextSequence, upToTokenIndex: number) => Promise<boolean>
}
const canCopy = (sequence: LlamaContextSequence): sequence is LlamaContextSequence & CopyingSequence =>
  typeof (sequence as Partial<CopyingSequence>)._copyStateFromOtherSequence === "function"

interface Leader {
  readonly sequence: LlamaContextSequence
  readonly tokens: ReadonlyArray<Token>
  /** Completed when the prompt is evaluated (or the leader gave up). */
  readonly done: Deferred.Deferred<void>
  /** One per follower, completed when it has copied: the leader generates only after. */
  readonly copied: Array<Deferred.Deferred<void>>
}

/** Requests with one short-missing prompt arriving in the same tick, before one of them leads. */
interface Gathering {
  readonly tokens: ReadonlyArray<Token>
  /** Each arrival's: told the leader, or undefined when none leads. */
  readonly joined: Array<{ readonly led: Deferred.Deferred<Leader | undefined>; readonly copied: Deferred.Deferred<void> }>
}

export const make = (
  sequences: ReadonlyArray<LlamaContextSequence>,
  options: Options
): PromptSharing => {
  const leaders = new Set<Leader>()
  const gatherings = new Set<Gathering>()

  /** The other sequence holding the longest prefix of `prompt`, if longer than `atLeast`. */
  const donorFor = (sequence: LlamaContextSequence, prompt: ReadonlyArray<Token>, atLeast: number) => {
    let donor: LlamaContextSequence | undefined
    let length = atLeast
    for (const other of sequences) {
      // A leader's sequence is being written: wait for its leader instead.
      if (other === sequence || [...leaders].some((leader) => leader.sequence === other)) continue
      if (options.isGenerating?.(other) === true) continue
      const n = heldPrefix(other, prompt)
      if (n > length) {
        donor = other
        length = n
      }
    }
    return donor === undefined ? undefined : { donor, length }
  }

  const leaderFor = (prompt: ReadonlyArray<Token>, atLeast: number) => {
    let found: Leader | undefined
    let length = atLeast
    for (const leader of leaders) {
      const n = commonPrefixLength(leader.tokens, prompt)
      if (n > length) {
        found = leader
        length = n
      }
    }
    return found === undefined ? undefined : { leader: found, length }
  }

  /**
   * Copies the first `prefix.length` tokens of `donor` into `sequence`. When the copy
   * is refused (the donor's cells and tokens disagree, e.g. mid-decode) the
   * sequence is cleared, so that the generation evaluates everything: never a
   * state whose tokens and cells disagree. Uninterruptible: it is short, and the
   * sequence must not go back to the pool while llama.cpp still writes into it.
   */
  const copy = (
    sequence: LlamaContextSequence & CopyingSequence,
    donor: LlamaContextSequence,
    prefix: ReadonlyArray<Token>,
    waited: boolean
  ): Effect.Effect<Outcome> =>
    Effect.promise(async (): Promise<Outcome> => {
      const before = heldPrefix(sequence, prefix)
      const copied = await sequence._copyStateFromOtherSequence(donor, prefix.length).catch(() => false)
      if (copied && heldPrefix(sequence, prefix) === prefix.length) {
        return { _tag: "Copied", tokens: prefix.length - before, waited }
      }
      await sequence.clearHistory().catch(() => undefined)
      return { _tag: "Held", tokens: 0 }
    }).pipe(Effect.uninterruptible)

  /** Follows `leader`: waits for its evaluation, copies, and tells it so (also when interrupted). */
  const follow = (
    sequence: LlamaContextSequence & CopyingSequence,
    leader: Leader,
    prefix: ReadonlyArray<Token>,
    copied: Deferred.Deferred<void>
  ): Effect.Effect<Outcome> =>
    Deferred.await(leader.done).pipe(
      Effect.zipRight(Effect.suspend(() => copy(sequence, leader.sequence, prefix, true))),
      Effect.ensuring(Deferred.succeed(copied, undefined))
    )

  /** Joins `leader` as one more follower, copying `prefix` once it is evaluated. */
  const join = (sequence: LlamaContextSequence & CopyingSequence, leader: Leader, prefix: ReadonlyArray<Token>) =>
    Effect.flatMap(Deferred.make<void>(), (copied) => {
      leader.copied.push(copied)
      return follow(sequence, leader, prefix, copied)
    })

  /** Evaluates the first `wanted` tokens of `prompt` here, and lets those who come meanwhile copy them. */
  const lead = (
    sequence: LlamaContextSequence,
    prompt: ReadonlyArray<Token>,
    held: number,
    wanted: number,
    leader: Leader
  ): Effect.Effect<Outcome> =>
    Effect.gen(function*() {
      // Uninterruptible for the same reason as a copy. A failure here (which the
      // generation would meet again and report) only means nothing is shared.
      const evaluate = Effect.tryPromise(async () => {
        await sequence.adaptStateToTokens([...leader.tokens], false)
        await sequence.evaluateWithoutGeneratingNewTokens([...leader.tokens.slice(sequence.nextTokenIndex)])
      }).pipe(Effect.uninterruptible)
      const release = Effect.sync(() => leaders.delete(leader)).pipe(Effect.zipRight(Deferred.succeed(leader.done, undefined)))
      leaders.add(leader)
      const exit = yield* Effect.exit(Effect.ensuring(evaluate, release))
      // Let the followers copy before this sequence moves on to generating.
      yield* Effect.forEach(leader.copied, Deferred.await, { discard: true })
      return exit._tag === "Success"
        ? { _tag: "Led", tokens: wanted - held } satisfies Outcome
        : { _tag: "Held", tokens: heldPrefix(sequence, prompt) } satisfies Outcome
    })

  /**
   * A request missing fewer than `minTokens` tokens: it joins a leader or a
   * gathering with its very prompt, or yields once for others to join it, and
   * leads only if one did.
   */
  const gather = (
    sequence: LlamaContextSequence & CopyingSequence,
    prompt: ReadonlyArray<Token>,
    held: number,
    wanted: number
  ): Effect.Effect<Outcome> => {
    const prefix = prompt.slice(0, wanted)
    const following = leaderFor(prompt, wanted - 1)
    if (following !== undefined) return join(sequence, following.leader, prefix)
    for (const gathering of gatherings) {
      if (gathering.tokens.length === wanted && commonPrefixLength(gathering.tokens, prompt) === wanted) {
        return Effect.gen(function*() {
          const led = yield* Deferred.make<Leader | undefined>()
          const copied = yield* Deferred.make<void>()
          gathering.joined.push({ led, copied })
          // However this ends, a leader it was promised to never waits for it in vain.
          return yield* Effect.ensuring(
            Effect.flatMap(Deferred.await(led), (leader): Effect.Effect<Outcome> =>
              leader === undefined
                ? Effect.succeed({ _tag: "Held", tokens: held })
                : follow(sequence, leader, prefix, copied)),
            Deferred.succeed(copied, undefined)
          )
        })
      }
    }
    const gathering: Gathering = { tokens: prefix, joined: [] }
    gatherings.add(gathering)
    // Uninterruptible (a tick, then as a leader): those who joined are always told.
    return Effect.yieldNow().pipe(
      Effect.zipRight(Effect.suspend((): Effect.Effect<Outcome> => {
        gatherings.delete(gathering)
        if (gathering.joined.length === 0) return Effect.succeed({ _tag: "Held", tokens: held })
        return Effect.gen(function*() {
          const done = yield* Deferred.make<void>()
          const leader: Leader = { sequence, tokens: prefix, done, copied: gathering.joined.map(({ copied }) => copied) }
          yield* Effect.forEach(gathering.joined, ({ led }) => Deferred.succeed(led, leader), { discard: true })
          return yield* lead(sequence, prompt, held, wanted, leader)
        })
      })),
      Effect.uninterruptible
    )
  }

  const prepare = (sequence: LlamaContextSequence, prompt: ReadonlyArray<Token>): Effect.Effect<Outcome> =>
    Effect.suspend(() => {
      const held = heldPrefix(sequence, prompt)
      // The generation evaluates the last prompt token itself, for its logits.
      const wanted = prompt.length - 1
      if (options.minTokens <= 0 || !canCopy(sequence) || wanted <= held) {
        return Effect.succeed<Outcome>({ _tag: "Held", tokens: held })
      }
      if (wanted - held < options.minTokens) return gather(sequence, prompt, held, wanted)
      const atLeast = held + options.minTokens - 1
      const found = donorFor(sequence, prompt, atLeast)
      const following = leaderFor(prompt, found?.length ?? atLeast)
      if (found !== undefined && following === undefined) {
        return copy(sequence, found.donor, prompt.slice(0, Math.min(found.length, wanted)), false)
      }
      if (following !== undefined) {
        return join(sequence, following.leader, prompt.slice(0, Math.min(following.length, wanted)))
      }
      // Nobody holds it: evaluate it here, and let those who come meanwhile copy it.
      return Effect.flatMap(
        Deferred.make<void>(),
        (done) => lead(sequence, prompt, held, wanted, { sequence, tokens: prompt.slice(0, wanted), done, copied: [] })
      )
    })

  return { prepare }
}
