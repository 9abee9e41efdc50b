/**
 * ContextBuilder: a ContextProvider on top of a Retriever.
 *
 * For a query it retrieves at most `maxChunks` chunks and formats them, with
 * their sources, into one system message:
 * "Relevant context:\n\n[1] (source): content\n[2] (source): content". No chunks
 * means no message. The loops inject it ephemerally; they never store it.
 * `buildScored` also gives the chunks' scores (a chat reports the best as its
 * retrieval confidence when it is on [0, 1]).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Message from "../domain/Message.js"
import { ContextProvider } from "../services/ContextProvider.js"
import { Retriever } from "../services/Retriever.js"
import type { Service as ContextProviderService } from "../services/ContextProvider.js"
import { renderContext } from "../services/PromptProvider.js"

export interface Options {
  /** How many chunks at most go into the context. Default 5. */
  readonly maxChunks?: number
}

export const make = (options: Options = {}): Effect.Effect<ContextProviderService, never, Retriever> =>
  Effect.gen(function* () {
    const retriever = yield* Retriever
    const maxChunks = options.maxChunks ?? 5
    const buildScored = Effect.fn("ContextBuilder.build")(function* (query: string) {
      const chunks = yield* retriever.retrieve(query, maxChunks)
      if (chunks.length === 0) return { messages: [], scores: [] }
      return { messages: [Message.system(renderContext(chunks))], scores: chunks.map((c) => c.score) }
    })
    return ContextProvider.of({ build: (query) => Effect.map(buildScored(query), (r) => r.messages), buildScored })
  })

/** A ContextProvider built from the Retriever in context. */
export const layer = (options: Options = {}): Layer.Layer<ContextProvider, never, Retriever> =>
  Layer.effect(ContextProvider, make(options))
