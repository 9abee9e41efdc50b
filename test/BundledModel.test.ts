import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { getLlama, LlamaChat, LlamaText, readGgufFileInfo } from "node-llama-cpp"
import {
  BUNDLED_MODEL_NAME,
  BUNDLED_SENTIMENT_SCHEMA,
  PaganticChatWrapper
} from "../src/layers/llama/PaganticChatWrapper.js"

const modelPath = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "models", "pagantic-tiny.gguf")

describe("bundled model", () => {
  it("is a small llama GGUF named after BUNDLED_MODEL_NAME", async () => {
    expect(fs.statSync(modelPath).size).toBeLessThanOrEqual(10 * 1024 * 1024)
    const info = await readGgufFileInfo(modelPath, { readTensorInfo: false })
    expect(info.metadata.general.architecture).toBe("llama")
    expect(info.metadata.general.name).toBe(BUNDLED_MODEL_NAME)
  })

  it("loads on one thread and answers a sentiment prompt with grammar-valid JSON", async () => {
    const llama = await getLlama({ gpu: false, build: "never", maxThreads: 1 })
    const model = await llama.loadModel({ modelPath })
    const context = await model.createContext({ contextSize: 256, threads: 1 })
    try {
      const chat = new LlamaChat({ contextSequence: context.getSequence(), chatWrapper: new PaganticChatWrapper() })
      const grammar = await llama.createGrammarForJsonSchema(BUNDLED_SENTIMENT_SCHEMA)
      const answer = async (review: string) => {
        const res = await chat.generateResponse(
          [
            { type: "system", text: LlamaText("Classify the sentiment of the review.").toJSON() },
            { type: "user", text: review },
            { type: "model", response: [] }
          ],
          { grammar, maxTokens: 24, temperature: 0 }
        )
        expect(res.response).toMatch(/^\{"sentiment": "(positive|negative|neutral)"\}$/)
        return grammar.parse(res.response).sentiment
      }
      expect(await answer("The movie was absolutely wonderful.")).toBe("positive")
      expect(await answer("The pizza was really awful.")).toBe("negative")
    } finally {
      await context.dispose()
      await model.dispose()
    }
  })
})
