/**
 * PlanExecutor: multi-step typed pipelines (seed 01).
 *
 * A plan is a list of steps; each step's `type` selects a handler. A handler
 * declares the Schema of its input and of its output, so a step that receives the
 * wrong input fails at that step with ORCHESTRATION_STEP_MISMATCH (the parse
 * issues and their paths in `details.issues`), not with a crash later. A step
 * without explicit input takes the output of what it depends on: by default the
 * previous step (the documents' pipeline); `dependsOn: []` makes a root, and
 * several dependencies give the step an object `{ [dependency]: output }`.
 * Independent steps run concurrently, at most `concurrency` at once.
 *
 * Before anything runs, the plan is checked: every step type has a handler, the
 * dependency graph has unique names, known dependencies and no cycle, and the
 * PlanPolicy holds (max steps, allowed types, linear only). A rejected plan fails
 * the `execute` effect with an OrchestrationFailure (`details.rule` names the
 * rule). Once steps run, `execute` always succeeds with a PlanOutcome: `Completed`
 * with every step's result, or `Failed` with the completed steps and the typed
 * failure of the step that failed (the first one, when steps run concurrently;
 * its running siblings are interrupted). A defect in a handler (a bug) is not
 * turned into a value here: it propagates, for the facade to label.
 *
 * Per step: a retryable ConstraintFailure or ValidationFailure (VALIDATE rejected
 * the output) re-runs the step on a Schedule (EXECUTE -> VALIDATE -> EXECUTE);
 * `PlanPolicy.timeoutPerStep` bounds a step, retries included, and a step past it
 * fails with CANCELLED_TIMEOUT (a Cancellation: the step was cut off, the plan is
 * not at fault). Interruption: interrupting the fiber running `execute` interrupts
 * the running steps at once (Effect semantics, resources freed); to stop between
 * steps and keep the partial results, pass `stop`: once it completes no further
 * step starts, running steps finish, and the outcome is `Failed` with
 * CANCELLED_SIGNAL at the first step that did not start.
 *
 * Lifecycle: inside a tracked request (see Lifecycle) each completed step is
 * counted (ExecutionState.totalSteps, lastStep), and a rejected attempt reports
 * EXECUTE -> VALIDATE, its re-run VALIDATE -> EXECUTE (which counts the attempt).
 *
 * Events (when an EventLog is present): `plan.trace` once, then
 * `plan.step.start` / `plan.step.end` per step, each carrying `stepName` in its
 * correlation context, as do all events the step's own work records.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as DateTime from "effect/DateTime"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Ref from "effect/Ref"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"
import * as Event from "../domain/Event.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import type { ConstraintFailure, Failure, ValidationFailure } from "../domain/Failure.js"
import { Cancellation, OrchestrationFailure } from "../domain/Failure.js"
import * as Issues from "../domain/Issues.js"
import * as Message from "../domain/Message.js"
import * as Text from "../domain/Text.js"
import * as Plan from "../domain/Plan.js"
import { ContextProvider, Retriever } from "../services/Context.js"
import { Engine, InferenceRequest, InferenceResult } from "../services/Engine.js"
import { recordEvent, withCorrelation, withMetrics } from "../services/Observe.js"
import { renderContext } from "../services/PromptProvider.js"
import { Candidate, Reranker, RerankInput } from "../services/Reranker.js"
import { ToolRegistry } from "../services/ToolRegistry.js"
import type { Rule } from "../services/Validator.js"
import { retryPolicy, ValidationReport, Validator } from "../services/Validator.js"
import * as Spans from "./internal/Spans.js"
import * as Lifecycle from "./Lifecycle.js"

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

/** What a handler knows about the step it runs. */
export interface StepContext {
  readonly step: Plan.Step
  /** 1 on the first attempt, incremented on every retry. */
  readonly attempt: number
}

/** Runs steps of one type: typed input in, typed output out. `R` is what it needs; `make` provides it. */
export interface StepHandler<I = any, O = any, R = any> {
  readonly type: string
  readonly input: Schema.Schema<I, any, never>
  readonly output: Schema.Schema<O, any, never>
  readonly run: (input: I, context: StepContext) => Effect.Effect<O, Failure, R>
  /** Whether a retryable ConstraintFailure/ValidationFailure re-runs the step. Default true. */
  readonly retry?: boolean | undefined
}

/** Defines a handler for a step type. */
export const handler = <I, II, O, OI, E extends Failure, R>(
  type: string,
  options: {
    readonly input: Schema.Schema<I, II, never>
    readonly output: Schema.Schema<O, OI, never>
    readonly run: (input: I, context: StepContext) => Effect.Effect<O, E, R>
    readonly retry?: boolean
  }
): StepHandler<I, O, R> => ({
  type,
  input: options.input,
  output: options.output,
  run: options.run,
  retry: options.retry
})

/**
 * Wraps any Effect program as a step handler: an AgentLoop chat, a
 * SpecializedLoop or RedundantLoop call, a custom pipeline.
 *
 *   PlanExecutor.fromProgram("research", Schema.String, Schema.String,
 *     (prompt) => Effect.flatMap(AgentLoop.make(), (agent) => agent.chat(prompt)).pipe(Effect.map((r) => r.content)))
 */
export const fromProgram = <I, II, O, OI, E extends Failure, R>(
  type: string,
  input: Schema.Schema<I, II, never>,
  output: Schema.Schema<O, OI, never>,
  program: (input: I, context: StepContext) => Effect.Effect<O, E, R>
): StepHandler<I, O, R> => handler(type, { input, output, run: program })

/**
 * Adds a check after the handler runs: a ValidationFailure or ConstraintFailure
 * it raises is VALIDATE rejecting the output, and (when retryable) re-runs the step.
 */
export const withValidation = <I, O, R, R2>(
  self: StepHandler<I, O, R>,
  check: (output: O, context: StepContext) => Effect.Effect<void, ValidationFailure | ConstraintFailure, R2>
): StepHandler<I, O, R | R2> => ({
  ...self,
  retry: true,
  run: (input, context) => Effect.tap(self.run(input, context), (output) => check(output, context))
})

/** Validates the handler's output text with the Validator in context (its rules, or `rules`). */
export const validatedBy = <I, O, R>(
  self: StepHandler<I, O, R>,
  text: (output: O) => string,
  rules?: ReadonlyArray<Rule>
): StepHandler<I, O, R | Validator> =>
  withValidation(self, (output) => Effect.flatMap(Validator, (v) => Effect.asVoid(v.validate(text(output), rules))))

// ---------------------------------------------------------------------------
// Step data (the plan-level IR)
// ---------------------------------------------------------------------------

/** A query with scored candidates: what `retrieve` and `rerank` produce, and `rerank` and `infer` accept. */
export class CandidateSet extends Schema.Class<CandidateSet>("CandidateSet")({
  query: Schema.String,
  candidates: Schema.Array(Candidate)
}) {}

/** A query with ephemeral context messages: what `retrieve` produces over a ContextProvider. */
export class ContextSet extends Schema.Class<ContextSet>("ContextSet")({
  query: Schema.String,
  messages: Schema.Array(Message.Message)
}) {}

/** An output that passed validation, with its report (the pass rate is the confidence). */
export class Validated extends Schema.Class<Validated>("Validated")({
  content: Schema.String,
  report: ValidationReport
}) {}

/** What a `tool` step takes: a tool name and arguments (the call id defaults to the step name). */
export const ToolStepInput = Schema.Struct({
  name: Schema.String,
  arguments: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), {
    default: () => ({})
  }),
  id: Schema.optional(Schema.String)
})

/** What a `tool` step produces. */
export const ToolStepOutput = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  content: Schema.String,
  value: Schema.Unknown
})

const QueryInput = Schema.Union(
  Schema.String,
  Schema.Struct({ query: Schema.String, limit: Schema.optional(Schema.Int.pipe(Schema.positive())) })
)
const queryOf = (input: typeof QueryInput.Type) =>
  typeof input === "string" ? { query: input, limit: undefined } : input

/** What an `infer` step accepts: a prompt, a full request, candidates for a query, or context for a query. */
export const InferInput = Schema.Union(Schema.String, InferenceRequest, CandidateSet, ContextSet)

const textOf = Schema.Union(Schema.String, InferenceResult, Schema.Struct({ content: Schema.String }))

// ---------------------------------------------------------------------------
// Built-in handlers
// ---------------------------------------------------------------------------

export interface InferOptions {
  /** Prepended as a system message when the input is not a full request. */
  readonly systemPrompt?: string
  readonly maxTokens?: number
  readonly temperature?: number
}

/** `infer`: runs the Engine. A string is a user prompt; candidates or context become a RAG prompt. */
export const infer = (options: InferOptions = {}): StepHandler<typeof InferInput.Type, InferenceResult, Engine> =>
  handler("infer", {
    input: InferInput,
    output: InferenceResult,
    run: (input) =>
      Effect.flatMap(Engine, (engine) => {
        const model = Effect.map(engine.modelInfo, (info) => info.name)
        const call = (request: InferenceRequest) =>
          Effect.map(Spans.inference(model, request, engine.infer(request), { recordMetrics: true }), ([result]) => result)
        if (input instanceof InferenceRequest) return call(input)
        const system = options.systemPrompt === undefined ? [] : [Message.system(options.systemPrompt)]
        const messages = typeof input === "string"
          ? [...system, Message.user(input)]
          : input instanceof ContextSet
          ? [...system, ...input.messages, Message.user(input.query)]
          : [
            ...system,
            ...(input.candidates.length === 0 ? [] : [Message.system(renderContext(input.candidates))]),
            Message.user(input.query)
          ]
        return call(
          new InferenceRequest({
            messages,
            ...(options.maxTokens === undefined ? {} : { maxTokens: options.maxTokens }),
            ...(options.temperature === undefined ? {} : { temperature: options.temperature })
          })
        )
      })
  })

/** `tool`: runs a tool of the ToolRegistry (narrowed by `allow`). */
export const tool = (
  options: { readonly allow?: ReadonlyArray<string> } = {}
): StepHandler<typeof ToolStepInput.Type, typeof ToolStepOutput.Type, ToolRegistry> =>
  handler("tool", {
    input: ToolStepInput,
    output: ToolStepOutput,
    run: (input, { attempt, step }) =>
      Effect.flatMap(ToolRegistry, (registry) => {
        const call = new Message.ToolCall({ id: input.id ?? step.name, name: input.name, arguments: input.arguments })
        return Effect.map(
          registry.execute(call, options.allow === undefined ? {} : { allow: options.allow }).pipe(
            Spans.tool(call, Option.none(), attempt)
          ),
          (out) => ({ id: out.call.id, name: out.call.name, content: out.content, value: out.value })
        )
      })
  })

/** `retrieve` over the Retriever: a query (or `{query, limit}`) in, scored candidates out. */
export const retrieve = (
  options: { readonly limit?: number } = {}
): StepHandler<typeof QueryInput.Type, CandidateSet, Retriever> =>
  handler("retrieve", {
    input: QueryInput,
    output: CandidateSet,
    run: (input) =>
      Effect.flatMap(Retriever, (retriever) => {
        const { limit, query } = queryOf(input)
        return Effect.map(
          retriever.retrieve(query, limit ?? options.limit ?? 10),
          (chunks) =>
            new CandidateSet({
              query,
              candidates: chunks.map((c) =>
                new Candidate({ content: c.content, score: c.score, source: c.source, metadata: c.metadata })
              )
            })
        )
      })
  })

/** `retrieve` over the ContextProvider: a query in, ephemeral context messages out. */
export const retrieveContext = (): StepHandler<typeof QueryInput.Type, ContextSet, ContextProvider> =>
  handler("retrieve", {
    input: QueryInput,
    output: ContextSet,
    run: (input) =>
      Effect.flatMap(ContextProvider, (provider) => {
        const { query } = queryOf(input)
        return Effect.map(provider.build(query), (messages) => new ContextSet({ query, messages }))
      })
  })

/** `rerank`: candidates for a query in, the best `topK` out, ordered by the Reranker. */
export const rerank = (
  options: { readonly topK?: number } = {}
): StepHandler<RerankInput, CandidateSet, Reranker> =>
  handler("rerank", {
    input: RerankInput,
    output: CandidateSet,
    run: (input) =>
      Effect.flatMap(Reranker, (reranker) =>
        Effect.map(
          reranker.rerank(
            input.topK === undefined && options.topK !== undefined
              ? new RerankInput({ ...input, topK: options.topK })
              : input
          ),
          (candidates) => new CandidateSet({ query: input.query, candidates })
        ))
  })

/**
 * `validate`: text (or an inference result, or `{content}`) in, Validated out when
 * every rule passes; VALIDATION_RULE_FAILED otherwise. Validation is deterministic,
 * so this step is never re-run; to re-run the step that produced the text, wrap
 * that step with `validatedBy` instead.
 */
export const validate = (
  options: { readonly rules?: ReadonlyArray<Rule> } = {}
): StepHandler<typeof textOf.Type, Validated, Validator> =>
  handler("validate", {
    input: textOf,
    output: Validated,
    retry: false,
    run: (input) =>
      Effect.flatMap(Validator, (validator) => {
        const content = typeof input === "string" ? input : input.content
        return Effect.map(validator.validate(content, options.rules), (report) => new Validated({ content, report }))
      })
  })

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/** One step that ran to completion. */
export interface StepResult {
  readonly name: string
  readonly type: string
  /** The decoded input the handler received. */
  readonly input: unknown
  /** The handler's output. */
  readonly output: unknown
  /** The output encoded by the handler's output schema: JSON-ready. */
  readonly encoded: unknown
  readonly attempts: number
  /** Clock times, epoch milliseconds. */
  readonly startedAt: number
  readonly finishedAt: number
}

export type PlanOutcome = Data.TaggedEnum<{
  /** Every step completed; `output` is the last step's output. */
  Completed: {
    readonly steps: ReadonlyArray<StepResult>
    readonly output: unknown
    readonly trace: Plan.PlanTrace
  }
  /** A step failed (or the run was stopped); `completed` are the steps that finished, in plan order. */
  Failed: {
    readonly completed: ReadonlyArray<StepResult>
    readonly failedStep: string
    readonly error: Failure
    readonly trace: Plan.PlanTrace
  }
}>
export const PlanOutcome = Data.taggedEnum<PlanOutcome>()

/** The steps that completed, whatever the outcome. */
export const completedSteps = (outcome: PlanOutcome): ReadonlyArray<StepResult> =>
  outcome._tag === "Completed" ? outcome.steps : outcome.completed

/** The combined token usage of every step whose output carries one (inference results, loop results). */
export const usageOf = (steps: ReadonlyArray<StepResult>): TokenUsage.TokenUsage =>
  TokenUsage.combineAll(
    steps.flatMap((s) => {
      const output = s.output
      if (typeof output !== "object" || output === null || !("usage" in output)) return []
      return output.usage instanceof TokenUsage.TokenUsage ? [output.usage] : []
    })
  )

/** Each step's encoded (JSON-ready) output by step name: the plan's structured output. */
export const encodedOutputs = (steps: ReadonlyArray<StepResult>): Readonly<Record<string, unknown>> =>
  Object.fromEntries(steps.map((s) => [s.name, s.encoded]))

export interface ExecuteOptions {
  /** Overrides the executor's policy. */
  readonly policy?: Plan.PlanPolicy
  /** When this effect completes, no further step starts; running steps finish. */
  readonly stop?: Effect.Effect<void>
}

export interface Options<H extends ReadonlyArray<StepHandler>> {
  /** One handler per step type; a later handler for the same type replaces an earlier one. */
  readonly handlers: H
  /** Default policy. Default: permissive. */
  readonly policy?: Plan.PlanPolicy
  /** Independent steps run at most this many at once. Default 4. */
  readonly concurrency?: number
  /** When a step rejected by validation is re-run. Default `Validator.retryPolicy`. */
  readonly retry?: Schedule.Schedule<unknown>
}

export interface PlanExecutor {
  /** The step types this executor has handlers for. */
  readonly stepTypes: ReadonlyArray<string>
  /** The checks `execute` applies before running anything. */
  readonly check: (plan: Plan.ExecutionPlan, policy?: Plan.PlanPolicy) => Effect.Effect<void, OrchestrationFailure>
  readonly execute: (
    plan: Plan.ExecutionPlan,
    options?: ExecuteOptions
  ) => Effect.Effect<PlanOutcome, OrchestrationFailure>
}

/** The services the given handlers need. */
export type HandlersContext<H extends ReadonlyArray<StepHandler>> = H[number] extends infer X
  ? X extends StepHandler<any, any, infer R> ? R : never
  : never

// ---------------------------------------------------------------------------
// Implementation
// ---------------------------------------------------------------------------


const mismatch = (
  step: Plan.Step,
  side: "input" | "output",
  error: ParseResult.ParseError
): OrchestrationFailure =>
  new OrchestrationFailure({
    code: "ORCHESTRATION_STEP_MISMATCH",
    retryable: false,
    message: `step "${step.name}" (${step.type}): ${side} does not match the handler's schema: ${
      Issues.describe(error, `the step's ${side}`, side).join("; ")
    }`,
    details: {
      step: step.name,
      type: step.type,
      side,
      issues: ParseResult.ArrayFormatter.formatErrorSync(error).map((i) => ({
        path: Issues.formatPath(i.path),
        message: Text.excerpt(i.message, 200)
      }))
    }
  })

/** Accepts a value already of the handler's type (a chained output), else decodes it (JSON input). */
const decodeInput = <I>(
  schema: Schema.Schema<I, any, never>,
  value: unknown
): Either.Either<I, ParseResult.ParseError> => {
  const typed = Schema.validateEither(schema)(value)
  if (Either.isRight(typed)) return typed
  return Schema.decodeUnknownEither(schema, { errors: "all" })(value)
}

const isStepRetryable = (error: Failure): boolean =>
  (error._tag === "ConstraintFailure" || error._tag === "ValidationFailure") && error.retryable

/** Counts a completed step on the request's lifecycle tracker, when there is one. */
const stepCompleted = (name: string): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(Lifecycle.currentTracker), (tracker) =>
    Option.isSome(tracker) ? tracker.value.stepCompleted(name) : Effect.void)

class StepFailed extends Data.TaggedError("StepFailed")<{ readonly step: string; readonly error: Failure }> {}

/** Builds an executor over the handlers; their services are taken from the context once, here. */
export const make = <const H extends ReadonlyArray<StepHandler>>(
  options: Options<H>
): Effect.Effect<PlanExecutor, never, HandlersContext<H>> =>
  Effect.map(Effect.context<HandlersContext<H>>(), (context) =>
    // the span the executor is made in is not the parent of its steps' spans
    build(options, Context.omit(Tracer.ParentSpan)(context) as Context.Context<HandlersContext<H>>))

/** Builds an executor and runs one plan. */
export const execute = <const H extends ReadonlyArray<StepHandler>>(
  plan: Plan.ExecutionPlan,
  options: Options<H> & ExecuteOptions
): Effect.Effect<PlanOutcome, OrchestrationFailure, HandlersContext<H>> =>
  Effect.flatMap(make(options), (executor) => executor.execute(plan, options))

const build = <H extends ReadonlyArray<StepHandler>>(
  options: Options<H>,
  context: Context.Context<HandlersContext<H>>
): PlanExecutor => {
  const handlers = new Map<string, StepHandler>(options.handlers.map((h) => [h.type, h]))
  const concurrency = Math.max(1, options.concurrency ?? 4)
  const schedule = options.retry ?? retryPolicy

  const check = (plan: Plan.ExecutionPlan, policy: Plan.PlanPolicy = options.policy ?? Plan.permissive) =>
    Effect.gen(function* () {
      const unknown = plan.steps.find((s) => !handlers.has(s.type))
      if (unknown !== undefined) {
        return yield* new OrchestrationFailure({
          code: "ORCHESTRATION_STEP_MISMATCH",
          retryable: false,
          message: `step "${unknown.name}" has type "${unknown.type}", which has no handler`,
          details: { rule: "unknownStepType", step: unknown.name, type: unknown.type, known: [...handlers.keys()] }
        })
      }
      yield* Plan.check(plan, policy)
    })

  const runStep = (
    step: Plan.Step,
    raw: unknown,
    policy: Plan.PlanPolicy
  ): Effect.Effect<StepResult, Failure> =>
    Effect.gen(function* () {
      yield* Spans.annotate({ [Spans.Pagantic.stepType]: step.type })
      yield* recordEvent((base) =>
        new Event.Custom({
          ...base,
          layer: "orchestrate",
          action: "plan.step.start",
          data: { step: step.name, type: step.type }
        })
      )
      const h = handlers.get(step.type)!
      const input = yield* Either.mapLeft(decodeInput(h.input, raw), (e) => mismatch(step, "input", e))
      const startedAt = yield* Clock.currentTimeMillis
      const attempts = yield* Ref.make(0)
      const retries = h.retry !== false
      const attempt = Effect.flatMap(Ref.updateAndGet(attempts, (n) => n + 1), (n) =>
        Effect.zipRight(
          n > 1 ? Lifecycle.transition("VALIDATE", "EXECUTE", n, `retry step "${step.name}"`) : Effect.void,
          Effect.provide(h.run(input, { step, attempt: n }), context).pipe(
            Effect.tapError((error) =>
              retries && isStepRetryable(error)
                ? Lifecycle.transition("EXECUTE", "VALIDATE", n, `step "${step.name}": ${error.code}: ${error.message}`)
                : Effect.void
            )
          )
        ))
      const retried = retries ? Effect.retry(attempt, { schedule, while: isStepRetryable }) : attempt
      const timeout = policy.timeoutPerStep
      const output = yield* timeout === undefined ? retried : Effect.timeoutFail(retried, {
        duration: timeout,
        onTimeout: () =>
          Cancellation.timeout(`step "${step.name}" exceeded its ${Duration.format(timeout)} deadline`, {
            step: step.name,
            timeoutMs: Duration.toMillis(timeout)
          })
      })
      const encoded = yield* Either.mapLeft(
        Schema.encodeUnknownEither(h.output)(output),
        (e) => mismatch(step, "output", e)
      )
      return {
        name: step.name,
        type: step.type,
        input,
        output,
        encoded,
        attempts: yield* Ref.get(attempts),
        startedAt,
        finishedAt: yield* Clock.currentTimeMillis
      }
    }).pipe(
      Effect.tapBoth({
        onFailure: (error) =>
          recordEvent((base) =>
            new Event.Custom({
              ...base,
              layer: "orchestrate",
              action: "plan.step.end",
              data: { step: step.name, type: step.type, success: false, code: error.code },
              error: error.message
            })
          ),
        onSuccess: (r) =>
          Effect.zipRight(
            recordEvent((base) =>
              new Event.Custom({
                ...base,
                layer: "orchestrate",
                action: "plan.step.end",
                durationMs: r.finishedAt - r.startedAt,
                data: { step: step.name, type: step.type, success: true, attempts: r.attempts }
              })
            ),
            Effect.zipRight(
              Effect.annotateCurrentSpan(Spans.Pagantic.attempt, r.attempts),
              withMetrics((m) => m.recordLatency("plan_step", r.finishedAt - r.startedAt))
            )
          )
      }),
      withCorrelation({ stepName: step.name, causedBy: step.name }),
      Effect.withSpan("PlanExecutor.step", {
        attributes: { step: step.name, type: step.type, [Spans.Pagantic.stepName]: step.name }
      })
    )

  const executePlan = Effect.fn("PlanExecutor.execute")(function* (
    plan: Plan.ExecutionPlan,
    executeOptions?: ExecuteOptions
  ) {
    const policy = executeOptions?.policy ?? options.policy ?? Plan.permissive
    yield* check(plan, policy)
    const trace = plan.trace ?? new Plan.PlanTrace({
      plannerId: "manual",
      rationale: "",
      createdAt: yield* DateTime.now,
      stepCount: plan.steps.length
    })
    yield* recordEvent((base) =>
      new Event.Custom({
        ...base,
        layer: "orchestrate",
        action: "plan.trace",
        data: {
          plannerId: trace.plannerId,
          rationale: trace.rationale,
          createdAt: DateTime.formatIso(trace.createdAt),
          stepCount: trace.stepCount
        }
      })
    )

    const outputs = new Map<string, Deferred.Deferred<unknown>>()
    for (const step of plan.steps) outputs.set(step.name, yield* Deferred.make<unknown>())
    const results = yield* Ref.make<ReadonlyMap<string, StepResult>>(new Map())
    const semaphore = yield* Effect.makeSemaphore(concurrency)
    const stopped = yield* Deferred.make<void>()

    const task = (step: Plan.Step, index: number) =>
      Effect.gen(function* () {
        const deps = Plan.dependenciesOf(plan, index)
        const upstream = yield* Effect.forEach(deps, (d) => Deferred.await(outputs.get(d)!))
        const raw = step.input !== undefined
          ? step.input
          : deps.length === 0
          ? undefined
          : deps.length === 1
          ? upstream[0]
          : Object.fromEntries(deps.map((d, k) => [d, upstream[k]]))
        yield* semaphore.withPermits(1)(Effect.gen(function* () {
          if (yield* Deferred.isDone(stopped)) {
            return yield* new StepFailed({
              step: step.name,
              error: Cancellation.signal(`stopped before step "${step.name}"`, { step: step.name })
            })
          }
          const result = yield* Effect.mapError(runStep(step, raw, policy), (error) =>
            new StepFailed({ step: step.name, error }))
          yield* Ref.update(results, (m) => new Map(m).set(step.name, result))
          yield* stepCompleted(step.name)
          yield* Deferred.succeed(outputs.get(step.name)!, result.output)
        }))
      })

    const run = Effect.forEach(plan.steps, task, { concurrency: "unbounded", discard: true })
    const stop = executeOptions?.stop
    // The watcher is forked before any step starts, and ends with the run.
    const watched = stop === undefined
      ? run
      : Effect.scoped(Effect.zipRight(Effect.forkScoped(Effect.zipRight(stop, Deferred.succeed(stopped, undefined))), run))
    const exit = yield* Effect.either(watched)
    const done = yield* Ref.get(results)
    const inOrder = plan.steps.flatMap((s) => Option.toArray(Option.fromNullable(done.get(s.name))))
    if (Either.isLeft(exit)) {
      return PlanOutcome.Failed({
        completed: inOrder,
        failedStep: exit.left.step,
        error: exit.left.error,
        trace
      })
    }
    const last = plan.steps[plan.steps.length - 1]
    return PlanOutcome.Completed({
      steps: inOrder,
      output: last === undefined ? undefined : done.get(last.name)?.output,
      trace
    })
  })

  return { stepTypes: [...handlers.keys()], check, execute: executePlan }
}
