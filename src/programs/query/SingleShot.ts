/**
 * single_shot in memory: the default pattern without durability.
 *
 * Select the candidates (filter, relevance, top-k), ask each of them once, all at
 * the same time, wait for every answer (or, with `awaiting: "quorum"`, until
 * `min_quorum` valid answers are in, interrupting the rest), and fold. Each
 * candidate has its deadline (the query's `max_latency_secs`, else its kind's
 * default); a responder that fails, times out or answers off-shape is a failed
 * slot with its problem recorded, never a crash, and the fold runs over the rest.
 *
 * This is the in-memory path: nothing is journaled, so a crash loses the run, and
 * a human (actor) responder cannot answer here (it needs a durable slot): it is a
 * failed slot saying so. The durable single_shot wraps these same steps, recording
 * each CALL before dispatch and each DO before folding.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as AnswerShape from "../../domain/AnswerShape.js"
import { ConfigurationFailure, OrchestrationFailure } from "../../domain/Failure.js"
import { decodeJsonAs } from "../../domain/Json.js"
import * as Message from "../../domain/Message.js"
import * as Text from "../../domain/Text.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as InferenceRequests from "../internal/Request.js"
import type { RerankFailure, Reranker } from "../../services/Reranker.js"
import type { Request, ResponderRegistry } from "../../services/ResponderRegistry.js"
import * as Folds from "../Folds.js"
import * as Check from "./Check.js"
import * as Select from "./Select.js"
import * as Observed from "../internal/Observed.js"
import * as Timeout from "../../services/internal/Timeout.js"

/** How a query's candidates are asked, in memory or in a durable round. */
export interface Dispatch {
  /** all (default): wait for every candidate; quorum: fold once `min_quorum` valid answers are in. */
  readonly awaiting?: "all" | "quorum" | undefined
  /** Temperature for LLM responders at dial 1 (the dial scales it). Default 1. */
  readonly maxTemperature?: number | undefined
  /** See Select. */
  readonly staleAfterSecs?: number | undefined
}

export interface Options extends Dispatch {
  /** The text of a record input (`input.record_id`); the in-memory path has no record store. */
  readonly recordText?: ((recordId: string) => Effect.Effect<string, OrchestrationFailure>) | undefined
}

export interface Result {
  readonly fold: Folds.Output
  readonly selection: Select.Selection
  /** Every slot, in candidate order: answers and failures. */
  readonly responses: ReadonlyArray<Folds.Response>
  /** Usage of the LLM responders' calls. */
  readonly usage: TokenUsage.TokenUsage
}

export type SingleShotError = OrchestrationFailure | ConfigurationFailure | RerankFailure

/** Runs a checked query's single_shot in memory. */

/**
 * The JSON schema of an answer shape, made once per shape object: every LLM
 * responder of a query asks with the same one, and the request's settings check
 * remembers an object that passed by identity.
 */
const jsonSchemas = new WeakMap<object, ReturnType<typeof AnswerShape.jsonSchemaOf>>()
const jsonSchemaOf = (shape: Parameters<typeof AnswerShape.jsonSchemaOf>[0]) => {
  const known = jsonSchemas.get(shape)
  if (known !== undefined) return known
  const made = AnswerShape.jsonSchemaOf(shape)
  jsonSchemas.set(shape, made)
  return made
}

export const run: (
  checked: Check.Checked,
  options?: Options
) => Effect.Effect<Result, SingleShotError, ResponderRegistry | Reranker> = Observed.fn("SingleShot.run")(function* (
  checked: Check.Checked,
  options: Options = {}
) {
  const input = yield* Check.inputText(
    checked.input,
    options.recordText,
    (recordId) => `this runner has no record store to read ${recordId} from`
  )
  const calls = checked.budget?.calls
  const topK = calls === undefined ? checked.topK : Math.min(checked.topK, calls)
  const selection = yield* Select.select(checked.responders, {
    query: input,
    topK,
    maxLatencySecs: checked.maxLatencySecs,
    staleAfterSecs: options.staleAfterSecs
  })
  // the run's state in plain variables: each candidate's fiber updates it in the step that sees its answer
  const usage: Array<TokenUsage.TokenUsage> = []
  const answered = new Map<number, Folds.Response>()
  let valid = 0
  const quorum = options.awaiting === "quorum" ? yield* Deferred.make<void>() : undefined

  // a chain of steps: a responder that answers at once costs what its answer does (issue 13)
  const dispatch = (candidate: Select.Candidate): Effect.Effect<void> =>
    Effect.flatMap(
      askWithin(candidate, input, checked, options, (u) => void usage.push(u)),
      (outcome) => {
        const response = slot(candidate, outcome)
        answered.set(candidate.index, response)
        if (response.outcome._tag === "Answered" && Either.isRight(checked.shape.check(AnswerShape.answerOf(response.outcome.body)))) {
          valid++
          if (quorum !== undefined && valid >= checked.minQuorum) return Deferred.succeed(quorum, undefined)
        }
        return Effect.void
      }
    )

  const all = Effect.forEach(selection.candidates, dispatch, { concurrency: "unbounded", discard: true })
  if (quorum !== undefined) yield* Effect.raceFirst(all, Deferred.await(quorum))
  else yield* all

  const responses = selection.candidates.map((candidate) =>
    Option.getOrElse(Option.fromNullable(answered.get(candidate.index)), () =>
      slot(candidate, Either.left("interrupted: the quorum was met before it answered")))
  )
  if (valid < checked.minQuorum) {
    return yield* OrchestrationFailure.noConsensus(
      `only ${valid} of ${responses.length} responders gave a valid answer; min_quorum is ${checked.minQuorum}`,
      {
        details: {
          valid,
          minQuorum: checked.minQuorum,
          missing: responses.flatMap((r) =>
            r.outcome._tag === "Failed" ? [{ responder: r.responder, problem: Text.excerpt(r.outcome.problem, 160) }] : []
          )
        }
      }
    )
  }
  const fold = yield* Folds.run(checked.fold, responses)
  return { fold, selection, responses, usage: TokenUsage.combineAll(usage) }
})

const slot = (candidate: Select.Candidate, outcome: Either.Either<unknown, string>): Folds.Response => {
  const fields = {
    responder: candidate.responder.id,
    responderIndex: candidate.index,
    kind: candidate.responder.kind,
    recordId: `${candidate.responder.id}#1`
  }
  return Either.match(outcome, {
    onLeft: (problem) => Folds.failed({ ...fields, problem }),
    onRight: (body) => Folds.answered({ ...fields, body })
  })
}

const failureText = (failure: { readonly code: string; readonly message: string }) => `${failure.code}: ${Text.excerpt(failure.message, 200)}`

/**
 * `ask` within the candidate's deadline (its max latency): the body, or what went wrong, a missed deadline
 * included, never a failure. The deadline is one started fiber, not a race of two (internal/Timeout).
 * The durable patterns' CALLs ask through it too.
 */
export const askWithin = (
  candidate: Select.Candidate,
  input: string,
  checked: Check.Checked,
  options: Options,
  onUsage: (usage: TokenUsage.TokenUsage) => void
): Effect.Effect<Either.Either<unknown, string>> =>
  Effect.either(Timeout.timeoutFail(
    ask(candidate, input, checked, options, onUsage),
    Duration.seconds(candidate.maxLatencySecs),
    () => `no answer within ${candidate.maxLatencySecs} s`
  ))

/**
 * One call to one candidate: its body, or what went wrong, as text.
 * `onUsage` is told the usage of an LLM responder's reply, in the step that receives it.
 */
export const ask = (
  candidate: Select.Candidate,
  input: string,
  checked: Check.Checked,
  options: Options,
  onUsage: (usage: TokenUsage.TokenUsage) => void
): Effect.Effect<unknown, string> => {
  const responder = candidate.responder
  const predicate = candidate.predicate.predicate
  const capability = predicate.kind === "pattern" || predicate.kind === "system" ? predicate.capability : undefined
  const request: Request = capability === undefined ? { input } : { input, capability }
  switch (responder.kind) {
    case "pattern": {
      const fn = capability === undefined ? undefined : responder.capabilities[capability]
      if (fn === undefined) return Effect.fail(`pattern ${responder.id} has no capability ${capability ?? "(none asked)"}`)
      return Effect.try({ try: () => fn(request), catch: (e) => `the pattern function threw: ${Text.excerpt(Text.messageOf(e), 200)}` })
    }
    case "system":
      return Effect.mapError(responder.handle(request), failureText)
    case "actor":
      return Effect.fail("a human responder answers through a durable slot; the in-memory single_shot has none")
    case "llm": {
      const temperature = checked.dial === undefined ? undefined : checked.dial * (options.maxTemperature ?? 1)
      // messages built here, not validated again; the settings checked (the schema once per answer shape)
      const inference = InferenceRequests.make(
        [
          Message.system(
            `Answer in JSON following the schema. Optionally add "_confidence" (0 to 1) and "_rationale".`
          ),
          Message.user(input)
        ],
        [],
        { schema: jsonSchemaOf(checked.query.answer_shape), ...(temperature === undefined ? {} : { temperature }) }
      )
      return Effect.matchEffect(responder.engine.infer(inference), {
        onFailure: (failure) => Effect.fail(failureText(failure)),
        onSuccess: (result) => {
          onUsage(result.usage)
          return Either.mapLeft(
            decodeJsonAs(Schema.Unknown, result.content, { notJson: "the answer is not JSON", wrongShape: "the answer is not JSON" }),
            failureText
          )
        }
      })
    }
  }
}
