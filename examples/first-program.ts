/**
 * The README's first program, kept compiling and running by test/examples.test.ts.
 *
 *   npx tsx examples/first-program.ts
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { AgentLoop, InProcessToolRegistry, ScriptedEngine, ToolRegistry } from "pagantic"
import { LlamaEngine } from "pagantic/llama"

const weather = ToolRegistry.make({
  name: "weather",
  description: "Current weather in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  timeout: "5 seconds",
  idempotent: true, // may be retried on failure
  handler: ({ city }) => Effect.succeed(`Sunny in ${city}, 21°C`)
})

export const program = Effect.gen(function* () {
  const agent = yield* AgentLoop.make({ systemPrompt: "You are helpful.", maxToolIterations: 5 })
  const turn = yield* agent.chat("What is the weather in Paris?")
  console.log(turn.content, turn.stopReason, turn.toolCalls)
  return turn
})

// real inference on a GGUF model...
export const Live = Layer.merge(InProcessToolRegistry.layer([weather]), LlamaEngine.layerConfig())
// ...or a scripted engine in a test
export const Test = Layer.merge(
  InProcessToolRegistry.layer([weather]),
  ScriptedEngine.layer([
    ScriptedEngine.toolCalls([{ name: "weather", arguments: { city: "Paris" } }]),
    ScriptedEngine.reply("It is sunny in Paris.")
  ])
)

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(program.pipe(Effect.provide(Test)))
}
