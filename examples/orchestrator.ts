/**
 * The task orchestrator: a request broken into tasks by a model, run by
 * processors in dependency order.
 *
 *   PAGANTIC_MODEL_PATH=/path/to/model.gguf npx tsx examples/orchestrator.ts
 *
 * The analyzer (the model behind the Engine) answers a TaskList as JSON,
 * constrained to the registered processor names; two sentiment tasks and a sum
 * run first (concurrently), then a report that reads their outputs. The program
 * asks only for services (Engine, Constraint); its test runs it on a
 * ScriptedEngine (test/OrchestratorExample.test.ts). The bundled model was
 * taught one family ("classify these quoted reviews and add up these numbers")
 * with the processors `sentiment` and `calculator` only, not this `report`: on
 * it, use `BundledTasks.processors(engine)` and `BundledTasks.analyzer` from
 * `pagantic/llama` (as `pagantic task` and `npm start` do; its analyzer copies
 * each quoted review through the grammar, `AnalyzerConfig.quoted`).
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Calculator, type Engine, Failure, JsonConstraint, Orchestrator, TaskProcessor } from "pagantic"
import { LlamaEngine } from "pagantic/llama"

/** A word-list classifier: enough to show the flow without a second model. */
export const sentiment = TaskProcessor.make((task) =>
  Effect.succeed(/\b(great|love|good|excellent)\b/i.test(task.description) ? "positive" : "negative")
)

/** Evaluates the task's `expression` metadata with pagantic's calculator. */
export const calculator = TaskProcessor.make((task) =>
  Calculator.evaluate(task.metadata.expression ?? "").pipe(
    Effect.mapError((e) =>
      Failure.ToolFailure.executionFailed("calculator", `task "${task.id}": ${e.message}`, { retryable: false })
    )
  )
)

/** Writes one line from the outputs of the tasks it depends on. */
export const report = TaskProcessor.make((_task, { dependencies }) =>
  Effect.succeed(
    Object.entries(dependencies)
      .map(([id, output]) => `${id}=${String(output)}`)
      .join(", ")
  )
)

export const program = Effect.gen(function* () {
  const orchestrator = yield* Orchestrator.make({
    processors: { sentiment, calculator, report },
    maxConcurrent: 3,
    defaultTimeout: "30 seconds",
    retry: { maxAttempts: 2, backoffMultiplier: 2 },
    analyzer: { considerations: ["Independent tasks run in parallel", "The report depends on every other task"] }
  })
  const result = yield* orchestrator.process(
    "Classify these reviews: 'great battery' and 'the screen cracked'. Add up 12 and 30. Then report."
  )
  yield* Console.log(`analysis: ${result.analysis}`)
  yield* Console.log(`phases: ${result.metadata.phases.map((p) => `[${p.join(", ")}]`).join(" -> ")}`)
  for (const task of result.completed) yield* Console.log(`${task.id}: ${JSON.stringify(task.output)}`)
  for (const task of result.failed) yield* Console.log(`${task.id} failed: ${task.error.code} ${task.error.message}`)
  for (const task of result.skipped) yield* Console.log(`${task.id} skipped: ${task.message}`)
  return result
})

/** With the real engine, configured from the environment. */
export const MainLive = (engine: Layer.Layer<Engine.Engine, unknown>) => Layer.merge(JsonConstraint.layer, engine)

if (import.meta.url === `file://${process.argv[1]}`) {
  NodeRuntime.runMain(program.pipe(Effect.provide(MainLive(LlamaEngine.layerConfig()))))
}
