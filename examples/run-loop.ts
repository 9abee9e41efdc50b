/**
 * The run loop: a transcript in, a stop reason and the whole transcript out.
 *
 *   npx tsx examples/run-loop.ts                   # on the bundled model
 *   PAGANTIC_MODEL_PATH=/path/to/model.gguf npx tsx examples/run-loop.ts
 *
 * The run carries an internal note (kept in the transcript, never sent to the
 * engine), a token budget, and an abort signal wired to Ctrl-C; its events are
 * printed as they come. `RunLoop.react()` or `RunLoop.structured(schema)` in
 * place of the default strategy change how the model is asked, not the loop.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { Calculator, type Engine, InProcessToolRegistry, Message, RunLoop } from "pagantic"
import { LlamaEngine } from "pagantic/llama"

export const program = (abort?: AbortSignal) =>
  Effect.gen(function* () {
    const note = yield* RunLoop.RunMessage.internal("asked by the example; the engine never sees this")
    const result = yield* RunLoop.run([note, Message.user("What is 12 plus 7?")], {
      maxIterations: 4,
      budget: { tokens: 4_000 },
      request: { temperature: 0, maxTokens: 128 },
      parallelTools: false,
      ...(abort === undefined ? {} : { abort }),
      onEvent: (event) => {
        switch (event._tag) {
          case "ToolCallRequested":
            return Console.log(`model asks: ${event.call.name}(${JSON.stringify(event.call.arguments)})`)
          case "ToolResultReady":
            return Console.log(`tool says: ${event.record.result}`)
          default:
            return Effect.void
        }
      }
    })
    yield* Console.log(`answer: ${Option.getOrElse(result.output, () => "(none)")}`)
    yield* Console.log(`stopped: ${result.stopReason} after ${result.iterations} model call(s), ${result.usage.totalTokens} tokens`)
    yield* Console.log(`transcript: ${result.messages.map((m) => m.role).join(" -> ")}`)
    return result
  })

/** Everything but the engine: the calculator. */
export const AppLive = InProcessToolRegistry.layer([Calculator.calculator])

export const MainLive = (engine: Layer.Layer<Engine.Engine, unknown>) => Layer.merge(AppLive, engine)

if (import.meta.url === `file://${process.argv[1]}`) {
  const controller = new AbortController()
  process.once("SIGINT", () => controller.abort())
  NodeRuntime.runMain(program(controller.signal).pipe(Effect.provide(MainLive(LlamaEngine.layerConfig()))))
}
