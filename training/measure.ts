/**
 * Measures the bundled model through node-llama-cpp exactly as the engine uses it:
 * LlamaChat + PaganticChatWrapper, one thread, greedy decoding.
 *
 *   npx tsx training/measure.ts [model.gguf] [--limit N]
 *
 * - sentiment: held-out reviews (training/eval/sentiment.jsonl), JSON-schema grammar
 * - calculator: held-out questions (training/eval/calculator.jsonl); a call is right
 *   when it calls `calculator` with the expected expression (whitespace-insensitive);
 *   the final answer is right when, after the tool result, the reply contains the result
 * - chat: greetings with the tool available must not call it
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaChat, LlamaText } from "node-llama-cpp"
import type { ChatHistoryItem, ChatModelResponse } from "node-llama-cpp"
import {
  BUNDLED_SENTIMENT_SCHEMA,
  PaganticChatWrapper
} from "../src/layers/llama/PaganticChatWrapper.js"
import { calculatorFunctions, evaluateExpression, SENTIMENT_SYSTEM_PROMPTS } from "./tasks.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const positional = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && !(all[i - 1] ?? "").startsWith("--"))
const modelPath = positional[0] ?? path.join(here, "..", "models", "pagantic-tiny.gguf")
const limitIdx = process.argv.indexOf("--limit")
const limit = limitIdx >= 0 ? Number(process.argv[limitIdx + 1]) : Infinity
const verbose = process.argv.includes("--verbose")

const readJsonl = <T>(file: string): Array<T> =>
  fs.readFileSync(path.join(here, "eval", file), "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as T).slice(0, limit)

const llama = await getLlama({ gpu: false, build: "never", maxThreads: 1 })
const model = await llama.loadModel({ modelPath })
const context = await model.createContext({ contextSize: 1024, threads: 1 })
const wrapper = new PaganticChatWrapper()
const chat = new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: wrapper })
const grammar = await llama.createGrammarForJsonSchema(BUNDLED_SENTIMENT_SCHEMA)
const sys = (text: string): ChatHistoryItem => ({ type: "system", text: LlamaText(text).toJSON() })
const promptTokens = (history: ReadonlyArray<ChatHistoryItem>, withTools: boolean): number =>
  wrapper
    .generateContextState({ chatHistory: history, ...(withTools ? { availableFunctions: calculatorFunctions } : {}) })
    .contextText.tokenize(model.tokenizer).length

// --- sentiment ---------------------------------------------------------------
const classify = async (review: string, system: string): Promise<string> => {
  const history: Array<ChatHistoryItem> = [sys(system), { type: "user", text: review }, { type: "model", response: [] }]
  const res = await chat.generateResponse(history, { grammar, maxTokens: 24, temperature: 0 })
  try {
    return grammar.parse(res.response).sentiment
  } catch {
    return `invalid: ${res.response}`
  }
}
const reviews = readJsonl<{ review: string; label: string }>("sentiment.jsonl")
let sentimentOk = 0
let sentimentTokens = 0
const t0 = performance.now()
for (const [i, r] of reviews.entries()) {
  // the canonical prompt, plus a few of the other trained phrasings
  const system = i % 5 === 4 ? SENTIMENT_SYSTEM_PROMPTS[i % SENTIMENT_SYSTEM_PROMPTS.length]! : SENTIMENT_SYSTEM_PROMPTS[0]!
  sentimentTokens += promptTokens([sys(system), { type: "user", text: r.review }], false)
  const label = await classify(r.review, system)
  if (label === r.label) sentimentOk++
  else if (verbose) console.log(`  sentiment miss: ${r.review} -> ${label} (want ${r.label})`)
}
const sentimentMs = performance.now() - t0
// the unseen-word set and the hand-written ones (none of them produced for training)
const scoreSet = async (file: string): Promise<readonly [number, number]> => {
  const items = readJsonl<{ review: string; label: string }>(file)
  let ok = 0
  for (const r of items) {
    const label = await classify(r.review, SENTIMENT_SYSTEM_PROMPTS[0]!)
    if (label === r.label) ok++
    else if (verbose) console.log(`  ${file} miss: ${r.review} -> ${label} (want ${r.label})`)
  }
  return [ok, items.length]
}
const [unseenOk, unseenN] = await scoreSet("sentiment-unseen.jsonl")
const [handwrittenOk, handwrittenN] = await scoreSet("sentiment-handwritten.jsonl")
const [olderOk, olderN] = await scoreSet("sentiment-handwritten-lexicon.jsonl")

// --- calculator ----------------------------------------------------------------
const questions = readJsonl<{ question: string; expression: string; result: string; answer: string }>("calculator.jsonl")
const norm = (s: string): string => s.replace(/\s+/g, "")
let callOk = 0
let finalOk = 0
let bothOk = 0
let calcTokens = 0
const t1 = performance.now()
for (const [i, q] of questions.entries()) {
  const history: Array<ChatHistoryItem> = []
  if (i % 2 === 1) history.push(sys("You are a helpful assistant."))
  history.push({ type: "user", text: q.question }, { type: "model", response: [] })
  calcTokens += promptTokens(history, true)
  const first = await chat.generateResponse(history, { functions: calculatorFunctions, maxTokens: 64, temperature: 0 })
  const call = first.functionCalls?.[0]
  const expression = (call?.params as { expression?: string } | undefined)?.expression
  const rightCall = call?.functionName === "calculator" && expression !== undefined && norm(expression) === norm(q.expression)
  if (rightCall) callOk++
  else if (verbose) console.log(`  call miss: ${q.question} -> ${JSON.stringify(call ?? first.response)}`)
  if (call === undefined || expression === undefined) continue
  let result: string
  try {
    result = evaluateExpression(expression)
  } catch {
    result = "error"
  }
  const next = first.lastEvaluation.cleanHistory.slice()
  const last = next.at(-1)
  const response: ChatModelResponse["response"] = last?.type === "model" ? [...last.response] : []
  response.push({
    type: "functionCall",
    name: call.functionName,
    description: "Evaluate an arithmetic expression",
    params: call.params,
    result,
    rawCall: call.raw
  })
  if (last?.type === "model") next[next.length - 1] = { type: "model", response }
  else next.push({ type: "model", response })
  const second = await chat.generateResponse(next, { functions: calculatorFunctions, maxTokens: 32, temperature: 0 })
  const rightFinal = second.response.includes(result) && (second.functionCalls?.length ?? 0) === 0
  if (rightFinal) finalOk++
  if (rightCall && rightFinal && result === q.result) bothOk++
  else if (verbose && rightCall) console.log(`  final miss: ${q.question} -> ${second.response}`)
}
const calcMs = performance.now() - t1

// --- chat ----------------------------------------------------------------------
const greetings = ["Hello!", "Hi there", "Thanks!", "Who are you?", "Good morning", "What can you do?", "Bye!", "How are you?"]
let chatOk = 0
for (const g of greetings) {
  const res = await chat.generateResponse([{ type: "user", text: g }, { type: "model", response: [] }], {
    functions: calculatorFunctions,
    maxTokens: 32,
    temperature: 0
  })
  const ok = (res.functionCalls?.length ?? 0) === 0 && res.response.trim() !== ""
  if (ok) chatOk++
  if (verbose || !ok) console.log(`  chat: ${g} -> ${JSON.stringify(res.response)} ${res.functionCalls?.length ? "(called a tool)" : ""}`)
}

// --- the CLI demo's prompts (src/adapters/Cli.ts) -------------------------------
const demo: ReadonlyArray<readonly [string, string]> = [
  ["The staff was friendly and the room was spotless. Five stars.", "positive"],
  ["The pasta was absolutely delicious and the waiter was lovely.", "positive"],
  ["The hotel was fine. Nothing special.", "neutral"]
]
for (const [review, want] of demo) {
  const got = await classify(review, SENTIMENT_SYSTEM_PROMPTS[0]!)
  const votes: Array<string> = []
  for (let seed = 1; seed <= 5; seed++) {
    const res = await chat.generateResponse(
      [sys(SENTIMENT_SYSTEM_PROMPTS[0]!), { type: "user", text: review }, { type: "model", response: [] }],
      { grammar, maxTokens: 24, temperature: 0.8, seed }
    )
    votes.push(grammar.parse(res.response).sentiment)
  }
  console.log(`  demo: ${review} -> ${got} (want ${want}); at temperature 0.8: ${votes.join(", ")}`)
}

const pct = (a: number, b: number) => `${a}/${b} (${((100 * a) / Math.max(1, b)).toFixed(1)}%)`
console.log(`model: ${modelPath} (${fs.statSync(modelPath).size} bytes)`)
console.log(`sentiment accuracy (JSON-schema grammar, greedy): ${pct(sentimentOk, reviews.length)}, ` +
  `${(sentimentMs / reviews.length).toFixed(1)} ms/prompt, ${(sentimentTokens / reviews.length).toFixed(1)} prompt tokens`)
console.log(`sentiment on the unseen-word set: ${pct(unseenOk, unseenN)}`)
console.log(`sentiment on hand-written everyday reviews: ${pct(handwrittenOk, handwrittenN)}; older hand-written: ${pct(olderOk, olderN)}`)
console.log(`calculator right call: ${pct(callOk, questions.length)}; right final answer after the tool result: ${pct(finalOk, questions.length)}; ` +
  `both right: ${pct(bothOk, questions.length)}; ${(calcMs / questions.length).toFixed(1)} ms/question, ${(calcTokens / questions.length).toFixed(1)} prompt tokens`)
console.log(`chat turns without a tool call: ${pct(chatOk, greetings.length)}`)
await context.dispose()
await model.dispose()
