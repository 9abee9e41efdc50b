/**
 * Layer 5: grammar checks of a whole text.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { ConstraintFailure } from "../domain/Failure.js"

/**
 * Checks a whole text against a GBNF grammar. Decoders that enforce the grammar
 * (llama.cpp) make a mismatch rare, but not impossible: an answer cut off by
 * maxTokens stops mid-grammar, and a remote engine may ignore the grammar. A
 * structured call that was given a grammar checks its reply with this service when
 * one is provided, and a mismatch is CONSTRAINT_GRAMMAR_REJECTED.
 */
export interface Service {
  /**
   * Whether `text` is a complete sentence of `grammar`. Fails with
   * CONSTRAINT_GRAMMAR_REJECTED (not retryable) when the grammar itself does not parse.
   */
  readonly matches: (text: string, grammar: string) => Effect.Effect<boolean, ConstraintFailure>
}

/** The GBNF checker (optional: without it, grammar output is trusted to the decoder). */
export class GrammarChecker extends Context.Tag("pagantic/GrammarChecker")<GrammarChecker, Service>() {}
