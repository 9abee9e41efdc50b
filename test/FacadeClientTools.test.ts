/**
 * The facade's chat mode with the caller's own tools (SystemRequest.clientTools):
 * a call to one comes back as pendingToolCalls with stopReason "tool_calls"; a
 * request ending with the tool results continues, statelessly (the history in
 * the request) or in a stored session; toolChoice names are checked at INIT.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SystemRequest } from "../src/domain/System.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Facade from "../src/programs/Facade.js"
import { add } from "./support/tools.js"

const weather = {
  name: "weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

const request = (fields: Record<string, unknown>) =>
  Schema.decodeUnknownSync(SystemRequest)({ mode: "chat", clientTools: [weather], ...fields })

const base = (script: ReadonlyArray<ScriptedEngine.Step>) =>
  Layer.mergeAll(ScriptedEngine.layer(script), Registry.layer([add]), Constraint.layer, Observe.eventLogMemory)

describe("Facade chat with client tools", () => {
  it.effect("returns the client call pending, and a request ending with its result continues the turn", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const first = yield* system.run(request({ messages: [{ role: "user", content: "Weather in Paris?" }] }))
      expect(first.error).toBeUndefined()
      expect(first.stopReason).toBe("tool_calls")
      expect(first.pendingToolCalls?.map((c) => [c.id, c.name, c.arguments])).toEqual([["c1", "weather", { city: "Paris" }]])
      expect(first.toolCallsMade).toEqual([])

      const second = yield* system.run(
        request({
          messages: [
            { role: "user", content: "Weather in Paris?" },
            { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "weather", arguments: { city: "Paris" } }] },
            { role: "tool", toolCallId: "c1", name: "weather", content: "rain" }
          ]
        })
      )
      expect(second.error).toBeUndefined()
      expect(second.content).toBe("It rains.")
      expect(second.stopReason).toBe("finish")
      const sent = (yield* ScriptedEngine.requests)[1]!.messages
      expect(sent.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool"].slice(sent.length === 4 ? 0 : 1))
      expect(sent.at(-1)!.content).toBe("rain")
    }).pipe(
      Effect.provide(
        base([
          ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Paris" } }]),
          ScriptedEngine.reply("It rains.")
        ])
      )
    ))

  it.effect("continues in a stored session: the request's tool result answers the call the session waits on", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const first = yield* system.run(request({ sessionId: "s1", messages: [{ role: "user", content: "Oslo?" }] }))
      expect(first.stopReason).toBe("tool_calls")
      const second = yield* system.run(
        request({
          sessionId: "s1",
          messages: [
            { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "weather", arguments: { city: "Oslo" } }] },
            { role: "tool", toolCallId: "c1", name: "weather", content: "snow" }
          ]
        })
      )
      expect(second.error).toBeUndefined()
      expect(second.content).toBe("Snow.")
      // a result for a call the session is not waiting on is the caller's mistake
      const stray = yield* system.run(
        request({
          sessionId: "s1",
          messages: [
            { role: "user", content: "again" },
            { role: "assistant", content: "", toolCalls: [{ id: "zz", name: "weather", arguments: { city: "Oslo" } }] },
            { role: "tool", toolCallId: "zz", name: "weather", content: "snow" }
          ]
        })
      )
      expect(stray.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(stray.error?.message).toContain('"zz"')
    }).pipe(
      Effect.provide(
        base([
          ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Oslo" } }]),
          ScriptedEngine.reply("Snow.")
        ])
      )
    ))

  it.effect("INIT refuses tool results that answer no call of the message before them, an unknown toolChoice, and clientTools outside chat", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const stray = yield* system.run(
        request({
          messages: [
            { role: "user", content: "q" },
            { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "weather", arguments: {} }] },
            { role: "tool", toolCallId: "c1", name: "weather", content: "ok" },
            { role: "assistant", content: "and?" },
            { role: "tool", toolCallId: "c1", name: "weather", content: "again" }
          ]
        })
      )
      expect(stray.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(stray.error?.message).toContain("messages.4")
      const choice = yield* system.run(request({ messages: [{ role: "user", content: "q" }], toolChoice: { name: "nope" } }))
      expect(choice.error?.code).toBe("CONFIG_INVALID_REQUEST")
      expect(choice.error?.details).toMatchObject({ field: "toolChoice.name" })
      const required = yield* system.run(
        request({ clientTools: [], tools: [], messages: [{ role: "user", content: "q" }], toolChoice: "required" })
      )
      expect(required.error).toBeUndefined() // the registered add is offered
      const nothing = yield* Facade.make().pipe(
        Effect.flatMap((s) =>
          s.run(request({ clientTools: [], messages: [{ role: "user", content: "q" }], toolChoice: "required" }))
        ),
        Effect.provide(Registry.layer([]))
      )
      expect(nothing.error?.details).toMatchObject({ field: "toolChoice" })
      const structured = yield* system.run(
        request({ mode: "structured", output: { schema: { type: "object" } }, messages: [{ role: "user", content: "q" }] })
      )
      expect(structured.error?.details).toMatchObject({ field: "clientTools" })
      expect(yield* ScriptedEngine.requests).toHaveLength(2) // the one request that was admitted
    }).pipe(Effect.provide(base([ScriptedEngine.toolCalls([{ id: "s1", name: "add", arguments: { a: 1, b: 2 } }]), ScriptedEngine.reply("3")]))))
})
