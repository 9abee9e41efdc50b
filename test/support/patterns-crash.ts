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

export const answers: Readonly<Record<string, Readonly<Record<string, unknown>>>> = {
  primary: { category: "research", _confidence: 0.9 },
  verifier: { category: "news", _confidence: 0.7 },
  tiebreaker: { category: "news", _confidence: 0.8 },
  s0: { category: "news", _confidence: 0.3 },
  s1: { category: "research", _confidence: 0.5 },
  s2: { category: "research", _confidence: 0.9 },
  // single_shot: three at once, folded by consensus
  a0: { category: "research", _confidence: 0.9 },
  a1: { category: "research", _confidence: 0.6 },
  a2: { category: "news", _confidence: 0.5 },
  // retry_on_low_confidence: asked at every attempt, never confident enough
  r0: { category: "research", _confidence: 0.5 },
  // escalate: three tiers, the last one confident
  e0: { category: "news", _confidence: 0.5 },
  e1: { category: "research", _confidence: 0.6 },
  e2: { category: "research", _confidence: 0.9 },
  // ensemble_with_audit: two primaries and the auditor's verdict
  p0: { category: "research", _confidence: 0.9 },
  p1: { category: "research", _confidence: 0.7 },
  auditor: { approved: true, rationale: "the sources check out" }
}

const system = (name: string) => ({ kind: "system", name })

const classification = {
  kind: "infer.query.v1",
  input: { inline: "a grant proposal on protein folding" },
  answer_shape: { kind: "core.classification.v1", labels: ["research", "news"] }
} as const

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
  },
  single_shot: { ...classification, responders: ["a0", "a1", "a2"].map(system) },
  retry_on_low_confidence: {
    ...classification,
    responders: [system("r0")],
    fold: { function: "best_of" },
    orchestration: { pattern: "retry_on_low_confidence", threshold_expression: "fold.answer.confidence < 0.7", max_attempts: 3, retry_dial: 0.6 }
  },
  escalate: {
    ...classification,
    fold: { function: "best_of" },
    orchestration: {
      pattern: "escalate",
      tiers: ["e0", "e1", "e2"].map((s) => ({ responders: [system(s)] })),
      escalation_expression: "fold.answer.confidence < 0.7"
    }
  },
  ensemble_with_audit: {
    ...classification,
    orchestration: {
      pattern: "ensemble_with_audit",
      primary_responders: [system("p0"), system("p1")],
      auditor: system("auditor"),
      audit_expression: "audit.approved == true"
    }
  }
} as const

export type CrashPattern = keyof typeof queries

/** Every CALL, DO and LEARN boundary of each case, and mid-call: what the first process is killed at. */
export const boundaries: Readonly<Record<CrashPattern, ReadonlyArray<string>>> = {
  // mid:X kills inside X's call, after its CALL was journaled; record:K right after the step K was journaled
  verify: ["mid:primary", "record:primary/do/0", "mid:verifier", "record:verify/learn", "mid:tiebreaker", "record:tiebreaker/do/0"],
  waterfall: ["mid:s0", "record:stage-0/do/0", "record:stage-0/learn", "mid:s1", "record:stage-1/learn", "mid:s2"],
  // record:K/call/N: right after a CALL was journaled, before it is dispatched
  single_shot: ["record:single_shot/call/2", "mid:a1", "record:single_shot/do/0", "record:single_shot/do/2"],
  retry_on_low_confidence: ["mid:r0", "record:attempt-1/do/0", "record:attempt-1/learn", "record:attempt-2/call/0", "record:attempt-2/learn", "record:attempt-3/do/0"],
  escalate: ["mid:e0", "record:tier-0/learn", "record:tier-1/call/0", "mid:e1", "record:tier-1/do/0", "record:tier-2/do/0"],
  ensemble_with_audit: ["mid:p0", "record:ensemble/do/1", "record:auditor/call/0", "mid:auditor", "record:auditor/do/0", "record:audit/learn"]
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
