/**
 * A query checked once, into a value that carries what was checked.
 *
 * Checking decodes the wire (`infer.query.v1`), compiles and type-checks every CEL
 * expression for its place, resolves `~alias` model names through the alias map,
 * and refuses what the wire alone cannot see: a pattern without the responders it
 * needs, responders given where the pattern names its own, a quorum larger than
 * top-k, semantic similarity with no similarity provided. Every problem is listed
 * in one CONFIG_INVALID_REQUEST, each naming its field (`responders.0.expression`);
 * a CEL problem also names the position. Nothing downstream re-checks: the folds
 * and patterns take the compiled expressions and resolved names as they are.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as AnswerShape from "../../domain/AnswerShape.js"
import { ConfigurationFailure } from "../../domain/Failure.js"
import * as Query from "../../domain/Query.js"
import * as Text from "../../domain/Text.js"
import { ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Cel from "../Cel.js"
import * as Folds from "../Folds.js"
import * as Observed from "../internal/Observed.js"

/** What checking needs from the application. */
export interface Options {
  /** `~alias` -> model name (without the tilde). */
  readonly aliases?: Readonly<Record<string, string>> | undefined
  /** A semantic similarity; without one, `similarity: "semantic"` is refused. */
  readonly semantic?: Folds.SemanticSimilarity | undefined
}

/** A responder predicate, its alias resolved and its expression compiled. */
export interface Responder {
  /** Where it stands in the query, e.g. `orchestration.stages.1.responders.0`. */
  readonly field: string
  readonly predicate: Query.ResponderPredicate
  /** For llm predicates: the model name, an alias resolved. */
  readonly model?: string | undefined
  readonly expression?: Cel.Compiled<"predicate"> | undefined
}

export type Orchestration =
  | { readonly pattern: "single_shot" }
  | {
    readonly pattern: "verify"
    readonly primary: ReadonlyArray<Responder>
    readonly verifier: Responder
    readonly tiebreaker: Responder
    readonly agreement:
      | { readonly _tag: "Fixed"; readonly threshold: number }
      | { readonly _tag: "Expression"; readonly threshold: Cel.Compiled<"agreement"> }
  }
  | {
    readonly pattern: "waterfall"
    readonly stages: ReadonlyArray<ReadonlyArray<Responder>>
    readonly accept: Cel.Compiled<"decision">
    readonly onExhausted: "commit_last" | "fail"
  }
  | {
    readonly pattern: "retry_on_low_confidence"
    readonly threshold: Cel.Compiled<"decision">
    readonly maxAttempts: number
    readonly retryDial?: number | undefined
  }
  | {
    readonly pattern: "escalate"
    readonly tiers: ReadonlyArray<ReadonlyArray<Responder>>
    readonly escalation: Cel.Compiled<"decision">
    readonly onExpired: "commit_previous" | "fail"
  }
  | {
    readonly pattern: "ensemble_with_audit"
    readonly primary: ReadonlyArray<Responder>
    readonly auditor: Responder
    readonly audit: Cel.Compiled<"audit">
  }

export type Input = { readonly _tag: "Inline"; readonly text: string } | { readonly _tag: "Record"; readonly recordId: string }

/** A query ready to run. */
/**
 * The query's input as text: an inline input as it is, a record input read by
 * `read`. Without a reader a record input is CONFIG_INVALID_REQUEST naming
 * `input.record_id`; `missing` says what has none ("this runner has no record
 * store to read <id> from"), given the record id quoted.
 */
export const inputText = <E, R>(
  input: Input,
  read: ((recordId: string) => Effect.Effect<string, E, R>) | undefined,
  missing: (quotedRecordId: string) => string
): Effect.Effect<string, E | ConfigurationFailure, R> =>
  input._tag === "Inline"
    ? Effect.succeed(input.text)
    : read === undefined
    ? ConfigurationFailure.invalidRequest(
      `input.record_id: ${missing(JSON.stringify(Text.excerpt(input.recordId, 80)))}`,
      { details: { field: "input.record_id" } }
    )
    : read(input.recordId)

export interface Checked {
  /** The query as decoded. */
  readonly query: Query.Query
  readonly input: Input
  /** The top-level candidates (single_shot, retry_on_low_confidence); empty for the patterns that name their own. */
  readonly responders: ReadonlyArray<Responder>
  readonly fold: Folds.Spec
  readonly shape: AnswerShape.Checker
  readonly orchestration: Orchestration
  readonly topK: number
  readonly minQuorum: number
  /** Absent: each responder kind's default applies. */
  readonly maxLatencySecs?: number | undefined
  readonly dial?: number | undefined
  readonly budget?: Query.Budget | undefined
  readonly obligationResolution: Query.ObligationResolution
}

export const defaults = {
  topK: 3,
  minQuorum: 1,
  agreementThreshold: 0.85,
  maxAttempts: 3
} as const

/** One candidate answer accepted when `accept` holds on it as a fold. */
const acceptBy = (accept: Cel.Compiled<"decision">) => (candidate: Folds.Output) => accept.run({ fold: Folds.view(candidate) })

interface Problem {
  readonly message: string
  readonly details?: Record<string, unknown> | undefined
}

/** Checks a query: decoded, every expression compiled, names resolved. */
export const check = (input: unknown, options: Options = {}): Either.Either<Checked, ConfigurationFailure> =>
  Either.flatMap(Query.decode(input), (query) => checkDecoded(query, options))

/** Checks a query with the registry's `~aliases`. */
export const checkWithRegistry: (
  input: unknown,
  options?: Omit<Options, "aliases">
) => Effect.Effect<Checked, ConfigurationFailure, ResponderRegistry> = Observed.fn("Query.check")(function* (
  input: unknown,
  options: Omit<Options, "aliases"> = {}
) {
  const aliases = yield* (yield* ResponderRegistry).aliases
  return yield* check(input, { ...options, aliases })
})

/** Checks an already decoded query. */
export const checkDecoded = (query: Query.Query, options: Options = {}): Either.Either<Checked, ConfigurationFailure> => {
  const problems: Array<Problem> = []
  const fail = (field: string, message: string) => problems.push({ message: `${field}: ${message}` })
  const compiled = <P extends Cel.Place>(place: P, field: string, source: string | undefined): Cel.Compiled<P> | undefined => {
    if (source === undefined) return undefined
    const result = Cel.compile(place, field, source)
    if (Either.isRight(result)) return result.right
    problems.push({ message: result.left.message, details: result.left.details })
    return undefined
  }
  const aliases = options.aliases ?? {}

  const responder = (field: string, predicate: Query.ResponderPredicate): Responder => {
    const expression = compiled("predicate", `${field}.expression`, predicate.expression)
    if (predicate.kind !== "llm") return { field, predicate, expression }
    if (!predicate.model.startsWith("~")) return { field, predicate, model: predicate.model, expression }
    const alias = predicate.model.slice(1)
    const model = Object.hasOwn(aliases, alias) ? aliases[alias] : undefined
    if (model === undefined) {
      const known = Object.keys(aliases)
      fail(
        `${field}.model`,
        `unknown alias ${JSON.stringify(Text.excerpt(predicate.model, 60))} (${known.length === 0 ? "no aliases are defined" : `known: ${known.slice(0, 20).map((k) => `~${k}`).join(", ")}`})`
      )
    }
    return { field, predicate, model, expression }
  }
  const responders = (field: string, list: ReadonlyArray<Query.ResponderPredicate>) =>
    list.map((p, i) => responder(`${field}.${i}`, p))
  const stages = (field: string, list: ReadonlyArray<Query.Stage>) =>
    list.map((stage, i) => responders(`${field}.${i}.responders`, stage.responders))

  // the fold
  const wireFold: Query.Fold = query.fold ?? { function: "consensus" }
  const shape = AnswerShape.checker(query.answer_shape)
  const foldOptions = ((): Folds.Options => {
    switch (wireFold.function) {
      case "consensus":
      case "ensemble_weighted": {
        const similarity = wireFold.similarity ?? "structural"
        if (similarity === "semantic" && options.semantic === undefined) {
          fail("fold.similarity", "semantic similarity needs a similarity provided by the application; none is")
        }
        if (similarity === "structural" && wireFold.similarity_threshold !== undefined) {
          fail("fold.similarity_threshold", "applies to text and semantic similarity, not structural")
        }
        const weight = wireFold.function === "ensemble_weighted"
          ? compiled("weight", "fold.weight_expression", wireFold.weight_expression)
          : undefined
        return { shape, similarity, threshold: wireFold.similarity_threshold, semantic: options.semantic, weight }
      }
      case "expression":
        return { shape, choice: compiled("choice", "fold.expression", wireFold.expression) }
      case "best_of":
      case "waterfall_first":
        return { shape }
    }
  })()

  // the orchestration
  const wire: Query.Orchestration = query.orchestration ?? { pattern: "single_shot" }
  const top = query.responders === undefined ? [] : responders("responders", query.responders)
  const needsTop = wire.pattern === "single_shot" || wire.pattern === "retry_on_low_confidence"
  if (needsTop && top.length === 0) fail("responders", `the ${wire.pattern} pattern needs at least one responder`)
  if (!needsTop && query.responders !== undefined) {
    fail("responders", `the ${wire.pattern} pattern names its own responders in orchestration; leave responders out`)
  }
  const orchestration = ((): Orchestration | undefined => {
    switch (wire.pattern) {
      case "single_shot":
        return { pattern: "single_shot" }
      case "verify": {
        const primary = responders("orchestration.primary", wire.primary)
        const verifier = responder("orchestration.verifier", wire.verifier)
        const tiebreaker = responder("orchestration.tiebreaker", wire.tiebreaker)
        const threshold = wire.agreement_threshold ?? defaults.agreementThreshold
        if (typeof threshold === "number") return { pattern: "verify", primary, verifier, tiebreaker, agreement: { _tag: "Fixed", threshold } }
        const expression = compiled("agreement", "orchestration.agreement_threshold", threshold)
        return expression === undefined
          ? undefined
          : { pattern: "verify", primary, verifier, tiebreaker, agreement: { _tag: "Expression", threshold: expression } }
      }
      case "waterfall": {
        const list = stages("orchestration.stages", wire.stages)
        const accept = compiled("decision", "orchestration.accept_expression", wire.accept_expression)
        return accept === undefined ? undefined : { pattern: "waterfall", stages: list, accept, onExhausted: wire.on_exhausted ?? "commit_last" }
      }
      case "retry_on_low_confidence": {
        const threshold = compiled("decision", "orchestration.threshold_expression", wire.threshold_expression)
        return threshold === undefined
          ? undefined
          : {
            pattern: "retry_on_low_confidence",
            threshold,
            maxAttempts: wire.max_attempts ?? defaults.maxAttempts,
            retryDial: wire.retry_dial
          }
      }
      case "escalate": {
        const tiers = stages("orchestration.tiers", wire.tiers)
        const escalation = compiled("decision", "orchestration.escalation_expression", wire.escalation_expression)
        return escalation === undefined ? undefined : { pattern: "escalate", tiers, escalation, onExpired: wire.on_expired ?? "commit_previous" }
      }
      case "ensemble_with_audit": {
        const primary = responders("orchestration.primary_responders", wire.primary_responders)
        const auditor = responder("orchestration.auditor", wire.auditor)
        const audit = compiled("audit", "orchestration.audit_expression", wire.audit_expression)
        return audit === undefined ? undefined : { pattern: "ensemble_with_audit", primary, auditor, audit }
      }
    }
  })()

  // a waterfall's first-accepted fold accepts by the pattern's own expression
  const fold: Folds.Spec = orchestration?.pattern === "waterfall" && wireFold.function === "waterfall_first"
    ? { function: wireFold.function, options: { ...foldOptions, accept: acceptBy(orchestration.accept) } }
    : { function: wireFold.function, options: foldOptions }

  const topK = query.top_k ?? defaults.topK
  const minQuorum = query.min_quorum ?? defaults.minQuorum
  if (minQuorum > topK) fail("min_quorum", `${minQuorum} can never be met with top_k ${topK}`)

  const { inline, record_id } = query.input
  const checkedInput: Input | undefined = inline !== undefined
    ? { _tag: "Inline", text: inline }
    : record_id !== undefined
    ? { _tag: "Record", recordId: record_id }
    : undefined
  if (checkedInput === undefined) fail("input", "exactly one of inline and record_id")

  if (problems.length > 0 || orchestration === undefined || checkedInput === undefined) {
    const issues = problems.map((p) => p.message)
    return Either.left(
      ConfigurationFailure.invalidRequest(`invalid query: ${issues.join("; ")}`, {
        details: { issues, expressions: problems.flatMap((p) => (p.details === undefined ? [] : [p.details])) }
      })
    )
  }
  return Either.right({
    query,
    input: checkedInput,
    responders: top,
    fold,
    shape,
    orchestration,
    topK,
    minQuorum,
    maxLatencySecs: query.max_latency_secs,
    dial: query.dial,
    budget: query.budget,
    obligationResolution: query.obligation_resolution ?? "last_writer_wins"
  })
}
