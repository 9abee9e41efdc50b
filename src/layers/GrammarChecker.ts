/**
 * The GBNF checker on llama.cpp's own grammar engine: the grammar is parsed by
 * llama.cpp exactly as for constrained decoding, and the text is fed to it code
 * point by code point; the text matches when the grammar accepts all of it and
 * is complete at the end. Parsed grammars are kept per text (a bounded map).
 *
 * It loads the llama.cpp binding (no model), so it works beside any engine,
 * including remote ones that may not enforce a grammar at all.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { getLlama, LlamaGrammar, LlamaLogLevel } from "node-llama-cpp"
import type { Llama } from "node-llama-cpp"
import { ConstraintFailure, InferenceFailure } from "../domain/Failure.js"
import { GrammarChecker } from "../services/Constraint.js"
import type { GrammarCheckerService } from "../services/Constraint.js"

const MAX_CACHED = 64

/** node-llama-cpp's grammar test (llama_grammar_accept over the text); internal in 3.x. */
interface Testable {
  readonly _testText: (text: string) => boolean
}
const testable = (grammar: LlamaGrammar): grammar is LlamaGrammar & Testable =>
  typeof (grammar as Partial<Testable>)._testText === "function"

const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error))

const invalidGrammar = (grammar: string, cause: unknown) =>
  new ConstraintFailure({
    code: "CONSTRAINT_GRAMMAR_REJECTED",
    retryable: false,
    message: `the GBNF grammar does not parse: ${errorMessage(cause)}`,
    details: { grammar, kind: "grammar_invalid" },
    cause
  })

/** A checker on an already loaded llama.cpp binding. */
export const fromLlama = (llama: Llama): GrammarCheckerService => {
  const parsed = new Map<string, LlamaGrammar & Testable>()
  const compile = (grammar: string): Effect.Effect<LlamaGrammar & Testable, ConstraintFailure> =>
    Effect.suspend(() => {
      const cached = parsed.get(grammar)
      if (cached !== undefined) return Effect.succeed(cached)
      return Effect.try({
        try: () => new LlamaGrammar(llama, { grammar }),
        catch: (cause) => invalidGrammar(grammar, cause)
      }).pipe(
        Effect.flatMap((compiled) =>
          testable(compiled)
            ? Effect.succeed(compiled)
            : Effect.dieMessage("this node-llama-cpp version cannot test text against a grammar")
        ),
        Effect.tap((compiled) =>
          Effect.sync(() => {
            if (parsed.size >= MAX_CACHED) parsed.delete(parsed.keys().next().value!)
            parsed.set(grammar, compiled)
          })
        )
      )
    })
  return {
    matches: (text, grammar) =>
      Effect.flatMap(compile(grammar), (compiled) =>
        Effect.try({
          try: () => compiled._testText(text),
          catch: (cause) => invalidGrammar(grammar, cause)
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
