/**
 * Task decomposition for the bundled model: one narrow family of requests,
 * "classify these reviews and add up these numbers", broken into a TaskList
 * (src/domain/Task.ts) of `sentiment` and `calculator` tasks.
 *
 * The rules the model learns are the request's own words:
 * - each quoted review is one `sentiment` task (processor `sentiment`), its
 *   description the review itself;
 * - each group of numbers to add (or multiply, subtract, divide) is one
 *   `calculator` task, its description the instruction, `metadata.expression`
 *   the arithmetic;
 * - "then", "after that", "once that is done" make the parts after the word
 *   depend on the tasks of the parts just before it (back to the previous
 *   "then"); "and", "also" join parts that do not wait on each other;
 * - priority is the task's depth in the dependency graph, from 1.
 *
 * Held-out requests (split "eval") use the held-out reviews and operand pairs of
 * tasks.ts, so no eval request's content was trained on.
 */
import { BUNDLED_ANALYZER } from "../src/layers/llama/PaganticChatWrapper.js"
import type { AnalyzerConfig } from "../src/programs/orchestrator/Analyzer.js"
import { renderInstruction, renderRequest } from "../src/programs/orchestrator/Analyzer.js"
import { json as jsonTaskParser } from "../src/programs/orchestrator/TaskParser.js"
import type { Split, Rng } from "./tasks.js"
import { heldOutWordsIn } from "./lexicon.js"
import { makeRichReview } from "./reviews.js"
import { makeQuestion, makeReview } from "./tasks.js"

export interface DraftTask {
  readonly id: string
  readonly type: string
  readonly processor: "sentiment" | "calculator"
  readonly priority: number
  readonly dependencies: ReadonlyArray<string>
  readonly description: string
  readonly metadata: Readonly<Record<string, string>>
}

export interface DraftTaskList {
  readonly analysis: string
  readonly tasks: ReadonlyArray<DraftTask>
}

export interface Decomposition {
  readonly request: string
  readonly list: DraftTaskList
}

type Part =
  | { readonly kind: "reviews"; readonly reviews: ReadonlyArray<string> }
  | { readonly kind: "numbers"; readonly numbers: ReadonlyArray<number>; readonly op: "+" | "*" | "-" }

const NUMBER_WORDS: Record<"+" | "*" | "-", ReadonlyArray<(ns: string) => string>> = {
  "+": [(ns) => `add up ${ns}`, (ns) => `add ${ns}`, (ns) => `sum ${ns}`, (ns) => `compute the sum of ${ns}`, (ns) => `total ${ns}`],
  "*": [(ns) => `multiply ${ns}`, (ns) => `compute the product of ${ns}`],
  "-": [(ns) => `subtract ${ns}`]
}
const REVIEW_WORDS = [
  (n: number) => (n === 1 ? "classify this review:" : "classify these reviews:"),
  (n: number) => (n === 1 ? "tell me the sentiment of this review:" : "tell me the sentiment of these reviews:"),
  (n: number) => (n === 1 ? "classify the sentiment of" : "classify the sentiment of"),
  (n: number) => (n === 1 ? "is this review positive or negative:" : "are these reviews positive or negative:")
]
const THEN = ["then", "then", "after that", "once that is done", "and then"]
const AND = ["and", "and", "also", "and also"]

const list = (xs: ReadonlyArray<string>): string =>
  xs.length === 1 ? xs[0]! : `${xs.slice(0, -1).join(", ")} and ${xs.at(-1)!}`

const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1)

const numbersFor = (rng: Rng, split: Split, count: number): ReadonlyArray<number> => {
  // the first two operands are a two-operand question's, so the calculator's held-out pairs stay held out
  for (;;) {
    const m = /^(\d+) [-+*/] (\d+)$/.exec(makeQuestion(rng, split).expression)
    if (m === null) continue
    const out = [Number(m[1]), Number(m[2])]
    while (out.length < count) out.push(rng.int(1, 99))
    return out
  }
}

const SYLLABLES = ["ka", "lo", "mi", "ter", "bu", "sna", "vo", "rin", "dex", "pal", "qu", "zor", "fen", "gli", "ost", "wem"]

/**
 * A "review" nobody could predict: three to eight made-up words and numbers in a
 * sentence. The model cannot guess it from what reviews look like, only copy it
 * from the request: it teaches copying, which the held-out reviews (words never
 * seen in training) need. Never a held-out word of the lexicon.
 */
const scrambledText = (rng: Rng): string => {
  for (;;) {
    const words = Array.from({ length: rng.int(3, 8) }, () =>
      rng.chance(0.15)
        ? String(rng.int(1, 999))
        : Array.from({ length: rng.int(1, 3) }, () => rng.pick(SYLLABLES)).join(""))
    const text = cap(words.join(" ")) + rng.pick([".", ".", "!", ""])
    if (heldOutWordsIn(text).length === 0) return text
  }
}

const reviewText = (rng: Rng, split: Split, copy: number): string => {
  for (;;) {
    // no draw at all without copying, so that the held-out sets stay what they were
    const roll = split === "train" && copy > 0 ? rng.next() : 1
    const r = roll < copy
      ? scrambledText(rng)
      : roll < 2 * copy
      ? makeRichReview(rng).review
      : makeReview(rng, split).review
    if (!r.includes('"') && r.length <= 90) return r
  }
}

export interface DecompositionOptions {
  /**
   * In training only: the share of quoted reviews that are made-up words (to be
   * copied), and the same share again everyday reviews in real vocabulary; the rest
   * are the older templates'. Default 0 (all the older templates').
   */
  readonly copy?: number | undefined
}

/** One request and the TaskList it decomposes into. */
export const makeDecomposition = (rng: Rng, split: Split, options: DecompositionOptions = {}): Decomposition => {
  const nParts = rng.pick([1, 2, 2, 2, 3])
  const parts: Array<Part> = []
  for (let i = 0; i < nParts; i++) {
    const reviewsAlready = parts.some((p) => p.kind === "reviews")
    if (!reviewsAlready && (i === 0 ? rng.chance(0.6) : rng.chance(0.6))) {
      const n = rng.pick([1, 2, 2, 3])
      parts.push({ kind: "reviews", reviews: Array.from({ length: n }, () => reviewText(rng, split, options.copy ?? 0)) })
    } else {
      const op = rng.pick<"+" | "*" | "-">(["+", "+", "+", "*", "-"])
      const count = op === "+" ? rng.pick([2, 2, 3, 4]) : 2
      parts.push({ kind: "numbers", numbers: numbersFor(rng, split, count), op })
    }
  }
  // how each part joins the previous one
  const joins = parts.map((_, i) => (i === 0 ? "none" : rng.chance(0.5) ? "then" : "and"))

  const tasks: Array<DraftTask> = []
  const sentences: Array<string> = []
  let current: Array<string> = []
  let depth = 1
  let deps: Array<string> = []
  for (const [i, part] of parts.entries()) {
    let lead = ""
    if (joins[i] === "then") {
      deps = current
      current = []
      depth += 1
      lead = rng.pick(THEN)
    } else if (joins[i] === "and") {
      lead = rng.pick(AND)
    }
    const ids: Array<string> = []
    let clause: string
    if (part.kind === "reviews") {
      const quoted = part.reviews.map((r) => `"${r}"`)
      clause = `${rng.pick(REVIEW_WORDS)(part.reviews.length)} ${list(quoted)}`
      for (const r of part.reviews) {
        const id = `t${tasks.length + 1}`
        ids.push(id)
        tasks.push({ id, type: "sentiment", processor: "sentiment", priority: depth, dependencies: deps, description: r, metadata: {} })
      }
    } else {
      const ns = part.numbers.map(String)
      const expression = part.numbers.join(` ${part.op} `)
      const said = part.op === "-" ? `${ns[1]} from ${ns[0]}` : part.op === "*" ? list(ns) : list(ns)
      const phrase = rng.pick(NUMBER_WORDS[part.op])(said)
      clause = phrase
      const id = `t${tasks.length + 1}`
      ids.push(id)
      tasks.push({
        id,
        type: "calculation",
        processor: "calculator",
        priority: depth,
        dependencies: deps,
        description: cap(phrase),
        metadata: { expression }
      })
    }
    current = [...current, ...ids]
    sentences.push(lead === "" ? clause : `${lead} ${clause}`)
  }
  const request = cap(sentences.join(rng.chance(0.5) ? ", " : " ")) + rng.pick([".", ".", ""])
  const nReviews = tasks.filter((t) => t.processor === "sentiment").length
  const nCalc = tasks.length - nReviews
  const phases = depth
  const analysis = [
    nReviews > 0 ? `${nReviews} review${nReviews === 1 ? "" : "s"} to classify` : undefined,
    nCalc > 0 ? `${nCalc} calculation${nCalc === 1 ? "" : "s"}` : undefined
  ]
    .filter((x) => x !== undefined)
    .join(", ") + (phases > 1 ? `, in ${phases} steps` : ", all independent")
  return { request, list: { analysis, tasks } }
}

/** The TaskList as the JSON-schema grammar lets the model write it (Python json.dumps spacing). */
export const renderTaskList = (l: DraftTaskList): string =>
  JSON.stringify(l, null, 1)
    .split("\n")
    .map((line) => {
      const t = line.trim()
      return t.endsWith(",") ? t + " " : t
    })
    .join("")

/**
 * The orchestrator's analyzer prompt for a request, exactly as Analyzer.analyze
 * sends it with `config` (default: the bundled model's BUNDLED_ANALYZER) and the
 * JSON parser: the system instruction (base instruction and format instructions)
 * and the user message (`task: ...` and the processors, in the order registered).
 */
export const analyzerPrompt = (
  request: string,
  processors: ReadonlyArray<string>,
  config: AnalyzerConfig = BUNDLED_ANALYZER
): { readonly system: string; readonly user: string } => ({
  system: renderInstruction(config, jsonTaskParser()),
  user: renderRequest(request, {}, processors)
})

/** The processors the bundled model knows, in both registration orders. */
export const PROCESSOR_ORDERS: ReadonlyArray<ReadonlyArray<string>> = [
  ["sentiment", "calculator"],
  ["calculator", "sentiment"]
]

/** System prompts of the first training stage, before the analyzer prompt existed. */
export const PROVISIONAL_SYSTEM_PROMPTS = [
  "Break the request into tasks. Answer with a JSON task list.",
  "Break the request into tasks.",
  "Analyze the request and list the tasks as JSON."
]
