/**
 * Tokenizes the rendered training set with node-llama-cpp itself (the model's own
 * llama.cpp tokenizer, loaded vocab-only), so training sees exactly the tokens the
 * engine will evaluate. Computes the loss mask: the assistant's tokens (after
 * <|assistant|> up to and including <|end|>), except tool results
 * (<tool_result> ... </tool_result>), which the engine inserts.
 *
 *   npx tsx training/tokenize.ts [path/to/vocab-or-model.gguf]
 *
 * Writes training/out/tokens.u16, mask.u8, lengths.u32, kinds.json.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaText } from "node-llama-cpp"
import type { LlamaTextJSON, Token } from "node-llama-cpp"

const here = path.dirname(fileURLToPath(import.meta.url))
const modelPath = process.argv[2] ?? path.join(here, "out", "init.gguf")

const llama = await getLlama({ gpu: false, build: "never", maxThreads: 1 })
const model = await llama.loadModel({ modelPath, vocabOnly: true })
const tok = model.tokenizer
const id = (s: string): Token => {
  const t = model.tokenize(s, true)
  if (t.length !== 1) throw new Error(`${s} is not a single token: ${t.join(",")}`)
  return t[0]!
}
const ASSISTANT = id("<|assistant|>")
const END = id("<|end|>")
const RESULT_START = id("<tool_result>")
const RESULT_END = id("</tool_result>")
for (const s of ["<tool_call>", "</tool_call>", "<tool_result>", "</tool_result>"]) {
  const plain = model.tokenize(s, false)
  if (plain.length !== 1) throw new Error(`${s} must be one token without special parsing`)
}

const tokensOut: Array<Token> = []
const maskOut: Array<number> = []
const lengths: Array<number> = []
const kinds: Array<string> = []
let checked = 0
const rl = readline.createInterface({ input: fs.createReadStream(path.join(here, "out", "train.jsonl")) })
for await (const line of rl) {
  const { kind, text } = JSON.parse(line) as { kind: string; text: LlamaTextJSON }
  const lt = LlamaText.fromJSON(text)
  const tokens = lt.tokenize(tok)
  if (checked < 200) {
    // the detokenized text must be the rendered text
    const back = model.detokenize(tokens, true)
    const expected = lt.toString().replace("BOS", "")
    if (back.replace("<s>", "") !== expected) throw new Error(`round trip mismatch:\n${back}\n${expected}`)
    checked++
  }
  let inAssistant = false
  let inResult = false
  for (const t of tokens) {
    let m = 0
    if (inAssistant) {
      if (t === RESULT_START) inResult = true
      m = inResult ? 0 : 1
      if (t === RESULT_END) inResult = false
      if (t === END) inAssistant = false
    }
    if (t === ASSISTANT) inAssistant = true
    tokensOut.push(t)
    maskOut.push(m)
  }
  lengths.push(tokens.length)
  kinds.push(kind)
}

const out = path.join(here, "out")
fs.writeFileSync(path.join(out, "tokens.u16"), Buffer.from(new Uint16Array(tokensOut as Array<number>).buffer))
fs.writeFileSync(path.join(out, "mask.u8"), Buffer.from(new Uint8Array(maskOut).buffer))
fs.writeFileSync(path.join(out, "lengths.u32"), Buffer.from(new Uint32Array(lengths).buffer))
fs.writeFileSync(path.join(out, "kinds.json"), JSON.stringify(kinds))
const sorted = [...lengths].sort((a, b) => a - b)
console.log(
  `examples ${lengths.length}, tokens ${tokensOut.length}, trained ${maskOut.reduce((a, b) => a + b, 0)}, ` +
    `length median ${sorted[sorted.length >> 1]}, p95 ${sorted[Math.floor(sorted.length * 0.95)]}, max ${sorted.at(-1)}`
)
const sample = tokensOut.slice(0, lengths[0])
console.log(sample.map((t, i) => `${JSON.stringify(model.detokenize([t], true))}${maskOut[i] ? "*" : ""}`).join(" "))
await model.dispose()
