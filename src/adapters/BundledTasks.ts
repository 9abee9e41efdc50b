/**
 * Task mode on the bundled model: the two processors its analyzer names and the
 * analyzer configuration it was taught.
 *
 * - `sentiment`: the task's description is a review; it is classified through
 *   Structured.run with the JSON schema and instruction the model was trained on,
 *   and the output is `{"sentiment": ...}`.
 * - `calculator`: the task's `metadata.expression` is evaluated by the calculator
 *   (no model); the output is the number. A task without an expression, or with
 *   one the calculator refuses, fails with TOOL_EXECUTION_FAILED (not retried).
 *
 * Give them to the facade (`Facade.Options.taskProcessors`, `taskAnalyzer`) or to
 * `Orchestrator.make`.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { ToolFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import * as Constraint from "../layers/JsonConstraint.js"
import { BUNDLED_ANALYZER, BUNDLED_SENTIMENT_SCHEMA } from "../layers/llama/PaganticChatWrapper.js"
import * as Calculator from "../layers/tools/Calculator.js"
import type { AnalyzerConfig } from "../programs/orchestrator/Analyzer.js"
import * as TaskProcessor from "../programs/orchestrator/TaskProcessor.js"
import * as Structured from "../programs/Structured.js"
import * as RetryPolicy from "../services/RetryPolicy.js"
import type { Engine } from "../services/Engine.js"

/** The instruction the bundled model classifies reviews under. */
export const SENTIMENT_INSTRUCTION = "Classify the sentiment of the review."

/** The analyzer configuration for the bundled model (a TaskList fits in 768 tokens). */
export const analyzer: AnalyzerConfig = { ...BUNDLED_ANALYZER, maxTokens: 768, temperature: 0, retry: RetryPolicy.none }

/** The bundled model's processors on `engine` (a built engine layer: providing it per task is cheap). */
export const processors = (engine: Layer.Layer<Engine>) => {
  const services = Layer.merge(engine, Constraint.layer)
  const sentiment = TaskProcessor.make((task) =>
    Structured.run([Message.system(SENTIMENT_INSTRUCTION), Message.user(task.description)], {
      schema: BUNDLED_SENTIMENT_SCHEMA,
      temperature: 0,
      maxTokens: 24
    }).pipe(
      Effect.map((result) => result.value),
      Effect.provide(services)
    )
  )
  const calculator = TaskProcessor.make((task) => {
    const expression = task.metadata["expression"]
    return typeof expression !== "string" || expression.trim() === ""
      ? Effect.fail(
        ToolFailure.executionFailed("calculator", `task "${task.id}" has no metadata.expression to evaluate`, {
          retryable: false
        })
      )
      : Effect.mapError(Calculator.evaluate(expression), (error) =>
        ToolFailure.executionFailed("calculator", `task "${task.id}": ${error.message}`, { retryable: false }))
  })
  return { sentiment, calculator } as const
}
