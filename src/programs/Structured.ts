/**
 * ChatStructured: one structured answer from a conversation, that cannot come back wrong.
 *
 * The request carries the target's JSON schema and, when given, a GBNF grammar, so
 * engines that can constrain decoding do; the temperature defaults low. The reply
 * then goes through the constraint pipeline (valid JSON? -> normalize -> validate;
 * not JSON -> repair -> normalize -> validate) and, when given, a rule check. A
 * rejected reply is the lifecycle's VALIDATE -> EXECUTE transition: on a Schedule,
 * the model is asked again with its own reply and what was wrong with it, and every
 * attempt is counted. When the schedule gives up, the last rejection goes
 * VALIDATE -> ERROR: the failure is the last ConstraintFailure (carrying the raw
 * model text and the violations) or the caller's ValidationFailure, and the
 * request's attempt count equals the replies the engine gave. Retryable inference
 * failures are retried on their own policy first; an InferenceFailure that remains
 * ends the call.
 *
 * The output contract's two switches: without `repairAllowed` a structural error
 * (the reply is not JSON, or not a sentence of the grammar) is terminal, never
 * re-prompted; without `strictValidation` a rule check that still fails when the
 * schedule gives up returns the last schema-valid value with the failed rules as
 * warnings (`validation.violations`) instead of failing.
 *
 * This is a function over the Engine and Constraint services, not a method of an
 * AgentLoop, so every loop (AgentLoop, SpecializedLoop, RedundantLoop, plans) can
 * use it on whatever messages it holds.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { ConstraintFailure } from "../domain/Failure.js"
import type { InferenceFailure, ValidationFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import { ValidationResult } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Enforced, OutputSchema } from "../services/Constraint.js"
import { Constraint } from "../services/Constraint.js"
import type { InferenceResult } from "../services/Engine.js"
import { Engine } from "../services/Engine.js"
import * as GrammarChecker from "../services/GrammarChecker.js"
import * as Observed from "./internal/Observed.js"
import * as Prompt from "./internal/Prompt.js"
import * as Request from "./internal/Request.js"
import * as Retry from "./internal/Retry.js"
import * as Spans from "./internal/Spans.js"
import * as Lifecycle from "./Lifecycle.js"
import * as RetryPolicy from "../services/RetryPolicy.js"
import * as Construct from "../domain/Construct.js"

/** The violations of a reply that passed (one array for every call: nobody writes to it). */
const noViolations: ReadonlyArray<string> = Object.freeze([])

/** Structured output is extraction, not creativity. */
export const defaultTemperature = 0.2

export const defaultMaxTokens = 2048

/** VALIDATE -> EXECUTE: two more attempts, 200 ms then 400 ms (jittered). */
export const retryPolicy: Schedule.Schedule<unknown> = RetryPolicy.exponential({ base: "200 millis", times: 2 })

export interface Options<A, EV extends ValidationFailure = never> {
  /** The shape of the output: an Effect Schema (typed) or a raw JSON Schema of the subset. */
  readonly schema: OutputSchema<A>
  /** A GBNF grammar, passed to the engine unchanged. */
  readonly grammar?: string | undefined
  /** Default `defaultTemperature`. */
  readonly temperature?: number | undefined
  /** Default `defaultMaxTokens`. */
  readonly maxTokens?: number | undefined
  readonly topP?: number | undefined
  /** Vendor-specific options, handed to the engine unchanged on every attempt. */
  readonly options?: Readonly<Record<string, unknown>> | undefined
  /** Lets engines that keep state reuse the evaluated prefix. */
  readonly sessionKey?: string | undefined
  /** Whether JSON repair may be applied (OutputContract.repairAllowed). Default true. */
  readonly repairAllowed?: boolean | undefined
  /** Rule checks on the validated value; a failure is retried like a constraint failure. */
  readonly validate?: ((value: A) => Effect.Effect<void, EV>) | undefined
  /**
   * OutputContract.strictValidation. True: a rule check that still fails when the
   * schedule gives up fails the call (no partial result). False: the last value that
   * passed the schema is returned, its failed rules listed in `validation.violations`.
   * Default true.
   */
  readonly strictValidation?: boolean | undefined
  /** When a rejected reply is re-prompted (VALIDATE -> EXECUTE). Default `retryPolicy`; `RetryPolicy.none` for one attempt. */
  readonly retry?: Schedule.Schedule<unknown, ConstraintFailure | EV> | undefined
  /** When retryable inference failures are retried. Default `RetryPolicy.inference`. */
  readonly inferenceRetry?: Schedule.Schedule<unknown, InferenceFailure> | undefined
  /** Told the usage of every reply, including replies that are then rejected. */
  readonly onUsage?: ((usage: TokenUsage.TokenUsage) => Effect.Effect<void>) | undefined
  /** Told of every rejected reply, and whether it is re-prompted (`retrying`) or ends the call. */
  readonly onRejected?: ((rejection: Rejection<EV>) => Effect.Effect<void>) | undefined
}

/** A rejected reply: its attempt, why, and whether the model is asked again. */
export interface Rejection<EV = never> {
  readonly attempt: number
  readonly failure: ConstraintFailure | EV
  readonly retrying: boolean
}

/** A structured answer. */
export interface Result<A> {
  /** The validated value, of the schema's type. */
  readonly value: A
  /** The value as compact JSON. */
  readonly content: string
  /** The accepted reply as the model wrote it. */
  readonly raw: string
  /** Inference attempts made (1 when the first reply was accepted). */
  readonly attempts: number
  /** Replies that needed JSON repair. */
  readonly repairAttempts: number
  /** Whether the accepted reply needed repair. */
  readonly repaired: boolean
  /** Usage of every attempt. */
  readonly usage: TokenUsage.TokenUsage
  /** Summary for SystemResponse.validationResult. */
  readonly validation: ValidationResult
  /** True when the value failed the rule check and is returned as partially valid (`strictValidation: false`). */
  readonly partial: boolean
}

/** What a structured call can fail with. */
export type StructuredError<EV = never> = InferenceFailure | ConstraintFailure | EV

/** What was wrong with a rejected reply, one problem a line. */
const problemsOf = (failure: ConstraintFailure | ValidationFailure): ReadonlyArray<string> =>
  failure._tag === "ConstraintFailure"
    ? failure.violations
    : failure.failedRules.length > 0
      ? failure.failedRules
      : [failure.message]

/**
 * The correction sent after a rejected reply (a PromptProvider's `correction`
 * template, when it has one, is sent instead).
 */
export const correctionPrompt = (failure: ConstraintFailure | ValidationFailure): string => {
  const problems = problemsOf(failure)
  return [
    `Your previous reply was rejected (${failure.code}): ${failure.message}.`,
    ...problems.map((p) => `- ${p}`),
    "Reply again with only the corrected JSON."
  ].join("\n")
}

/**
 * A reply checked against the request's grammar, when there is one and a checker
 * to read it (an engine may have ignored the grammar): outside it, a retryable
 * CONSTRAINT_GRAMMAR_REJECTED.
 */
const checkGrammar = (
  checker: Option.Option<GrammarChecker.Service>,
  grammar: string | undefined,
  result: InferenceResult
): Effect.Effect<void, ConstraintFailure> =>
  grammar === undefined || Option.isNone(checker)
    ? Effect.void
    : Effect.flatMap(checker.value.matches(result.content, grammar), (matches) =>
      matches
        ? Effect.void
        : new ConstraintFailure({
          code: "CONSTRAINT_GRAMMAR_REJECTED",
          retryable: true,
          raw: result.content,
          message: result.finishReason === "length"
            ? `the reply was cut off by maxTokens before the grammar was complete`
            : `the reply is not a sentence of the grammar`,
          details: { finishReason: result.finishReason }
        }))

/** Errors in the form of the reply, not its content: terminal when repair is not allowed. */
export const structuralCodes: ReadonlySet<string> = new Set(["CONSTRAINT_JSON_INVALID", "CONSTRAINT_GRAMMAR_REJECTED"])

/** Whether a rejected reply may be re-prompted at all (the schedule then decides when and how often). */
const reprompts = (failure: ConstraintFailure | ValidationFailure, repairAllowed: boolean): boolean =>
  failure.retryable && (repairAllowed || !structuralCodes.has(failure.code))

/**
 * Asks for a structured answer to `messages` and returns the validated value.
 * Requires Engine and Constraint. Reports EXECUTE -> VALIDATE and VALIDATE -> EXECUTE
 * (a retry) through the request's lifecycle tracker, or as events when there is none.
 */
export const run = <A, EV extends ValidationFailure = never>(
  messages: ReadonlyArray<Message.Message>,
  options: Options<A, EV>
): Effect.Effect<Result<A>, StructuredError<EV>, Engine | Constraint> =>
  Observed.span("Structured.run")(runUntraced(messages, options))

const retryableInference = (f: InferenceFailure): boolean => f.retryable
const defaultInferenceRetry: Retry.Options<InferenceFailure> = { schedule: RetryPolicy.inference, while: retryableInference }

// The call's state lives in plain variables: one fiber runs its attempts one after another.
// Written as a chain of steps, not a generator, and an accepted reply becomes the result in
// the step that accepts it: the first reply is accepted in the common case, and around a
// model that answers at once each step costs as much as the work it does (issue 13).
const runUntraced = <A, EV extends ValidationFailure = never>(
  messages: ReadonlyArray<Message.Message>,
  options: Options<A, EV>
): Effect.Effect<Result<A>, StructuredError<EV>, Engine | Constraint> =>
  Effect.withFiberRuntime((fiber) => {
    const context = fiber.currentContext as Context.Context<Engine | Constraint>
    const engine = Context.get(context, Engine)
    const constraint = Context.get(context, Constraint)
    const target = constraint.target(options.schema)
    const constraints = constraint.requestConstraints(target, options.grammar)
    const grammarChecker = Context.getOption(context as Context.Context<never>, GrammarChecker.GrammarChecker)
    let attempts = 0
    let repairs = 0
    let usage = TokenUsage.empty
    let correction: ReadonlyArray<Message.Message> = []
    let lastRaw = ""
    const model = Spans.lazyModelName(engine.modelInfo)
    const repairAllowed = options.repairAllowed ?? true
    const strictValidation = options.strictValidation ?? true
    const inferenceRetry = options.inferenceRetry === undefined
      ? defaultInferenceRetry
      : { schedule: options.inferenceRetry, while: retryableInference }
    // the request's settings, built once for every attempt (only the fields that are set)
    const settings: { -readonly [K in keyof Request.Settings]: Request.Settings[K] } = {
      schema: constraints.schema,
      maxTokens: options.maxTokens ?? defaultMaxTokens,
      temperature: options.temperature ?? defaultTemperature
    }
    if (constraints.grammar !== undefined) settings.grammar = constraints.grammar
    if (options.topP !== undefined) settings.topP = options.topP
    if (options.options !== undefined) settings.options = options.options
    if (options.sessionKey !== undefined) settings.sessionKey = options.sessionKey

    // Set when a reply passed the schema but not the rule check: the partial result of a non-strict call.
    let lastRejectedValue: Option.Option<{ readonly enforced: Enforced<A>; readonly failure: EV }> = Option.none()

    // The call's result from the accepted reply (or, with `partial`, the last schema-valid one).
    const resultOf = (enforced: Enforced<A>, partial?: EV): Result<A> => {
      const n = attempts
      const repairAttempts = repairs
      const violations = partial === undefined ? noViolations : partial.failedRules.length > 0 ? partial.failedRules : [partial.message]
      return {
        value: enforced.value,
        content: enforced.content,
        raw: enforced.raw,
        attempts: n,
        repairAttempts,
        repaired: enforced.repaired,
        usage,
        validation: partial === undefined
          ? Construct.unchecked(ValidationResult, { passed: 1, failed: n - 1, repairAttempts, violations })
          : Construct.unchecked(ValidationResult, { passed: 0, failed: n, repairAttempts, violations }),
        partial: partial !== undefined
      }
    }

    // A rejected reply. VALIDATE -> EXECUTE only when the schedule grants another attempt
    // (after its delay); otherwise the rejection stands and the state stays VALIDATE, for
    // the request to end VALIDATE -> ERROR with as many attempts as replies.
    // The retry schedule's driver is made at the first rejection (most calls are accepted at once).
    let schedule: Schedule.ScheduleDriver<unknown, ConstraintFailure | EV, never> | undefined
    const rejected = (failure: ConstraintFailure | EV): Effect.Effect<Result<A>, StructuredError<EV>> =>
      Effect.gen(function* () {
        if (schedule === undefined) schedule = yield* Schedule.driver(options.retry ?? retryPolicy)
        const granted = reprompts(failure, repairAllowed) && Either.isRight(yield* Effect.either(schedule.next(failure)))
        if (options.onRejected !== undefined) {
          yield* options.onRejected({ attempt: attempts, failure, retrying: granted })
        }
        if (!granted) {
          const last = lastRejectedValue
          if (!strictValidation && Option.isSome(last)) return resultOf(last.value.enforced, last.value.failure)
          return yield* Effect.fail(failure)
        }
        const n = attempts
        const corrected = yield* Prompt.template(Prompt.templates.correction, {
          code: failure.code,
          message: failure.message,
          problems: problemsOf(failure).map((p) => `- ${p}`).join("\n")
        }, correctionPrompt(failure))
        correction = [Message.assistant(lastRaw), Message.user(corrected)]
        yield* Lifecycle.transition("VALIDATE", "EXECUTE", n + 1, `${failure.code}: ${failure.message}`)
        return yield* Effect.suspend(attempt)
      })

    // The reply checked (grammar, the constraint pipeline, the rule check): the result, or a rejection.
    const check = (result: InferenceResult, n: number): Effect.Effect<Result<A>, StructuredError<EV>> => {
      const enforce = Effect.matchEffect(constraint.enforce(result.content, target, { repairAllowed }), {
        onFailure: (f) => {
          if (f.details.repaired === true || f.details.repairAttempted === true) repairs++
          return rejected(f)
        },
        onSuccess: (enforced): Effect.Effect<Result<A>, StructuredError<EV>> => {
          if (enforced.repaired) repairs++
          if (options.validate === undefined) return Effect.succeed(resultOf(enforced))
          return Effect.matchEffect(options.validate(enforced.value), {
            onFailure: (failure) => {
              lastRejectedValue = Option.some({ enforced, failure })
              return rejected(failure)
            },
            onSuccess: () => Effect.succeed(resultOf(enforced))
          })
        }
      })
      const received = Lifecycle.transition("EXECUTE", "VALIDATE", n, "reply received")
      if (constraints.grammar === undefined || Option.isNone(grammarChecker)) return Effect.zipRight(received, enforce)
      return Effect.zipRight(
        received,
        Effect.matchEffect(checkGrammar(grammarChecker, constraints.grammar, result), { onFailure: rejected, onSuccess: () => enforce })
      )
    }

    // One EXECUTE -> VALIDATE pass. An InferenceFailure that remains after its own retries ends the call;
    // only rejected replies reach the VALIDATE -> EXECUTE schedule.
    const attempt = (): Effect.Effect<Result<A>, StructuredError<EV>> => {
      lastRejectedValue = Option.none()
      const n = ++attempts
      const request = Request.make(correction.length === 0 ? messages : [...messages, ...correction], [], settings)
      const inferOnce = Observed.meteredInference(model, request, engine.infer(request))
      return Effect.flatMap(Retry.retry(inferOnce, inferenceRetry), (result) => {
        usage = TokenUsage.combine(usage, result.usage)
        lastRaw = result.content
        const checked = check(result, n)
        return options.onUsage === undefined ? checked : Effect.zipRight(options.onUsage(result.usage), checked)
      })
    }

    return attempt()
  })
