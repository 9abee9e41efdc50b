/**
 * Agents: a unit that takes a record of inputs and answers a record of outputs,
 * with the tools it can use (capabilities) and a memory of its own.
 *
 * Interceptors are plain functions that wrap `execute`: given the next
 * `execute` (and who the agent is), they return a new one. `withInterceptors`
 * applies them so that the first one is the outermost (it sees the call first and
 * the answer last). Four are built in: `timeout` (CANCELLED_TIMEOUT past a
 * duration), `retry` (re-run retryable failures on a Schedule), `validate` (input
 * and output held to Schemas) and `events` (agent.execute.start / end in the
 * EventLog). TaskProcessor.fromAgent makes any agent a task processor.
 */
import * as Clock from "effect/Clock"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Ref from "effect/Ref"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type { Failure } from "../../domain/Failure.js"
import { ConstraintFailure, OrchestrationFailure } from "../../domain/Failure.js"
import * as Issues from "../../domain/Issues.js"
import type { ToolDefinition } from "../../domain/Message.js"
import * as Deadline from "../internal/Deadline.js"
import * as OrchestrateEvent from "../internal/OrchestrateEvent.js"

/** What an agent is given and what it answers. */
export type AgentInput = Readonly<Record<string, unknown>>
export type AgentOutput = Readonly<Record<string, unknown>>

/** An agent's own key-value store. */
export interface Memory {
  readonly store: (key: string, value: unknown) => Effect.Effect<void>
  readonly retrieve: (key: string) => Effect.Effect<Option.Option<unknown>>
  readonly delete: (key: string) => Effect.Effect<void>
  readonly list: Effect.Effect<ReadonlyArray<string>>
  readonly clear: Effect.Effect<void>
}

/** A Memory held in a Ref, for one process. */
export const inMemory: Effect.Effect<Memory> = Effect.map(
  Ref.make<ReadonlyMap<string, unknown>>(new Map()),
  (ref): Memory => ({
    store: (key, value) => Ref.update(ref, (m) => new Map(m).set(key, value)),
    retrieve: (key) => Effect.map(Ref.get(ref), (m) => (m.has(key) ? Option.some(m.get(key)) : Option.none())),
    delete: (key) =>
      Ref.update(ref, (m) => {
        const next = new Map(m)
        next.delete(key)
        return next
      }),
    list: Effect.map(Ref.get(ref), (m) => [...m.keys()]),
    clear: Ref.set(ref, new Map())
  })
)

/** The call an interceptor wraps. */
export type Execute<R = never> = (input: AgentInput) => Effect.Effect<AgentOutput, Failure, R>

export interface Agent<R = never> {
  readonly id: string
  /** The kind of agent, for events and routing. */
  readonly type: string
  readonly execute: Execute<R>
  /** The tools this agent may use. */
  readonly capabilities: ReadonlyArray<ToolDefinition>
  readonly memory: Memory
}

/** Who an interceptor is wrapping. */
export interface AgentInfo {
  readonly id: string
  readonly type: string
}

/** Wraps an agent's `execute`. */
export type Interceptor = <R>(next: Execute<R>, agent: AgentInfo) => Execute<R>

/** Builds an agent (capabilities default to none, memory to a fresh in-memory one). */
export const make = <R>(options: {
  readonly id: string
  readonly type: string
  readonly execute: Execute<R>
  readonly capabilities?: ReadonlyArray<ToolDefinition> | undefined
  readonly memory?: Memory | undefined
}): Effect.Effect<Agent<R>> =>
  Effect.map(options.memory === undefined ? inMemory : Effect.succeed(options.memory), (memory) => ({
    id: options.id,
    type: options.type,
    execute: options.execute,
    capabilities: options.capabilities ?? [],
    memory
  }))

/** The agent with `interceptors` around its `execute`; the first is the outermost. */
export const withInterceptors = <R>(agent: Agent<R>, ...interceptors: ReadonlyArray<Interceptor>): Agent<R> => ({
  ...agent,
  execute: interceptors.reduceRight<Execute<R>>((next, interceptor) => interceptor(next, agent), agent.execute)
})

// ---------------------------------------------------------------------------
// Built-in interceptors
// ---------------------------------------------------------------------------

/** Past `duration`, the call is interrupted and fails with CANCELLED_TIMEOUT. */
export const timeout = (duration: Duration.DurationInput): Interceptor => (next, agent) => (input) =>
  Deadline.bound(duration, (d) => `agent "${agent.id}" exceeded its ${d} deadline`, { agent: agent.id })(next(input))

/** A failure marked retryable re-runs the call on `schedule`; any other ends it. */
export const retry = (schedule: Schedule.Schedule<unknown>): Interceptor => (next) => (input) =>
  Effect.retry(next(input), { schedule, while: (error: Failure) => error.retryable })

/**
 * The input decoded by `input` before the call (a mismatch is
 * ORCHESTRATION_STEP_MISMATCH: the caller sent the wrong thing, never retried)
 * and the output by `output` after it (a mismatch is a retryable
 * CONSTRAINT_SCHEMA_INVALID: another answer may fit). The decoded values are what
 * passes on.
 */
export const validate = <I extends AgentInput = AgentInput, O extends AgentOutput = AgentOutput>(schemas: {
  readonly input?: Schema.Schema<I, any, never> | undefined
  readonly output?: Schema.Schema<O, any, never> | undefined
}): Interceptor => (next, agent) => (input) =>
  Effect.gen(function* () {
    const checkedInput: AgentInput = schemas.input === undefined ? input : yield* Either.mapLeft(
      Schema.decodeUnknownEither(schemas.input, { errors: "all" })(input),
      (error) =>
        OrchestrationFailure.stepMismatch(`agent "${agent.id}": the input does not match its schema: ${problems(error)}`, {
          details: { agent: agent.id, side: "input" }
        })
    )
    const output = yield* next(checkedInput)
    if (schemas.output === undefined) return output
    const checkedOutput: AgentOutput = yield* Either.mapLeft(
      Schema.decodeUnknownEither(schemas.output, { errors: "all" })(output),
      (error) =>
        ConstraintFailure.schemaInvalid(`agent "${agent.id}": the output does not match its schema`, {
          violations: ParseResult.ArrayFormatter.formatErrorSync(error).map((i) =>
            `${Issues.formatPath(i.path)}: ${i.message}`
          ),
          details: { agent: agent.id, side: "output" }
        })
    )
    return checkedOutput
  })

const problems = (error: ParseResult.ParseError): string =>
  ParseResult.ArrayFormatter.formatErrorSync(error).map((i) => `${Issues.formatPath(i.path)}: ${i.message}`).join("; ")

/** `agent.execute.start` and `agent.execute.end` (with success, duration and the failure's code) in the EventLog. */
export const events: Interceptor = (next, agent) => (input) =>
  Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis
    yield* record(agent, "agent.execute.start", { inputKeys: Object.keys(input) })
    return yield* next(input).pipe(
      Effect.tapBoth({
        onSuccess: (output) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            record(agent, "agent.execute.end", { success: true, outputKeys: Object.keys(output) }, { durationMs: now - started })),
        onFailure: (error) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            record(agent, "agent.execute.end", { success: false, code: error.code }, {
              durationMs: now - started,
              error: error.message
            }))
      })
    )
  })

const record = (
  agent: AgentInfo,
  action: string,
  data: Record<string, unknown>,
  extra?: OrchestrateEvent.Extra
): Effect.Effect<void> => OrchestrateEvent.record(action, { agent: agent.id, agentType: agent.type, ...data }, extra)
