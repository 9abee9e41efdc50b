/**
 * RedundantLoop: N-version inference with voting.
 *
 * The same structured request runs as N replicas (default 3) and a voting strategy
 * picks the answer, with a confidence that says how strongly the replicas agree.
 * Replicas run concurrently, bounded by `concurrency` (default: all at once; 1 runs
 * them one after another, only when asked). The context is retrieved once from the
 * prompt and shared by every replica.
 *
 * A replica that fails (an engine error, output that no repair can save) does not
 * sink the call: its failure is kept and the vote runs over the valid candidates as
 * long as at least `quorum` of them remain (default: a majority of N). Below the
 * quorum the failure is typed: when no replica produced a candidate, the first
 * replica's own failure (InferenceFailure or ConstraintFailure, so its category and
 * `retryable` say what to do); when some did but too few, ORCHESTRATION_NO_CONSENSUS
 * naming each failure. Voting itself may refuse (UnanimityVoting). Voting replaces
 * retry: a replica gets one attempt (repair included) unless `retry` says otherwise.
 * With `validate` (rule checks, e.g. a Validator's), a replica whose value breaks a
 * rule is a failed replica (its ValidationFailure kept): it does not vote. When no
 * replica is left the call fails ORCHESTRATION_NO_CONSENSUS naming each failure, so
 * the categories below stay the pattern's own.
 *
 * It can fail with InferenceFailure, ConstraintFailure, OrchestrationFailure and
 * Cancellation (the `timeout`).
 *
 * `runStream` is the same run as a Stream of its progress: each replica as it
 * finishes (valid or failed), the vote once cast, then `Finished` with the result;
 * a failed run fails the stream after the replicas it saw finish.
 *
 * The vote is recorded in the EventLog as an `orchestrate` Custom event `vote`:
 * the strategy, quorum, winner and confidence, the sampling, and each replica's
 * answer (or its failure's code and message); below the quorum, with the error
 * instead of a winner.
 *
 * Seeds: with `seed`, replica i's requests carry `seed + i`, so replicas differ
 * from each other and a vote replays exactly; without, the engine draws its own.
 *
 * Sampling: on an engine with its own `sampleMany` (LlamaEngine decodes what
 * the samples share once), replicas started together (concurrency N) whose
 * first requests are identical but for the seed are drawn by one `sampleMany`
 * call ("tree"); otherwise, and for every later request (repairs, retries),
 * each replica makes its own calls ("independent"). Both draw from the same
 * distribution.
 */
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Schedule from "effect/Schedule"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { Cancellation, ConstraintFailure, InferenceFailure, ValidationFailure } from "../domain/Failure.js"
import { OrchestrationFailure } from "../domain/Failure.js"
import { ValidationResult } from "../domain/System.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { Constraint } from "../services/Constraint.js"
import type * as Engine from "../services/Engine.js"
import { Engine as EngineTag } from "../services/Engine.js"
import * as EventStream from "./internal/EventStream.js"
import * as Observed from "./internal/Observed.js"
import * as ReplicaSampling from "./internal/ReplicaSampling.js"
import * as OrchestrateEvent from "./internal/OrchestrateEvent.js"
import * as Lifecycle from "./Lifecycle.js"
import * as RetryPolicy from "../services/RetryPolicy.js"
import * as SpecializedLoop from "./SpecializedLoop.js"
import * as Structured from "./Structured.js"
import type { VotingStrategy } from "./Voting.js"
import { MajorityVoting } from "./Voting.js"
import * as Local from "../services/internal/Local.js"
import * as Construct from "../domain/Construct.js"

export const defaultReplicas = 3

export interface Options<A> extends Omit<Structured.Options<A>, "validate" | "strictValidation" | "sessionKey" | "retry" | "onRejected"> {
  /** Told of each rejected reply of a replica (a schema, grammar or rule failure). */
  readonly onRejected?: ((rejection: Structured.Rejection<ValidationFailure>) => Effect.Effect<void>) | undefined
  /** A replica's own retries (default none: voting replaces retry). */
  readonly retry?: Schedule.Schedule<unknown, ConstraintFailure | ValidationFailure> | undefined
  /** Rule checks on each replica's value; a replica that breaks one does not vote. */
  readonly validate?: ((value: A) => Effect.Effect<void, ValidationFailure>) | undefined
  readonly systemPrompt?: string | undefined
  /** Replicas to run. Default 3 (at least 1). */
  readonly n?: number | undefined
  /** Replicas running at once. Default: all N. */
  readonly concurrency?: number | undefined
  /** Valid candidates needed for a vote, clamped to [1, N]. Default: a majority of N. */
  readonly quorum?: number | undefined
  /** Default MajorityVoting. */
  readonly voting?: VotingStrategy | undefined
  /** Deadline for the whole call; past it every replica is interrupted and the call fails with CANCELLED_TIMEOUT. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Replica i's requests carry `seed + i` (default: none, the engine draws its own). */
  readonly seed?: number | undefined
}

/** How the replicas were drawn: by one `Engine.sampleMany` call, or each by its own calls. */
export type Sampling = ReplicaSampling.Sampling

/** The outcome of one replica. */
export type Replica<A> =
  | { readonly _tag: "Valid"; readonly replica: number; readonly result: Structured.Result<A> }
  | { readonly _tag: "Failed"; readonly replica: number; readonly failure: InferenceFailure | ConstraintFailure | ValidationFailure }

export interface Result<A> {
  /** The winning candidate (compact JSON). */
  readonly content: string
  /** The winning candidate's validated value. */
  readonly value: A
  /** The vote's support for the winner, in [0, 1]. */
  readonly confidence: number
  /** Replica index of the winner. */
  readonly winner: number
  /** The valid candidates that were voted on, in replica order. */
  readonly candidates: ReadonlyArray<string>
  /** Every replica's outcome, in replica order. */
  readonly replicas: ReadonlyArray<Replica<A>>
  /** Usage of every reply of every replica (rejected ones too): tokens summed, tokens/s averaged, the largest context window. */
  readonly usage: TokenUsage.TokenUsage
  /** Valid and failed replicas, repair attempts, and the failed replicas' violations. */
  readonly validation: ValidationResult
  /** How the replicas' first replies were drawn. */
  readonly sampling: Sampling
}

/** What a RedundantLoop run can fail with. */
export type RedundantLoopError = InferenceFailure | ConstraintFailure | OrchestrationFailure | Cancellation

/** The progress of a streamed run; the stream ends after `Finished`. */
export type Progress<A> =
  | { readonly _tag: "ReplicaFinished"; readonly outcome: Replica<A> }
  | {
    readonly _tag: "VoteCast"
    readonly strategy: string
    readonly winner: number
    readonly confidence: number
    readonly candidates: ReadonlyArray<string>
  }
  | { readonly _tag: "Finished"; readonly result: Result<A> }

export interface RedundantLoop<A> {
  readonly run: (prompt: string) => Effect.Effect<Result<A>, RedundantLoopError>
  readonly runStream: (prompt: string) => Stream.Stream<Progress<A>, RedundantLoopError>
}

/** Where progress goes; undefined when nobody streams it. */
type Emit<A> = ((progress: Progress<A>) => Effect.Effect<void>) | undefined

/** A majority of n. */
export const majorityOf = (n: number): number => Math.floor(n / 2) + 1

const describeFailure = (r: Extract<Replica<unknown>, { _tag: "Failed" }>) => ({
  replica: r.replica,
  code: r.failure.code,
  message: r.failure.message
})

/** Each replica as the `vote` event records it: its answer, or its failure's code and message. */
const describeReplica = (r: Replica<unknown>) =>
  r._tag === "Valid" ? { replica: r.replica, answer: r.result.content } : describeFailure(r)

/** Runs N replicas of one structured request and votes. Requires Engine and Constraint. */
export const run: <A>(
  prompt: string,
  options: Options<A>
) => Effect.Effect<Result<A>, RedundantLoopError, Engine.Engine | Constraint> = <A>(prompt: string, options: Options<A>) =>
  Observed.span("RedundantLoop.run")(runWith(prompt, options, undefined))

/** The run as a stream of its progress: replicas as they finish, the vote, then `Finished`. */
export const runStream = <A>(
  prompt: string,
  options: Options<A>
): Stream.Stream<Progress<A>, RedundantLoopError, Engine.Engine | Constraint> =>
  EventStream.fromEmitting(
    (emit) => runWith(prompt, options, emit).pipe(Observed.span("RedundantLoop.runStream")),
    (result): Progress<A> => ({ _tag: "Finished", result })
  )

/** The steps of a run, one generator function for every call (a generator function made per call costs V8 new maps). */
function* runSteps<A>(prompt: string, options: Options<A>, emit: Emit<A>, n: number, quorum: number, concurrency: number, voting: VotingStrategy) {
  const messages = yield* SpecializedLoop.prepare(prompt, options.systemPrompt)
  yield* Lifecycle.transition("PREPARE", "EXECUTE", 1, `${n} replicas, ${concurrency} at once, quorum ${quorum}, ${voting.name} voting`)
  const engine = yield* EngineTag
  const draw = yield* ReplicaSampling.make(engine, n, options.seed, concurrency >= n)
  // every reply's usage, in the order replies came (replicas add to it in one step each)
  const spent: Array<TokenUsage.TokenUsage> = []
  const onUsage = options.onUsage
  // the caller's options with the replica's own over them
  const replicaOptions: Structured.Options<A, ValidationFailure> = {
    ...options,
    // a replica breaking a rule is a failed replica: it never votes with a partial result
    strictValidation: true,
    retry: options.retry ?? RetryPolicy.none,
    onUsage: onUsage === undefined
      ? (usage: TokenUsage.TokenUsage) => Effect.sync(() => void spent.push(usage))
      : (usage: TokenUsage.TokenUsage) => Effect.zipRight(Effect.sync(() => void spent.push(usage)), onUsage(usage))
  }
  // One replica: its outcome as a value (a failure; a defect or an interruption stays one), the sampler
  // told it ended when it gathers first replies (however the replica ended), then the outcome emitted.
  const settled = (replica: number): Effect.Effect<Replica<A>, never, Engine.Engine | Constraint> => {
    const view = draw.engineFor(replica)
    const call = Structured.run(messages, replicaOptions)
    const outcome = Effect.match(
      view === engine ? call : Local.provideService(call, EngineTag, view),
      {
        onFailure: (failure: InferenceFailure | ConstraintFailure | ValidationFailure): Replica<A> => ({ _tag: "Failed", replica, failure }),
        onSuccess: (result: Structured.Result<A>): Replica<A> => ({ _tag: "Valid", replica, result })
      }
    )
    return draw.gathers ? Effect.ensuring(outcome, draw.ended(replica)) : outcome
  }
  const replicaOf = emit === undefined
    ? settled
    : (replica: number) => Effect.tap(settled(replica), (outcome) => emit({ _tag: "ReplicaFinished", outcome }))
  // A replica's own moves are events only: the request's tracker sees the loop as a whole (set once, for
  // all of them: the replicas' fibers inherit it).
  const replicas = yield* Local.locally(
    Effect.forEach(Array.from({ length: n }, (_, i) => i), replicaOf, { concurrency }),
    Lifecycle.currentTracker,
    Option.none()
  )
  const valid = replicas.filter((r): r is Extract<Replica<A>, { _tag: "Valid" }> => r._tag === "Valid")
  const failed = replicas.filter((r): r is Extract<Replica<A>, { _tag: "Failed" }> => r._tag === "Failed")
  const sampling = yield* draw.sampling
  yield* Lifecycle.transition("EXECUTE", "VALIDATE", 1, `${valid.length} of ${n} replicas valid (${sampling} sampling)`)

  // below the quorum (at most n) some replica failed: the first failure is typed
  const firstFailed = failed[0]
  if (valid.length < quorum && firstFailed !== undefined) {
    yield* OrchestrateEvent.record(
      "vote",
      { strategy: voting.name, quorum, sampling, replicas: replicas.map(describeReplica) },
      { error: `only ${valid.length} of ${n} replicas produced a valid candidate; the quorum is ${quorum}` }
    )
    // a broken rule is not the pattern's to emit: no replica left by the rules is no consensus
    if (valid.length === 0 && firstFailed.failure._tag !== "ValidationFailure") return yield* firstFailed.failure
    return yield* new OrchestrationFailure({
      code: "ORCHESTRATION_NO_CONSENSUS",
      retryable: false,
      message: `only ${valid.length} of ${n} replicas produced a valid candidate; the quorum is ${quorum}`,
      details: { replicas: n, valid: valid.length, quorum, failures: failed.map(describeFailure) },
      cause: firstFailed.failure
    })
  }

  const candidates = valid.map((r) => r.result.content)
  const vote = yield* voting.vote(candidates)
  const winner = valid[vote.winner]
  if (winner === undefined) {
    return yield* Effect.dieMessage(
      `${voting.name} voting returned candidate ${vote.winner} of ${candidates.length}: a bug in the strategy`
    )
  }
  if (emit !== undefined) yield* emit({ _tag: "VoteCast", strategy: voting.name, winner: winner.replica, confidence: vote.confidence, candidates })
  yield* OrchestrateEvent.record("vote", () => ({
    strategy: voting.name,
    quorum,
    winner: winner.replica,
    confidence: vote.confidence,
    sampling,
    replicas: replicas.map(describeReplica)
  }))
  const repairAttempts =
    valid.reduce((k, r) => k + r.result.repairAttempts, 0) +
    failed.filter((r) => r.failure.details.repaired === true || r.failure.details.repairAttempted === true).length
  const result: Result<A> = {
    content: winner.result.content,
    value: winner.result.value,
    confidence: vote.confidence,
    winner: winner.replica,
    candidates,
    replicas,
    usage: TokenUsage.combineAll(spent),
    sampling,
    validation: Construct.unchecked(ValidationResult, {
      passed: valid.length,
      failed: failed.length,
      repairAttempts,
      violations: failed.flatMap((r) =>
        r.failure._tag === "ConstraintFailure"
          ? r.failure.violations.map((v) => `replica ${r.replica}: ${v}`)
          : r.failure._tag === "ValidationFailure"
          ? (r.failure.failedRules.length > 0 ? r.failure.failedRules : [r.failure.message]).map((v) => `replica ${r.replica}: ${v}`)
          : []
      )
    }) // counts and the replicas' own violations: nothing to check again
  }
  return result
}

const runWith = <A>(
  prompt: string,
  options: Options<A>,
  emit: Emit<A>
): Effect.Effect<Result<A>, RedundantLoopError, Engine.Engine | Constraint> => Effect.suspend(() => {
  const n = Math.max(1, Math.floor(options.n ?? defaultReplicas))
  const quorum = Math.min(n, Math.max(1, Math.floor(options.quorum ?? majorityOf(n))))
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? n))
  const voting = options.voting ?? MajorityVoting

  const body = Effect.gen(() => runSteps(prompt, options, emit, n, quorum, concurrency, voting))
  return SpecializedLoop.withTimeout(options.timeout, "the redundant call")(body)
})

/** A RedundantLoop with its options and services fixed. */
export const make = <A>(options: Options<A>): Effect.Effect<RedundantLoop<A>, never, Engine.Engine | Constraint> =>
  Effect.map(Effect.context<Engine.Engine | Constraint>(), (context: Context.Context<Engine.Engine | Constraint>) => ({
    run: (prompt: string) => Local.provide(run(prompt, options), context),
    runStream: (prompt: string) => Stream.provideContext(runStream(prompt, options), context)
  }))
