/**
 * Self-checks of the training generator (the word lists live in training/ only,
 * so these run here, not in the library's test suite):
 *
 *   npx tsx training/check.ts
 *
 * Prints one line per check and "N passed, M failed"; exits 1 on a failure.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { makeDecomposition } from "./decomposition.js"
import { heldOutWordsIn, lexicon, polarityOf } from "./lexicon.js"
import { makeRichReview } from "./reviews.js"
import type { Review } from "./tasks.js"
import { evaluateExpression, makeReview, Rng } from "./tasks.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const readJsonl = <A>(file: string): ReadonlyArray<A> =>
  fs
    .readFileSync(path.join(here, "eval", file), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as A)

let passed = 0
let failed = 0
const check = (name: string, problems: ReadonlyArray<string>): void => {
  if (problems.length === 0) {
    passed++
    console.log(`ok   ${name}`)
  } else {
    failed++
    console.log(`FAIL ${name}\n     ${problems.slice(0, 5).join("\n     ")}${problems.length > 5 ? `\n     (${problems.length} in all)` : ""}`)
  }
}

const unseen = readJsonl<Review>("sentiment-unseen.jsonl")
check(
  "every unseen-word review holds a word of the held-out split",
  unseen.filter((r) => heldOutWordsIn(r.review).length === 0).map((r) => r.review)
)

check(
  "every polar unseen-word review's label is the lexicon's rating of its word, or its opposite after a negation",
  unseen.flatMap((r) => {
    if (r.label === "neutral") return []
    const negated = /\b(not|never|n't|nothing|cannot|can't|wouldn't|didn't)\b|n't\b/i.test(r.review)
    const ratings = heldOutWordsIn(r.review).map(polarityOf).filter((p) => p !== undefined)
    const want = negated ? (r.label === "positive" ? "negative" : "positive") : r.label
    return ratings.length > 0 && ratings.every((p) => p === want) ? [] : [`${r.review} -> ${r.label} (${ratings.join(",")})`]
  })
)

const rng = new Rng(11)
const training: Array<Review> = []
for (let i = 0; i < 20000; i++) training.push(rng.chance(0.4) ? makeReview(rng, "train") : makeRichReview(rng))
check(
  "20,000 training reviews hold no word of the held-out split",
  training.flatMap((r) => {
    const w = heldOutWordsIn(r.review)
    return w.length === 0 ? [] : [`${w.join(",")}: ${r.review}`]
  })
)

const labels = new Map<string, number>()
for (const r of training) labels.set(r.label, (labels.get(r.label) ?? 0) + 1)
check(
  "training labels are balanced within 20%-45% each",
  ["positive", "negative", "neutral"].flatMap((l) => {
    const share = (labels.get(l) ?? 0) / training.length
    return share >= 0.2 && share <= 0.45 ? [] : [`${l}: ${(100 * share).toFixed(1)}%`]
  })
)

const lex = lexicon()
check(
  "the held-out split is about 1 word family in 8 and shares no word with the training split",
  [
    ...(lex.adjectives.eval.length < 60 ? [`only ${lex.adjectives.eval.length} held-out adjectives`] : []),
    ...lex.adjectives.eval.filter((a) => lex.adjectives.train.some((b) => b.word === a.word)).map((a) => a.word)
  ]
)

const normalize = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]+/g, " ").trim()
const handwritten = readJsonl<Review>("sentiment-handwritten.jsonl")
check(
  "the hand-written set has at least 60 reviews, every label at least 15 times, no duplicates",
  [
    ...(handwritten.length < 60 ? [`${handwritten.length} reviews`] : []),
    ...["positive", "negative", "neutral"].filter((l) => handwritten.filter((r) => r.label === l).length < 15),
    ...(new Set(handwritten.map((r) => normalize(r.review))).size !== handwritten.length ? ["duplicates"] : [])
  ]
)

const decompositions = Array.from({ length: 2000 }, (_, i) => makeDecomposition(new Rng(100 + i), i % 2 === 0 ? "train" : "eval"))
check(
  "every decomposition is a DAG over its own ids, priority = depth from 1, dependencies only after 'then'",
  decompositions.flatMap((d) => {
    const problems: Array<string> = []
    const depth = new Map<string, number>()
    for (const t of d.list.tasks) {
      for (const dep of t.dependencies) if (!depth.has(dep)) problems.push(`${t.id} depends on ${dep}, not an earlier task`)
      const want = t.dependencies.length === 0 ? 1 : Math.max(...t.dependencies.map((x) => depth.get(x) ?? 0)) + 1
      if (t.priority !== want) problems.push(`${t.id} priority ${t.priority}, depth ${want}`)
      depth.set(t.id, t.priority)
    }
    const thens = (d.request.match(/\bthen\b|after that|once that is done/gi) ?? []).length
    const maxDepth = Math.max(...d.list.tasks.map((t) => t.priority))
    if (maxDepth !== thens + 1) problems.push(`${thens} 'then' but depth ${maxDepth}`)
    return problems.map((p) => `${p}: ${d.request}`)
  })
)

check(
  "every decomposition's calculator expression is in the request and evaluates; every review is quoted in it",
  decompositions.flatMap((d) =>
    d.list.tasks.flatMap((t) => {
      if (t.processor === "sentiment") return d.request.includes(`"${t.description}"`) ? [] : [`review not quoted: ${t.description}`]
      const expression = t.metadata.expression ?? ""
      const numbers = expression.split(/ [-+*/] /)
      const ok = numbers.every((n) => d.request.includes(n)) && evaluateExpression(expression) !== "undefined"
      return ok ? [] : [`${expression}: ${d.request}`]
    })
  )
)

console.log(`${passed} passed, ${failed} failed`)
process.exit(failed === 0 ? 0 : 1)
