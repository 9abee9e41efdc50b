import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Live from "../src/adapters/Live.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import { PaganticSystem } from "../src/programs/Facade.js"
import { EventLog } from "../src/services/EventLog.js"
import * as Runs from "../src/services/Runs.js"

const Echo = Runs.define({
  name: "echo",
  payload: Schema.Struct({ text: Schema.String }),
  success: Schema.Struct({ text: Schema.String }),
  program: (payload) => Effect.succeed(payload)
})

describe("adapters/Live", () => {
  it.effect("wires the facade to one engine and one event log shared with the caller", () =>
    Effect.gen(function* () {
      const system = yield* PaganticSystem
      const response = yield* system.runUnknown({
        requestId: "r1",
        mode: "chat",
        messages: [{ role: "user", content: "What is 6 times 7?" }]
      })
      expect(response.error).toBeUndefined()
      expect(response.toolCallsMade[0]).toMatchObject({ name: "calculator", result: "42" })
      expect(response.content).toBe("42")
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      expect(events.filter((e) => e._tag === "ToolEnd")).toHaveLength(1)
      expect(events.every((e) => e.correlation.requestId === "r1")).toBe(true)
    }).pipe(
      Effect.provide(
        Live.layer({
          engine: ScriptedEngine.layer([
            ScriptedEngine.toolCalls([{ name: "calculator", arguments: { expression: "6 * 7" } }]),
            ScriptedEngine.reply("42")
          ])
        })
      )
    )
  )

  it.effect("with runs, the layer's type provides Runs: the caller starts a run on the same store the facade uses", () =>
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const id = yield* runs.start(Echo, { text: "hi" })
      expect((yield* runs.await(id)).result).toEqual({ text: "hi" })
      expect((yield* runs.list()).map((r) => r.id)).toContain(id)
    }).pipe(
      Effect.provide(Live.layer({ engine: ScriptedEngine.layer([]), tools: [], runs: InMemoryRuns.layer({ definitions: [Echo] }) }))
    ))
})

