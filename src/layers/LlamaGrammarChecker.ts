/**
 * The GBNF checker on llama.cpp's own grammar engine: the grammar is parsed by
 * llama.cpp exactly as for constrained decoding, and the text is fed to it code
 * point by code point; the text matches when the grammar accepts all of it and
 * is complete at the end. A grammar passes domain/Gbnf's pre-check before
 * llama.cpp sees it; parsed grammars are kept per text (a small LRU cache).
 *
 * It loads the llama.cpp binding (no model), so it works beside any engine,
 * including remote ones that may not enforce a grammar at all.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { getLlama, LlamaLogLevel } from "node-llama-cpp"
import type { Llama, LlamaGrammar } from "node-llama-cpp"
import { ConstraintFailure, InferenceFailure } from "../domain/Failure.js"
import { GrammarChecker } from "../services/GrammarChecker.js"
import type { Service as GrammarCheckerService } from "../services/GrammarChecker.js"
import * as Grammars from "./llama/Grammars.js"

/** node-llama-cpp's grammar test (llama_grammar_accept over the text); internal in 3.x. */
interface Testable {
  readonly _testText: (text: string) => boolean
}
const testable = (grammar: LlamaGrammar): grammar is LlamaGrammar & Testable =>
  typeof (grammar as Partial<Testable>)._testText === "function"

const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** The grammar itself is unusable: the caller's input, not retryable; the problem and size, never the text. */
const invalidGrammar = (problem: string, bytes: number | undefined, cause?: unknown) =>
  new ConstraintFailure({
    code: "CONSTRAINT_GRAMMAR_REJECTED",
    retryable: false,
    message: `the GBNF grammar cannot be used: ${problem}`,
    details: { kind: "grammar_invalid", problem, ...(bytes === undefined ? {} : { bytes }) },
    cause
  })

/** A checker on an already loaded llama.cpp binding; `cacheSize` parsed grammars are kept (default 64). */
export const fromLlama = (llama: Llama, options: { readonly cacheSize?: number | undefined } = {}): GrammarCheckerService => {
  const grammars = Grammars.make(llama, { capacity: options.cacheSize })
  const compile = (grammar: string): Effect.Effect<LlamaGrammar & Testable, ConstraintFailure> =>
    grammars.gbnf(grammar).pipe(
      Effect.mapError((rejected) => invalidGrammar(rejected.problem, rejected.bytes, rejected.cause)),
      Effect.flatMap((compiled) =>
        testable(compiled)
          ? Effect.succeed(compiled)
          : Effect.dieMessage("this node-llama-cpp version cannot test text against a grammar")
      )
    )
  return {
    matches: (text, grammar) =>
      Effect.flatMap(compile(grammar), (compiled) =>
        Effect.try({
          try: () => compiled._testText(text),
          catch: (cause) =>
            invalidGrammar(`llama.cpp failed to match the text: ${errorMessage(cause)}`, Buffer.byteLength(grammar), cause)
        }))
  }
}

/** The checker as a scoped layer: the binding loads when built (no model) and is released with it. */
export const layer: Layer.Layer<GrammarChecker, InferenceFailure> = Layer.scoped(
  GrammarChecker,
  Effect.map(
    Effect.acquireRelease(
      Effect.tryPromise({
        try: () => getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false }),
        catch: (cause) =>
          InferenceFailure.modelUnavailable(`cannot load llama.cpp to check grammars: ${errorMessage(cause)}`, {}, cause)
      }),
      (llama) => Effect.promise(() => llama.dispose())
    ),
    fromLlama
  )
)
