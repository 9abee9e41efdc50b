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
 *   training/eval/sentiment.jsonl held-out reviews {review, label}
 *   training/eval/calculator.jsonl held-out questions {question, expression, result, answer}
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { LlamaText, SpecialTokensText } from "node-llama-cpp"
import { PaganticChatWrapper, PaganticSpecialTokens } from "../src/layers/llama/PaganticChatWrapper.js"
import type { Example } from "./tasks.js"
import { finalAnswer, makeAgentExample, makeQuestion, makeReview, makeSentimentExample, Rng } from "./tasks.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}

const nTrain = arg("train", 150000)
const seed = arg("seed", 1)
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

const rng = new Rng(seed)
const train = fs.createWriteStream(path.join(outDir, "train.jsonl"))
const corpus = fs.createWriteStream(path.join(outDir, "corpus.jsonl"))
for (let i = 0; i < nTrain; i++) {
  const ex = rng.chance(0.5) ? makeSentimentExample(rng, "train") : makeAgentExample(rng, "train")
  const text = renderExample(ex)
  train.write(JSON.stringify({ kind: ex.kind, text: text.toJSON() }) + "\n")
  for (const v of text.values) if (typeof v === "string") corpus.write(JSON.stringify(v) + "\n")
}
train.end()
corpus.end()

// Held-out sets: another seed and the eval split (disjoint subjects, fillers and operand pairs).
const evalRng = new Rng(seed + 1000)
const sentiment: Array<string> = []
for (let i = 0; i < 300; i++) sentiment.push(JSON.stringify(makeReview(evalRng, "eval")))
fs.writeFileSync(path.join(evalDir, "sentiment.jsonl"), sentiment.join("\n") + "\n")
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
console.log(`wrote ${nTrain} training examples, ${sentiment.length} + ${calculator.length} eval items`)
