import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AppLive, program } from "../examples/agent-loop.js"
import * as FirstProgram from "../examples/first-program.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"

describe("examples/agent-loop", () => {
  it.effect("runs the tool loop with the calculator on a swapped-in engine", () =>
    Effect.gen(function* () {
      const turn = yield* program
      expect(turn.content).toBe("The answer is 19.")
      expect(turn.toolCalls).toHaveLength(1)
      expect(turn.toolCalls[0]).toMatchObject({ name: "calculator", result: "19", isError: false })
      const requests = yield* ScriptedEngine.requests
      expect(requests[0]!.tools.map((t) => t.name)).toEqual(["calculator"])
      expect(requests[0]!.temperature).toBe(0)
    }).pipe(
      Effect.provide(
        Layer.merge(
          AppLive,
          ScriptedEngine.layer([
            ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "12 + 7" } }]),
            ScriptedEngine.reply("The answer is 19.")
          ])
        )
      )
    )
  )
})

describe("examples/first-program (the README's)", () => {
  it.effect("runs the weather tool through the AgentLoop on the scripted engine", () =>
    Effect.gen(function* () {
      const turn = yield* FirstProgram.program
      expect(turn.content).toBe("It is sunny in Paris.")
      expect(turn.stopReason).toBe("finish")
      expect(turn.toolCalls[0]).toMatchObject({ name: "weather", result: "Sunny in Paris, 21°C" })
    }).pipe(Effect.provide(FirstProgram.Test))
  )
})
