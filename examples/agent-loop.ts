/**
 * A first program: an AgentLoop with a calculator tool and an in-memory event log.
 *
 *   npx tsx examples/agent-loop.ts                 # on the bundled model
 *   PAGANTIC_MODEL_PATH=/path/to/model.gguf npx tsx examples/agent-loop.ts
 *
 * The program only asks for services (`Engine`, `ToolRegistry`, `EventLog`); which
 * engine answers is decided where it is run: the real llama.cpp engine below, a
 * ScriptedEngine in its test (test/examples.test.ts).
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AgentLoop, Calculator, type Engine, EventLog, InMemoryObserve, InProcessToolRegistry } from "pagantic"
import { LlamaEngine } from "pagantic/llama"

export const program = Effect.gen(function* () {
  const agent = yield* AgentLoop.make({ maxToolIterations: 4, temperature: 0 })
  const turn = yield* agent.chat("What is 12 plus 7?")
  yield* Console.log(`answer: ${turn.content}`)
  yield* Console.log(`stopped: ${turn.stopReason} after ${turn.inferences} inference(s)`)
  for (const call of turn.toolCalls) {
    yield* Console.log(`tool: ${call.name}(${JSON.stringify(call.arguments)}) -> ${call.result}`)
  }
  const events = yield* Effect.flatMap(EventLog.EventLog, (log) => log.events)
  yield* Console.log(`events: ${events.map((e) => e._tag).join(", ")}`)
  return turn
})

/** Everything but the engine: the tools and an event log. */
export const AppLive = Layer.mergeAll(InProcessToolRegistry.layer([Calculator.calculator]), InMemoryObserve.eventLogMemory)

/** With the real engine, configured from the environment. */
export const MainLive = (engine: Layer.Layer<Engine.Engine, unknown>) => Layer.merge(AppLive, engine)

if (import.meta.url === `file://${process.argv[1]}`) {
  NodeRuntime.runMain(program.pipe(Effect.provide(MainLive(LlamaEngine.layerConfig()))))
}
