import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Message from "../src/domain/Message.js"
import * as ContextBuilder from "../src/layers/RetrieverContextProvider.js"
import * as Retriever from "../src/layers/MiniSearchRetriever.js"
import { ContextProvider } from "../src/services/ContextProvider.js"
import { Retriever as RetrieverTag } from "../src/services/Retriever.js"

const documents = [
  { id: "go-1", source: "go-spec", content: "Interfaces in Go are satisfied implicitly.", metadata: { lang: "go" } },
  { id: "cook-1", source: "cookbook", content: "Boil the pasta in salted water." },
  { id: "go-2", source: "effective-go", content: "Go interfaces, interfaces everywhere: small interfaces compose." },
  { id: "rust-1", source: "rust-book", content: "Traits in Rust are implemented explicitly." }
]

describe("Retriever (BM25)", () => {
  it.effect("ranks by BM25: more occurrences of rarer terms rank higher; unrelated documents are absent", () =>
    Effect.gen(function* () {
      const retriever = yield* RetrieverTag
      const chunks = yield* retriever.retrieve("go interfaces", 10)
      expect(chunks.map((c) => c.source)).toEqual(["effective-go", "go-spec"])
      expect(chunks[0]!.score).toBeGreaterThan(chunks[1]!.score)
      expect(chunks[1]!.metadata).toMatchObject({ lang: "go", id: "go-1" })
    }).pipe(Effect.provide(Retriever.layer(documents))))

  it.effect("respects the limit, and an empty query or a zero limit retrieves nothing", () =>
    Effect.gen(function* () {
      const retriever = yield* RetrieverTag
      expect(yield* retriever.retrieve("go interfaces", 1)).toHaveLength(1)
      expect(yield* retriever.retrieve("   ", 5)).toEqual([])
      expect(yield* retriever.retrieve("go", 0)).toEqual([])
      expect(yield* retriever.retrieve("quantum", 5)).toEqual([])
    }).pipe(Effect.provide(Retriever.layer(documents))))

  it.effect("prefix matching is opt-in", () =>
    Effect.gen(function* () {
      const exact = yield* Effect.flatMap(Retriever.make(documents), (r) => r.retrieve("trai", 5))
      const prefixed = yield* Effect.flatMap(Retriever.make(documents, { prefix: true }), (r) => r.retrieve("trai", 5))
      expect(exact).toEqual([])
      expect(prefixed.map((c) => c.source)).toEqual(["rust-book"])
    }))

  it.effect("equal scores keep the collection's order (deterministic)", () =>
    Effect.gen(function* () {
      const twins = [
        { id: "b", source: "second", content: "alpha beta" },
        { id: "a", source: "first", content: "alpha beta" }
      ]
      const chunks = yield* Effect.flatMap(Retriever.make(twins), (r) => r.retrieve("alpha", 5))
      expect(chunks.map((c) => c.source)).toEqual(["second", "first"])
    }))
})

describe("ContextBuilder", () => {
  const layer = ContextBuilder.layer({ maxChunks: 2 }).pipe(Layer.provide(Retriever.layer(documents)))

  it.effect("formats at most maxChunks chunks with their sources into one system message", () =>
    Effect.gen(function* () {
      const provider = yield* ContextProvider
      const messages = yield* provider.build("go interfaces explicitly")
      expect(messages).toHaveLength(1)
      expect(Message.isSystem(messages[0]!)).toBe(true)
      expect(messages[0]!.content).toBe(
        "Relevant context:\n\n" +
          "[1] (effective-go): Go interfaces, interfaces everywhere: small interfaces compose.\n" +
          "[2] (go-spec): Interfaces in Go are satisfied implicitly."
      )
    }).pipe(Effect.provide(layer)))

  it.effect("no chunks means no context message", () =>
    Effect.gen(function* () {
      const provider = yield* ContextProvider
      expect(yield* provider.build("quantum chromodynamics")).toEqual([])
    }).pipe(Effect.provide(layer)))
})
