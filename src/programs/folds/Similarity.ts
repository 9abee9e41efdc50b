/**
 * When two answers count as the same: structural (canonical JSON), text
 * (token-set Jaccard at a threshold) or semantic (the application's), and the
 * greedy grouping in canonical order that consensus and ensemble_weighted use.
 */
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import type { OrchestrationFailure } from "../../domain/Failure.js"
import { canonicalJson } from "../../domain/Json.js"
import type { Valid } from "./Canonical.js"
import { noSemantic } from "./Canonical.js"
import type { Options, Response } from "./Response.js"
import { defaultSimilarityThreshold } from "./Response.js"

/** Lowercased letter/digit runs, as a set. */
export const tokenSet = (text: string): ReadonlySet<string> => new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])

/** Token-set Jaccard similarity: |A ∩ B| / |A ∪ B| (1 for two empty texts). */
export const jaccard = (a: ReadonlySet<string>, b: ReadonlySet<string>): number => {
  if (a.size === 0 && b.size === 0) return 1
  let shared = 0
  for (const token of a) if (b.has(token)) shared += 1
  return shared / (a.size + b.size - shared)
}

export interface Group {
  readonly members: Array<Valid>
  weight: number
}

export const groupBy = (valid: ReadonlyArray<Valid>, options: Options): ReadonlyArray<Group> => {
  const similarity = options.similarity ?? "structural"
  if (similarity === "structural") {
    const groups = new Map<string, Group>()
    for (const v of valid) {
      const group = groups.get(v.key)
      if (group === undefined) groups.set(v.key, { members: [v], weight: 0 })
      else group.members.push(v)
    }
    return Array.from(groups.values())
  }
  const threshold = options.threshold ?? defaultSimilarityThreshold
  const shape = options.shape ?? AnswerShape.anyAnswer
  const groups: Array<Group & { readonly representative: unknown }> = []
  if (similarity === "text") {
    const tokens = valid.map((v) => tokenSet(shape.text(v.answer)))
    const reps: Array<ReadonlySet<string>> = []
    valid.forEach((v, i) => {
      const at = reps.findIndex((rep) => jaccard(rep, tokens[i]!) >= threshold)
      if (at === -1) {
        reps.push(tokens[i]!)
        groups.push({ members: [v], weight: 0, representative: v.answer })
      } else groups[at]!.members.push(v)
    })
    return groups
  }
  const semantic = options.semantic
  for (const v of valid) {
    const group = groups.find((g) => semantic !== undefined && semantic(g.representative, v.answer) >= threshold)
    if (group === undefined) groups.push({ members: [v], weight: 0, representative: v.answer })
    else group.members.push(v)
  }
  return groups
}

export const members = (g: Group): ReadonlyArray<Response> => g.members.map((m) => m.response)

/**
 * How alike two answers are, in [0, 1], by the options' similarity: structural
 * is 1 for equal canonical JSON and 0 otherwise; text is token-set Jaccard of the
 * answers' text; semantic is the application's. What verify's agreement is.
 */
export const similarity = (a: unknown, b: unknown, options: Options = {}): Either.Either<number, OrchestrationFailure> => {
  switch (options.similarity ?? "structural") {
    case "structural":
      return Either.right(canonicalJson(a) === canonicalJson(b) ? 1 : 0)
    case "text": {
      const shape = options.shape ?? AnswerShape.anyAnswer
      return Either.right(jaccard(tokenSet(shape.text(a)), tokenSet(shape.text(b))))
    }
    case "semantic":
      return options.semantic === undefined ? Either.left(noSemantic("consensus")) : Either.right(options.semantic(a, b))
  }
}
