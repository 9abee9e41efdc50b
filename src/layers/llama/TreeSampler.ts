/**
 * Prefix-tree sampling: N independent samples of one request on llama.cpp,
 * decoding what they share once.
 *
 * The samples start as one group on one sequence, which evaluates the prompt
 * once. At each step every live group evaluates its pending tokens and reads the
 * next-token distribution once; each sample of the group then draws its own
 * token from it with its own random stream (seeded `seed + index`). Samples
 * that drew the same token stay together; the largest group continues on the
 * sequence, and each other group forks onto a free sequence by copying the KV
 * cells (llama.cpp `llama_memory_seq_cp`), so no token is decoded twice for
 * samples that agree on it. Groups end on an end-of-generation token or at
 * `maxTokens`, and their sequences go back for later forks.
 *
 * The distribution is exactly `infer`'s: the same native sampler chain
 * (repeat penalty over the answer's last 64 tokens, as LlamaChat applies it,
 * then the grammar, then top-k, top-p, min-p and temperature), read as
 * probabilities. The grammar is applied before the rest of the chain, which is
 * the exact constrained distribution (the chain renormalized over the tokens the
 * grammar allows); each group keeps its own grammar state, cloned on a fork. At
 * temperature 0 every sample takes the chain's greedy choice.
 */
import * as Effect from "effect/Effect"
import { LlamaGrammarEvaluationState } from "node-llama-cpp"
import type { LlamaContextSequence, LlamaGrammar, LlamaModel, Token } from "node-llama-cpp"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as Response from "./Response.js"

/** What to sample: the prompt, the chain's settings, one seed per sample. */
export interface Settings {
  readonly prompt: ReadonlyArray<Token>
  readonly maxTokens: number
  readonly temperature: number
  readonly topK?: number | undefined
  readonly topP?: number | undefined
  readonly minP?: number | undefined
  readonly presencePenalty?: number | undefined
  readonly frequencyPenalty?: number | undefined
  readonly grammar?: LlamaGrammar | undefined
  /** Texts that end a sample when its text holds one (left out of the text), as the grammar's stop triggers. */
  readonly stopTexts?: ReadonlyArray<string> | undefined
  /** One 32-bit seed per sample. */
  readonly seeds: ReadonlyArray<number>
  /** Each sample's uniform stream from its seed (default `uniform`). */
  readonly random?: ((seed: number) => () => number) | undefined
}

/** One finished sample. */
export interface Sample {
  readonly tokens: ReadonlyArray<Token>
  /** The tokens' text, cut before a stop text. */
  readonly text: string
  /** Tokens sampled for it: its tokens, and the end-of-generation token that ended it (as `infer` counts). */
  readonly sampled: number
  readonly finish: "stop" | "length"
}

/** What a run did: the samples, and the work it shared. */
export interface Outcome {
  readonly samples: ReadonlyArray<Sample>
  /** Prompt tokens evaluated (the rest was already held or copied). */
  readonly promptEvaluated: number
  /** Tokens decoded for all samples together (at most the sum of their lengths). */
  readonly decoded: number
  /** Forks made by KV copy. */
  readonly forks: number
}

// ---------------------------------------------------------------------------
// Random streams and drawing
// ---------------------------------------------------------------------------

/** A uniform [0, 1) stream from a 32-bit seed (mulberry32): a sample's own random source. */
export const uniform = (seed: number): (() => number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** The token at `u` of the cumulative distribution (the last one with mass if rounding leaves a gap). */
export const draw = (probabilities: ReadonlyMap<Token, number>, u: number): Token | undefined => {
  let total = 0
  for (const p of probabilities.values()) total += p
  let target = u * total
  let last: Token | undefined
  for (const [token, p] of probabilities) {
    if (!(p > 0)) continue
    last = token
    target -= p
    if (target < 0) return token
  }
  return last
}

// ---------------------------------------------------------------------------
// Grammar state
// ---------------------------------------------------------------------------

/** node-llama-cpp's grammar-state internals this module needs (present in 3.x). */
interface GrammarInternals {
  readonly _state: unknown
  readonly _llama: { readonly _bindings: { readonly AddonSampler: { readonly acceptGrammarEvaluationStateToken?: unknown } } }
}

const acceptorOf = (state: LlamaGrammarEvaluationState) => {
  const internals = state as unknown as Partial<GrammarInternals>
  const accept = internals._llama?._bindings?.AddonSampler?.acceptGrammarEvaluationStateToken
  return typeof accept === "function"
    ? (token: Token) => (accept as (s: unknown, t: Token) => void)(internals._state, token)
    : undefined
}

/** Whether this node-llama-cpp lets a grammar state advance by a chosen token. */
export const supportsGrammar = (model: LlamaModel, grammar: LlamaGrammar): boolean =>
  acceptorOf(new LlamaGrammarEvaluationState({ model, grammar })) !== undefined

// ---------------------------------------------------------------------------
// The tree
// ---------------------------------------------------------------------------

interface Group {
  sequence: LlamaContextSequence
  members: ReadonlyArray<number>
  pending: Array<Token>
  generated: Array<Token>
  grammar: LlamaGrammarEvaluationState | undefined
  /** The group's evaluation on its sequence, kept from step to step (one native sampler). */
  evaluation: Evaluation | undefined
}

type Evaluation = ReturnType<LlamaContextSequence["evaluateWithMetadata"]>

const REPEAT_PENALTY_TOKENS = 64

/**
 * Runs the tree on `sequences` (held by the caller; the first gets the prompt).
 * `aborted` is polled between steps: a step in flight always completes, so no
 * sequence is returned while llama.cpp writes into it.
 */
export const run = async (
  model: LlamaModel,
  sequences: ReadonlyArray<LlamaContextSequence>,
  settings: Settings,
  aborted: () => boolean
): Promise<Outcome> => {
  const n = settings.seeds.length
  const streams = settings.seeds.map(settings.random ?? uniform)
  const samples: Array<Sample | undefined> = Array.from({ length: n }, () => undefined)
  const free = sequences.slice(1)
  const root = sequences[0]!
  const { prompt } = settings
  // keep what the sequence holds of the prompt, but evaluate at least its last token (for its distribution)
  let held = 0
  while (held < root.contextTokens.length && held < prompt.length - 1 && root.contextTokens[held] === prompt[held]) held++
  if (root.nextTokenIndex > held) await root.eraseContextTokenRanges([{ start: held, end: root.nextTokenIndex }])
  const nl = model.tokens.nl
  const stopTexts = (settings.stopTexts ?? []).filter((text) => text !== "")
  const textOf = (tokens: ReadonlyArray<Token>) => model.detokenize([...tokens], false)
  /** The text cut before the first stop text, when it holds one. */
  const stoppedAt = (text: string): string | undefined => {
    let cut: number | undefined
    for (const stop of stopTexts) {
      const at = text.indexOf(stop)
      if (at >= 0 && (cut === undefined || at < cut)) cut = at
    }
    return cut === undefined ? undefined : text.slice(0, cut)
  }
  const finish = (
    members: ReadonlyArray<number>,
    tokens: ReadonlyArray<Token>,
    reason: Sample["finish"],
    text?: string,
    endToken = false
  ) => {
    const sample: Sample = { tokens, text: text ?? textOf(tokens), finish: reason, sampled: tokens.length + (endToken ? 1 : 0) }
    for (const i of members) samples[i] = sample
  }
  let decoded = 0
  let forks = 0

  let live: Array<Group> = [{
    sequence: root,
    members: Array.from({ length: n }, (_, i) => i),
    pending: prompt.slice(held),
    generated: [],
    grammar: settings.grammar === undefined ? undefined : new LlamaGrammarEvaluationState({ model, grammar: settings.grammar }),
    evaluation: undefined
  }]

  const evaluationOf = (group: Group): Evaluation =>
    group.sequence.evaluateWithMetadata(group.pending, { probabilities: true }, {
      temperature: settings.temperature,
      ...(settings.topK === undefined ? {} : { topK: settings.topK }),
      ...(settings.topP === undefined ? {} : { topP: settings.topP }),
      ...(settings.minP === undefined ? {} : { minP: settings.minP }),
      seed: 0,
      // read at every token; the native sampler advances the state by its own pick: give it a copy
      grammarEvaluationState: () => group.grammar?.clone(),
      repeatPenalty: {
        punishTokens: () => group.generated.slice(-REPEAT_PENALTY_TOKENS).filter((token) => token !== nl),
        maxPunishTokens: REPEAT_PENALTY_TOKENS,
        ...(settings.presencePenalty === undefined ? {} : { presencePenalty: settings.presencePenalty }),
        ...(settings.frequencyPenalty === undefined ? {} : { frequencyPenalty: settings.frequencyPenalty })
      },
      yieldEogToken: true,
      contextShift: Response.contextShift
    })

  /** Evaluates the group's pending tokens and reads the next-token distribution. */
  const distribution = async (group: Group) => {
    let step: IteratorResult<unknown, unknown>
    if (group.evaluation === undefined) {
      group.evaluation = evaluationOf(group)
      step = await group.evaluation.next()
    } else {
      // the evaluation goes on with the tokens this group chose instead of the native pick
      step = await group.evaluation.next(group.pending)
    }
    return step.done === true ? undefined : (step.value as { readonly token: Token; readonly probabilities: Map<Token, number> })
  }

  /** The group is done with its sequence: stop its evaluation and free the sequence for forks. */
  const release = async (group: Group) => {
    await group.evaluation?.return()
    group.evaluation = undefined
    free.push(group.sequence)
  }

  /** One step of one group: the groups that continue after it. */
  const step = async (group: Group): Promise<Array<Group>> => {
    const next = await distribution(group)
    decoded += 1
    if (next === undefined) {
      finish(group.members, group.generated, "stop")
      await release(group)
      return []
    }
    const byToken = new Map<Token, Array<number>>()
    for (const i of group.members) {
      const token = settings.temperature <= 0 ? next.token : draw(next.probabilities, streams[i]!()) ?? next.token
      const members = byToken.get(token)
      if (members === undefined) byToken.set(token, [i])
      else members.push(i)
    }
    const continuing: Array<{ token: Token; members: Array<number>; generated: Array<Token> }> = []
    for (const [token, members] of byToken) {
      if (model.isEogToken(token)) {
        finish(members, group.generated, "stop", undefined, true)
        continue
      }
      const generated = [...group.generated, token]
      const stopped = stopTexts.length === 0 ? undefined : stoppedAt(textOf(generated))
      if (stopped !== undefined) {
        finish(members, generated, "stop", stopped)
        continue
      }
      if (generated.length >= settings.maxTokens) {
        finish(members, generated, "length")
        continue
      }
      continuing.push({ token, members, generated })
    }
    if (continuing.length === 0) {
      await release(group)
      return []
    }
    // the largest group stays on the sequence; ties go to the group of the lowest sample
    continuing.sort((a, b) => b.members.length - a.members.length || a.members[0]! - b.members[0]!)
    const groups: Array<Group> = []
    for (const [k, branch] of continuing.entries()) {
      const grammar = group.grammar === undefined ? undefined : k === continuing.length - 1 ? group.grammar : group.grammar.clone()
      if (grammar !== undefined) acceptorOf(grammar)?.(branch.token)
      groups.push({
        sequence: group.sequence,
        members: branch.members,
        pending: [branch.token],
        generated: branch.generated,
        grammar,
        evaluation: undefined
      })
    }
    // the largest branch goes on as this group, with its evaluation
    const [stays] = groups
    group.members = stays!.members
    group.pending = stays!.pending
    group.generated = stays!.generated
    group.grammar = stays!.grammar
    groups[0] = group
    // forks copy the sequence before its own group moves on
    for (const fork of groups.slice(1)) {
      const target = free.pop()
      if (target === undefined) throw new Error(`no free sequence for a fork (${sequences.length} held)`)
      const copied = await (target as unknown as CopyingSequence)._copyStateFromOtherSequence(group.sequence, group.sequence.nextTokenIndex)
      if (!copied) {
        // a refused copy leaves the target to evaluate the whole history itself
        await target.clearHistory()
        fork.pending = [...prompt, ...fork.generated]
      }
      fork.sequence = target
      forks += 1
    }
    return groups
  }

  const promptEvaluated = live[0]!.pending.length
  try {
    while (live.length > 0 && !aborted()) {
      const nextLive = await Promise.all(live.map(step))
      live = nextLive.flat()
    }
  } finally {
    await Promise.all(live.map((group) => group.evaluation?.return()))
  }
  return {
    samples: samples.map((sample) => sample ?? { tokens: [], text: "", finish: "stop", sampled: 0 }),
    promptEvaluated,
    decoded,
    forks
  }
}

/** node-llama-cpp's own sequence copy (see PromptSharing). */
interface CopyingSequence {
  readonly _copyStateFromOtherSequence: (other: LlamaContextSequence, upToTokenIndex: number) => Promise<boolean>
}

/** Whether sequences of this node-llama-cpp can be copied. */
export const canFork = (sequence: LlamaContextSequence): boolean =>
  typeof (sequence as unknown as Partial<CopyingSequence>)._copyStateFromOtherSequence === "function"

/** `run` as an Effect: interruption stops after the step in flight and waits for it. */
export const sample = (
  model: LlamaModel,
  sequences: ReadonlyArray<LlamaContextSequence>,
  settings: Settings
): Effect.Effect<Outcome, InferenceFailure> =>
  Effect.async<Outcome, InferenceFailure>((resume) => {
    let stop = false
    const done = run(model, sequences, settings, () => stop)
    done.then(
      (outcome) => resume(Effect.succeed(outcome)),
      (error) =>
        resume(Effect.fail(Response.fromGenerationError(error, {
          phase: "sampleMany",
          samples: settings.seeds.length,
          promptTokens: settings.prompt.length
        })))
    )
    return Effect.promise(() => {
      stop = true
      return done.then(() => undefined, () => undefined)
    })
  })
