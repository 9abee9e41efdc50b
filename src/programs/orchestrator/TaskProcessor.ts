/**
 * TaskProcessor: what runs the tasks of one processor type.
 *
 * A processor receives the whole task (its description is the instruction, its
 * metadata the parameters) and a TaskContext: the context the orchestration was
 * called with, the outputs of the task's dependencies by id, and the attempt. It
 * answers any value (the task's output, handed to the tasks that depend on it)
 * or a typed failure; a failure marked retryable is retried on the
 * orchestrator's schedule. Processors are registered on the orchestrator by name.
 */
import * as Effect from "effect/Effect"
import type { Failure } from "../../domain/Failure.js"
import type { Task } from "../../domain/Task.js"
import type { Agent, AgentInput } from "./Agent.js"

/** What a processor knows besides its task. */
export interface TaskContext {
  /** The context the orchestration was called with. */
  readonly context: Readonly<Record<string, unknown>>
  /** The output of each dependency, by task id. */
  readonly dependencies: Readonly<Record<string, unknown>>
  /** 1 on the first attempt, incremented on every retry. */
  readonly attempt: number
}

export interface TaskProcessor<R = never> {
  readonly process: (task: Task, context: TaskContext) => Effect.Effect<unknown, Failure, R>
}

/** The services the given processors need. */
export type ProcessorsContext<P extends Readonly<Record<string, TaskProcessor<any>>>> = P[keyof P] extends infer X
  ? X extends TaskProcessor<infer R> ? R : never
  : never

/** A processor from a function. */
export const make = <R = never>(
  process: (task: Task, context: TaskContext) => Effect.Effect<unknown, Failure, R>
): TaskProcessor<R> => ({ process })

/**
 * The agent's input for a task: the description as `task`, with the task's id,
 * type, metadata, the dependencies' outputs and the orchestration context.
 */
export const agentInput = (task: Task, context: TaskContext): AgentInput => ({
  task: task.description,
  id: task.id,
  type: task.type,
  metadata: task.metadata,
  dependencies: context.dependencies,
  context: context.context
})

/** A processor that hands each task to `agent` (its input built by `input`, default `agentInput`). */
export const fromAgent = <R>(
  agent: Agent<R>,
  input: (task: Task, context: TaskContext) => AgentInput = agentInput
): TaskProcessor<R> => ({
  process: (task, context) => Effect.suspend(() => agent.execute(input(task, context)))
})
