/**
 * Modes structured and redundant: the request's user message answered in the
 * shape of its schema, by one SpecializedLoop call or by replicas of a
 * RedundantLoop that vote. Neither keeps anything in a session. When a Validator
 * is present, a structured answer must also pass its rules (re-prompted like a
 * schema violation); `output.strictValidation` says whether one that still fails
 * them when the retries are spent fails the request (true) or comes back with the
 * failed rules as `validationResult.violations` (false, the default). A structured
 * answer's confidence is its validation pass rate (the share of the replies that
 * passed), a redundant one's the vote's support.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Message from "../../domain/Message.js"
import { withMetrics } from "../../services/Metrics.js"
import { type Service as ValidatorService, Validator } from "../../services/Validator.js"
import type * as Lifecycle from "../Lifecycle.js"
import * as RedundantLoop from "../RedundantLoop.js"
import * as SpecializedLoop from "../SpecializedLoop.js"
import * as Voting from "../Voting.js"
import type * as Check from "./Check.js"
import type { Environment } from "./Environment.js"
import * as Hints from "./Hints.js"
import * as Prompts from "./Prompts.js"
import type { Outcome } from "./Types.js"
import * as Tracing from "../../services/internal/Tracing.js"

/** The request's own system message, else the PromptProvider's, else the facade's default. */
const systemPromptOf = (env: Environment, checked: Check.Extraction) => {
  const own = checked.request.messages.find(Message.isSystem)?.content
  return own !== undefined
    ? Effect.succeed(own)
    : Effect.map(Prompts.systemPrompt(undefined), Option.getOrElse(() => env.options.defaultSystemPrompt))
}

/**
 * What a structured call and a vote's replicas are asked the same way: the schema and its repair, the
 * Validator's rules on a value that passed the schema (a failure is re-prompted like a schema violation), the
 * grammar, the system prompt and the request's sampling hints.
 */
const commonOptions = (checked: Check.Extraction, validator: Option.Option<ValidatorService>, systemPrompt: string | undefined) => {
  const { output } = checked.request
  const hints = Hints.effective(checked.request.hints)
  return {
    schema: checked.schema,
    repairAllowed: output.repairAllowed,
    validate: Option.isSome(validator)
      ? (value: unknown) => Effect.asVoid(validator.value.validate(JSON.stringify(value)))
      : undefined,
    grammar: output.grammar,
    systemPrompt,
    maxTokens: hints.maxTokens,
    temperature: hints.temperature,
    topP: hints.topP,
    options: hints.options
  }
}

/** Mode structured: one call, with a tool phase only when the request names its tools. */
export const structured = (env: Environment, checked: Check.Extraction, tracker: Lifecycle.Tracker) =>
  Effect.gen(() => structuredSteps(env, checked, tracker))

/** The steps of mode structured, one generator function for every request (a generator function made per call costs V8 new maps). */
function* structuredSteps(env: Environment, checked: Check.Extraction, tracker: Lifecycle.Tracker) {
  const { output, tools } = checked.request
  const validator = yield* Effect.serviceOption(Validator)
  yield* tracker.transition("EXECUTE", "structured call")
  const result = yield* SpecializedLoop.call(checked.user.content, {
    ...commonOptions(checked, validator, yield* systemPromptOf(env, checked)),
    // when no retry is left for the Validator's rules, strictValidation says whether it fails the request
    strictValidation: output.strictValidation,
    // An empty list means no tools here, so a plain extraction is never preceded
    // by a tool round the caller did not ask for.
    useTools: tools.length > 0,
    allowTools: tools.length === 0 ? undefined : tools,
    maxToolIterations: env.options.maxToolIterations
  })
  yield* tracker.transition("VALIDATE", "output validated against the schema")
  return {
    content: result.raw,
    structuredOutput: result.value,
    toolCallsMade: result.toolCalls,
    // the share of the replies that passed validation (1 when the first did)
    confidence: result.validation.passed / Math.max(1, result.validation.passed + result.validation.failed),
    confidenceSource: "validation",
    validationResult: result.validation,
    usage: result.usage,
    stopReason: "finish"
  } satisfies Outcome
}

/** Mode redundant: replicas that vote; the vote is annotated on the request's span and counted. */
export const redundant = (env: Environment, checked: Check.Extraction, tracker: Lifecycle.Tracker) =>
  Effect.gen(() => redundantSteps(env, checked, tracker))

/** The steps of mode redundant, one generator function for every request (a generator function made per call costs V8 new maps). */
function* redundantSteps(env: Environment, checked: Check.Extraction, tracker: Lifecycle.Tracker) {
  const { redundancy } = checked.request
  const validator = yield* Effect.serviceOption(Validator)
  yield* tracker.transition("EXECUTE", "redundant replicas")
  const result = yield* RedundantLoop.run(checked.user.content, {
    ...commonOptions(checked, validator, yield* systemPromptOf(env, checked)),
    // a replica whose value breaks one of the Validator's rules does not vote
    voting: redundancy?.voting === "unanimity" ? Voting.UnanimityVoting : Voting.MajorityVoting,
    n: redundancy?.n,
    quorum: redundancy?.quorum,
    // replica i samples with seed + i: replicas differ, and the vote replays exactly
    seed: Hints.effective(checked.request.hints).seed
  })
  yield* tracker.transition("VALIDATE", "replicas voted")
  yield* Tracing.annotate({
    "pagantic.vote.confidence": result.confidence,
    "pagantic.vote.winner": result.winner,
    "pagantic.vote.candidates": result.candidates.length,
    "pagantic.vote.replicas": result.replicas.length
  })
  yield* withMetrics((m) => Effect.zipRight(m.increment("votes"), m.increment("vote_candidates", result.candidates.length)))
  return {
    content: result.content,
    structuredOutput: result.value,
    candidates: result.candidates,
    confidence: result.confidence,
    confidenceSource: "voting",
    validationResult: result.validation,
    usage: result.usage,
    stopReason: "finish"
  } satisfies Outcome
}
