/**
 * The crash cases' queries and responders (shared by the crash child and the
 * uncrashed reference run): system responders answering fixed classifications,
 * each reporting its start through a hook (where the child counts and pauses).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as InMemoryResponders from "../../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../../src/layers/LexicalReranker.js"
import * as Orchestration from "../../src/programs/Orchestration.js"
import type { Responder } from "../../src/services/ResponderRegistry.js"

export const answers: Readonly<Record<string, { readonly category: string; readonly _confidence: number }>> = {
  primary: { category: "research", _confidence: 0.9 },
  verifier: { category: "news", _confidence: 0.7 },
  tiebreaker: { category: "news", _confidence: 0.8 },
  s0: { category: "news", _confidence: 0.3 },
  s1: { category: "research", _confidence: 0.5 },
  s2: { category: "research", _confidence: 0.9 }
}

const system = (name: string) => ({ kind: "system", name })

export const queries = {
  verify: {
    kind: "infer.query.v1",
    input: { inline: "a grant proposal on protein folding" },
    answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
    orchestration: { pattern: "verify", primary: [system("primary")], verifier: system("verifier"), tiebreaker: system("tiebreaker") }
  },
  waterfall: {
    kind: "infer.query.v1",
    input: { inline: "a grant proposal on protein folding" },
    answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] },
    fold: { function: "best_of" },
    orchestration: {
      pattern: "waterfall",
      stages: ["s0", "s1", "s2"].map((s) => ({ responders: [system(s)] })),
      accept_expression: "fold.answer.confidence >= 0.85"
    }
  }
} as const

export type CrashPattern = keyof typeof queries

/** Every CALL, DO and LEARN boundary of each case, and mid-call: what the first process is killed at. */
export const boundaries: Readonly<Record<CrashPattern, ReadonlyArray<string>>> = {
  // mid:X kills inside X's call, after its CALL was journaled; record:K right after the step K was journaled
  verify: ["mid:primary", "record:primary/do/0", "mid:verifier", "record:verify/learn", "mid:tiebreaker", "record:tiebreaker/do/0"],
  waterfall: ["mid:s0", "record:stage-0/do/0", "record:stage-0/learn", "mid:s1", "record:stage-1/learn", "mid:s2"]
}

export const Queries = Orchestration.definition({ name: "query" })

/** The registry and reranker, with `hook` run at the start of every responder call. */
export const layer = (hook: (responder: string) => Effect.Effect<void>) => {
  const responders: ReadonlyArray<Responder> = Object.entries(answers).map(([name, answer]) => ({
    id: name,
    kind: "system",
    name,
    handle: () => Effect.as(hook(name), answer)
  }))
  return Layer.mergeAll(InMemoryResponders.layer({ responders }), LexicalReranker.layer())
}
