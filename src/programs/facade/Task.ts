/**
 * Mode task: the request broken into tasks by the analyzer (or the task list it
 * brings, run without analysis), then run by the task Orchestrator with the
 * facade's task processors (by default `infer`: the engine answers the task's
 * description, with its dependencies' outputs as context).
 *
 * The answer carries the whole OrchestratorResult as `orchestration`; its
 * structured output is every completed task's output by id, its content that as
 * JSON, its token usage every inference the request caused (the analyzer's and
 * the processors', as the facade records them). When a task
 * failed or was skipped the stop reason is "incomplete": the
 * failures are data of the orchestration, each typed, not the response's error.
 * A failure before any task runs (the analysis, an unknown processor, a cycle) is
 * the response's error, as in every mode.
 */
import * as Effect from "effect/Effect"
import * as Message from "../../domain/Message.js"
import { isComplete } from "../../domain/Task.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import { Engine, InferenceRequest } from "../../services/Engine.js"
import type * as Lifecycle from "../Lifecycle.js"
import * as Orchestrator from "../Orchestrator.js"
import * as TaskProcessor from "../orchestrator/TaskProcessor.js"
import * as XmlTaskParser from "../orchestrator/XmlTaskParser.js"
import type * as Check from "./Check.js"
import type { Environment } from "./Environment.js"
import type { Outcome } from "./Types.js"

/** The default processor: the engine does what the description says, given the dependencies' outputs. */
export const infer = TaskProcessor.make((task, { dependencies }) =>
  Effect.flatMap(Engine, (engine) =>
    Effect.map(
      engine.infer(
        new InferenceRequest({
          messages: [
            Message.system("Do the task below. Reply with the result only."),
            Message.user(
              Object.keys(dependencies).length === 0
                ? task.description
                : `${task.description}\n\nResults of earlier tasks:\n${
                  Object.entries(dependencies).map(([id, output]) => `- ${id}: ${JSON.stringify(output)}`).join("\n")
                }`
            )
          ]
        })
      ),
      (result) => result.content
    ))
)

/** Analyzes (unless the request brings its tasks), plans and runs the tasks. */
export const run = (env: Environment, checked: Check.Task, tracker: Lifecycle.Tracker) =>
  Effect.gen(function* () {
    const { request, work } = checked
    const settings = request.task
    yield* tracker.transition("PLAN", work._tag === "Given" ? "task list provided" : "analyzer")
    const orchestrator = yield* Orchestrator.make({
      processors: env.options.taskProcessors ?? { infer },
      parser: settings?.parser === "xml" ? XmlTaskParser.make() : undefined,
      scheduling: settings?.scheduling,
      failurePolicy: settings?.failurePolicy,
      maxConcurrent: settings?.maxConcurrent,
      analyzer: {
        ...env.options.taskAnalyzer,
        ...(request.hints.maxTokens === undefined ? {} : { maxTokens: request.hints.maxTokens }),
        ...(request.hints.temperature === undefined ? {} : { temperature: request.hints.temperature })
      }
    }).pipe(Effect.provideService(Engine, checked.engine))
    yield* tracker.transition("PREPARE", `processors ${orchestrator.processorTypes.join(", ")}`)
    yield* tracker.transition("EXECUTE", "running tasks")
    const result = work._tag === "Given"
      ? yield* orchestrator.execute(work.tasks)
      : yield* orchestrator.process(work.user.content)
    const outputs = Object.fromEntries(result.completed.map((t) => [t.id, t.output]))
    const content = JSON.stringify(outputs)
    yield* tracker.transition("VALIDATE", `${result.completed.length} of ${result.metadata.taskCount} tasks completed`)
    return {
      content,
      structuredOutput: outputs,
      usage: result.metadata.analyzerUsage ?? TokenUsage.empty,
      stopReason: isComplete(result) ? "finish" : "incomplete",
      orchestration: result
    } satisfies Outcome
  })
