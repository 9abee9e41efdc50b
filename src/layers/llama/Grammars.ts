/**
 * Grammars from requests, compiled by llama.cpp only after they pass the checks
 * of domain/Gbnf, and kept in a small cache.
 *
 * llama.cpp parses a grammar recursively on the native stack and prints each one
 * it rejects to stderr, so nothing reaches it unchecked: a GBNF text must pass
 * `Gbnf.check`, a JSON schema `Gbnf.checkSchema` (size, nesting, no NUL) before
 * node-llama-cpp generates its grammar. A rejection is a value carrying a short
 * problem and the byte size, never the text: each caller makes its own failure
 * of it. The cache holds compiled grammars by text, least recently used out
 * first; a grammar that fails to compile is not stored.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { LlamaGrammar, LlamaJsonSchemaGrammar, LlamaLogLevel } from "node-llama-cpp"
import type { GbnfJsonSchema, Llama } from "node-llama-cpp"
import * as Gbnf from "../../domain/Gbnf.js"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import { toGbnfSchema } from "./ChatHistory.js"
import { Lru } from "./Lru.js"

/** Compiled grammars kept per engine or checker (a compiled grammar is small; its key is at most 64 KiB). */
export const DEFAULT_CAPACITY = 64

/** Why a grammar was not compiled: a short problem in plain words and the size of what was sent. */
export interface Rejected {
  readonly _tag: "Rejected"
  readonly source: "gbnf" | "schema"
  readonly problem: string
  /** UTF-8 bytes of the grammar, or of the schema as JSON when it was measured. */
  readonly bytes?: number | undefined
  readonly cause?: unknown
}

const rejected = (source: Rejected["source"], problem: string, bytes?: number, cause?: unknown): Rejected => ({
  _tag: "Rejected",
  source,
  problem,
  ...(bytes === undefined ? {} : { bytes }),
  ...(cause === undefined ? {} : { cause })
})

const byteLength = (text: string): number => Buffer.byteLength(text, "utf8")

// ---------------------------------------------------------------------------
// Compiling
// ---------------------------------------------------------------------------

/**
 * Runs a native grammar parse with llama.cpp's log turned down to fatal, so its
 * error lines ("failed to parse grammar", "left recursion detected ...") are not
 * logged. The level is global to the binding: log lines other threads write in
 * that instant (a generation on another sequence) are dropped too. What stays:
 * llama.cpp's parser writes a syntax error and the whole rejected grammar to
 * stderr with fprintf, past any log level; `Gbnf.check` refuses most syntax
 * errors before that and bounds the text to 64 KiB.
 */
const quietly = <A>(llama: Llama, compile: () => A, onError: (cause: unknown) => Rejected): Effect.Effect<A, Rejected> =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const previous = llama.logLevel
      llama.logLevel = LlamaLogLevel.fatal
      return previous
    }),
    () => Effect.try({ try: compile, catch: onError }),
    (previous) => Effect.sync(() => (llama.logLevel = previous))
  )

const NATIVE_PROBLEM = "llama.cpp cannot parse the grammar although it passes the pre-check: " +
  "look for an escape, a token (<...>) or a character range it does not know"

/** A compiler of request grammars on one llama.cpp binding, with its cache. */
export interface Grammars {
  /** A GBNF grammar; `root` is its start rule. */
  readonly gbnf: (grammar: string) => Effect.Effect<LlamaGrammar, Rejected>
  /** The grammar node-llama-cpp generates for a JSON schema of our subset. */
  readonly schema: (schema: JsonSchema) => Effect.Effect<LlamaGrammar, Rejected>
  /** Compiled grammars held now. */
  readonly size: () => number
}

export const make = (llama: Llama, options: { readonly capacity?: number | undefined } = {}): Grammars => {
  const cache = new Lru<string, LlamaGrammar>(options.capacity ?? DEFAULT_CAPACITY)
  const cached = <E>(key: string, compile: Effect.Effect<LlamaGrammar, E>): Effect.Effect<LlamaGrammar, E> =>
    Effect.suspend(() => {
      const hit = cache.get(key)
      return hit !== undefined
        ? Effect.succeed(hit)
        : Effect.tap(compile, (compiled) => Effect.sync(() => cache.set(key, compiled)))
    })

  const gbnf = (grammar: string): Effect.Effect<LlamaGrammar, Rejected> =>
    Effect.suspend(() => {
      const checked = Gbnf.check(grammar)
      if (Either.isLeft(checked)) return Effect.fail(rejected("gbnf", checked.left, byteLength(grammar)))
      return cached(
        `gbnf:${grammar}`,
        quietly(
          llama,
          () => new LlamaGrammar(llama, { grammar }),
          (cause) => rejected("gbnf", NATIVE_PROBLEM, byteLength(grammar), cause)
        )
      )
    })

  const schema = (schema: JsonSchema): Effect.Effect<LlamaGrammar, Rejected> =>
    Effect.suspend(() => {
      const checked = Gbnf.checkSchema(schema)
      if (Either.isLeft(checked)) return Effect.fail(rejected("schema", checked.left))
      // Bounded in depth by the check: stringifying and converting cannot overflow the stack.
      const key = JSON.stringify(schema)
      return cached(
        `schema:${key}`,
        quietly(
          llama,
          () => new LlamaJsonSchemaGrammar<GbnfJsonSchema>(llama, toGbnfSchema(schema)) as LlamaGrammar,
          (cause) =>
            rejected(
              "schema",
              "llama.cpp cannot use the grammar generated for the JSON schema (look for unusual characters in enum values or property names)",
              byteLength(key),
              cause
            )
        )
      )
    })

  return { gbnf, schema, size: () => cache.size }
}
