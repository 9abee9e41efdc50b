/**
 * Renders the training set through the real PaganticChatWrapper and writes the
 * held-out evaluation sets.
 *
 *   npx tsx training/generate.ts [--train N] [--seed S]
 *
 * Outputs:
 *   training/out/train.jsonl      one {kind, text} per line, text = LlamaText JSON of the
 *                                  exact context the engine renders, plus the closing <|end|>
 *   training/out/corpus.jsonl     the plain-text pieces (for the tokenizer trainer)
 *   training/eval/sentiment.jsonl held-out reviews {review, label} (the older templates)
 *   training/eval/sentiment-unseen.jsonl reviews made only of words of the lexicon's
 *                                  held-out split (lexicon.ts), which training never contains
 *   training/eval/calculator.jsonl held-out questions {question, expression, result, answer}
 *
 * Checked here, on the rendered training text: no word of the held-out split of the
 * lexicon occurs in it, and no hand-written review (eval/sentiment-handwritten*.jsonl,
 * written by people, not by this generator) is among the training reviews.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { LlamaText, SpecialTokensText } from "node-llama-cpp"
import { PaganticChatWrapper, PaganticSpecialTokens } from "../src/layers/llama/PaganticChatWrapper.js"
import type { Example } from "./tasks.js"
import { finalAnswer, makeAgentExample, makeQuestion, makeReview, makeSentimentExample, Rng } from "./tasks.js"
import { makeRichReview, makeUnseenReview } from "./reviews.js"
import { heldOutWordsIn } from "./lexicon.js"
import { analyzerPrompt, makeDecomposition, PROCESSOR_ORDERS, PROVISIONAL_SYSTEM_PROMPTS, renderTaskList } from "./decomposition.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}

const nTrain = arg("train", 150000)
// --analyzer: decomposition requests go through the orchestrator's analyzer prompt
// (and make 12% of the examples) instead of the provisional prompts
const analyzer = process.argv.includes("--analyzer")
// --decomposition-share X: the share of decomposition examples (default 0.08, 0.12 with --analyzer)
const decompositionShare = arg("decomposition-share", analyzer ? 0.12 : 0.08)
// --copy X: in decomposition examples, the share of made-up reviews to copy (and as many everyday ones)
const copyShare = arg("copy", 0)
const seed = arg("seed", 1)
// the held-out sets do not move with --seed: they are made from their own seeds
const evalSeed = 1
const wrapper = new PaganticChatWrapper()

export const renderExample = (ex: Example): LlamaText => {
  const { contextText } = wrapper.generateContextState({
    chatHistory: ex.history,
    ...(ex.functions === undefined ? {} : { availableFunctions: ex.functions })
  })
  return LlamaText([contextText, new SpecialTokensText(PaganticSpecialTokens.end)])
}

const outDir = path.join(here, "out")
const evalDir = path.join(here, "eval")
fs.mkdirSync(outDir, { recursive: true })
fs.mkdirSync(evalDir, { recursive: true })

const normalize = (s: string): string => s.toLowerCase().replace(/[^a-z0-9]+/g, " ").trim()
const handwritten = new Set(
  ["sentiment-handwritten.jsonl", "sentiment-handwritten-lexicon.jsonl"].flatMap((file) =>
    fs
      .readFileSync(path.join(evalDir, file), "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => normalize((JSON.parse(l) as { review: string }).review))
  )
)

const decompositionExample = (rng: Rng, split: "train" | "eval"): Example & { readonly answer: string; readonly request: string } => {
  const d = makeDecomposition(rng, split, { copy: split === "train" ? copyShare : 0 })
  const answer = renderTaskList(d.list)
  const prompt = analyzer
    ? analyzerPrompt(d.request, rng.pick(PROCESSOR_ORDERS))
    : { system: rng.pick(PROVISIONAL_SYSTEM_PROMPTS), user: d.request }
  return {
    kind: "decomposition",
    history: [
      { type: "system", text: LlamaText(prompt.system).toJSON() },
      { type: "user", text: prompt.user },
      { type: "model", response: [answer] }
    ],
    functions: undefined,
    answer,
    request: d.request
  }
}

// 46% sentiment (40% of it the older templates, 60% everyday reviews in real
// vocabulary), 46% calculator and chat, 8% task decomposition (with --analyzer:
// 44%, 44%, 12%; --decomposition-share sets the last and splits the rest evenly).
const rng = new Rng(seed)
const train = fs.createWriteStream(path.join(outDir, "train.jsonl"))
const corpus = fs.createWriteStream(path.join(outDir, "corpus.jsonl"))
let rejected = 0
const trainingReview = () => {
  for (;;) {
    const r = rng.chance(0.4) ? makeReview(rng, "train") : makeRichReview(rng)
    if (!handwritten.has(normalize(r.review))) return r
    rejected++
  }
}
for (let i = 0; i < nTrain; i++) {
  const r = rng.next()
  const rest = (1 - decompositionShare) / 2
  const ex =
    r < rest
      ? makeSentimentExample(rng, "train", trainingReview())
      : r < 2 * rest
      ? makeAgentExample(rng, "train")
      : decompositionExample(rng, "train")
  const text = renderExample(ex)
  const plain = text.values.filter((v): v is string => typeof v === "string").join(" ")
  const leaked = heldOutWordsIn(plain)
  if (leaked.length > 0) throw new Error(`held-out lexicon words in a training example: ${leaked.join(", ")}\n${plain}`)
  for (const item of ex.history) {
    if (item.type === "user" && handwritten.has(normalize(item.text))) throw new Error(`a hand-written review in training: ${item.text}`)
  }
  train.write(JSON.stringify({ kind: ex.kind, text: text.toJSON() }) + "\n")
  for (const v of text.values) if (typeof v === "string") corpus.write(JSON.stringify(v) + "\n")
}
train.end()
corpus.end()

// Held-out sets: another seed and the eval split (disjoint subjects, fillers and operand pairs).
const evalRng = new Rng(evalSeed + 1000)
const sentiment: Array<string> = []
for (let i = 0; i < 300; i++) sentiment.push(JSON.stringify(makeReview(evalRng, "eval")))
fs.writeFileSync(path.join(evalDir, "sentiment.jsonl"), sentiment.join("\n") + "\n")
const unseenRng = new Rng(evalSeed + 2000)
const unseen: Array<string> = []
const unseenSeen = new Set<string>()
while (unseen.length < 300) {
  const r = makeUnseenReview(unseenRng)
  if (unseenSeen.has(r.review)) continue
  unseenSeen.add(r.review)
  unseen.push(JSON.stringify(r))
}
fs.writeFileSync(path.join(evalDir, "sentiment-unseen.jsonl"), unseen.join("\n") + "\n")
const decompositionRng = new Rng(evalSeed + 3000)
const decomposition: Array<string> = []
for (let i = 0; i < 100; i++) {
  const d = makeDecomposition(decompositionRng, "eval")
  decomposition.push(JSON.stringify(d))
}
fs.writeFileSync(path.join(evalDir, "decomposition.jsonl"), decomposition.join("\n") + "\n")
const calculator: Array<string> = []
for (let i = 0; i < 200; i++) {
  const q = makeQuestion(evalRng, "eval")
  calculator.push(JSON.stringify({ ...q, answer: finalAnswer(q.result) }))
}
fs.writeFileSync(path.join(evalDir, "calculator.jsonl"), calculator.join("\n") + "\n")

// Show one example of each kind.
const show = new Rng(7)
for (const ex of [makeSentimentExample(show, "train"), makeAgentExample(show, "train"), makeAgentExample(show, "train")]) {
  console.log(JSON.stringify(renderExample(ex).toJSON()))
}
console.log(
  `wrote ${nTrain} training examples (${rejected} reviews equal to a hand-written one dropped), ` +
    `${sentiment.length} + ${unseen.length} + ${calculator.length} + ${decomposition.length} eval items`
)
