/**
 * AgentLoop's client tools (agent/ClientTools): tools the caller runs itself are
 * offered, never run; a call to one ends the turn with the calls pending, and
 * `resume` continues with the caller's results. toolChoice and parallelToolCalls.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import * as Memory from "../src/layers/InMemoryMemory.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Tool from "../src/services/ToolRegistry.js"
import { add } from "./support/tools.js"

const weather = new Message.ToolDefinition({
  name: "weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
})

/** A registered tool that counts its runs. */
const counted = (runs: Ref.Ref<number>, name = "weather") =>
  Tool.make({
    name,
    description: "The server's own",
    parameters: Schema.Struct({ city: Schema.String }),
    handler: () => Effect.as(Ref.update(runs, (n) => n + 1), "server sunny")
  })

const setup = (steps: ReadonlyArray<ScriptedEngine.Step>, tools: ReadonlyArray<Tool.Tool<any, any>> = [add]) =>
  Layer.mergeAll(ScriptedEngine.layer(steps), Registry.layer(tools), Memory.layerMemory)

describe("AgentLoop client tools", () => {
  it.effect("a call to a client tool ends the turn with the call pending; resume answers it and the model goes on", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ clientTools: [weather] })
      const first = yield* agent.chat("Weather in Paris?")
      expect(first.stopReason).toBe("tool_calls")
      expect(first.pendingToolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([["c1", "weather", { city: "Paris" }]])
      expect(first.toolCalls).toEqual([]) // nothing ran here
      // offered: the registered tool and the client's
      const requests = yield* ScriptedEngine.requests
      expect(requests[0]!.tools.map((t) => t.name)).toEqual(["add", "weather"])
      // the history waits on the call: no placeholder answer
      expect((yield* agent.messages).map((m) => m.role)).toEqual(["user", "assistant"])

      const second = yield* agent.resume([
        new Message.ToolResult({ callId: "c1", name: "weather", content: "rain, 12 C", isError: false })
      ])
      expect(second.stopReason).toBe("finish")
      expect(second.content).toBe("It rains in Paris.")
      expect(second.pendingToolCalls).toEqual([])
      const sent = (yield* ScriptedEngine.requests)[1]!.messages
      expect(sent.map((m) => [m.role, m.content])).toEqual([
        ["user", "Weather in Paris?"],
        ["assistant", ""],
        ["tool", "rain, 12 C"]
      ])
      expect((yield* agent.messages).map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
    }).pipe(
      Effect.provide(
        setup([
          ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Paris" } }]),
          ScriptedEngine.reply("It rains in Paris.")
        ])
      )
    ))

  it.effect("a mixed turn: a registered tool runs, then the client tool's call is returned", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ clientTools: [weather] })
      const turn = yield* agent.chat("Add 2 and 3, then the weather")
      expect(turn.toolCalls.map((r) => [r.name, r.result])).toEqual([["add", "5"]])
      expect(turn.stopReason).toBe("tool_calls")
      expect(turn.pendingToolCalls.map((c) => c.name)).toEqual(["weather"])
      expect(turn.transcript.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"])
    }).pipe(
      Effect.provide(
        setup([
          ScriptedEngine.toolCalls([{ id: "s1", name: "add", arguments: { a: 2, b: 3 } }]),
          ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Oslo" } }])
        ])
      )
    ))

  it.effect("one reply calling both: the registered call runs before the turn ends, the client call waits", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ clientTools: [weather] })
      const turn = yield* agent.chat("both")
      expect(turn.toolCalls.map((r) => [r.id, r.result])).toEqual([["s1", "5"]])
      expect(turn.pendingToolCalls.map((c) => c.id)).toEqual(["c1"])
      expect(turn.transcript.map((m) => [m.role, m.content])).toEqual([
        ["user", "both"],
        ["assistant", ""],
        ["tool", "5"]
      ])
      // resume: only the waiting call is answered by the caller
      yield* agent.resume([new Message.ToolResult({ callId: "c1", name: "weather", content: "sun", isError: false })])
      const sent = (yield* ScriptedEngine.requests)[1]!.messages
      expect(sent.filter(Message.isTool).map((m) => [m.toolCallId, m.content])).toEqual([["s1", "5"], ["c1", "sun"]])
    }).pipe(
      Effect.provide(
        setup([
          ScriptedEngine.toolCalls([
            { id: "s1", name: "add", arguments: { a: 2, b: 3 } },
            { id: "c1", name: "weather", arguments: { city: "Oslo" } }
          ]),
          ScriptedEngine.reply("done")
        ])
      )
    ))

  it.effect("a client tool shadows a registered tool of the same name: it is offered once, as the caller's, and never run", () =>
    Effect.gen(function* () {
      const runs = yield* Ref.make(0)
      const [turn, requests] = yield* Effect.flatMap(AgentLoop.make({ clientTools: [weather] }), (agent) => agent.chat("Paris?")).pipe(
        Effect.zip(ScriptedEngine.requests),
        Effect.provide(
          setup([ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Paris" } }])], [counted(runs)])
        )
      )
      expect(yield* Ref.get(runs)).toBe(0)
      expect(requests[0]!.tools.map((t) => [t.name, t.description])).toEqual([["weather", "The weather in a city"]])
      expect(turn.stopReason).toBe("tool_calls")
    }))

  it.effect("resume leaves a call the caller did not answer answered 'not executed'; a stray result is a defect", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ clientTools: [weather] })
      yield* agent.chat("two cities")
      const stray = yield* Effect.exit(
        agent.resume([new Message.ToolResult({ callId: "nope", name: "weather", content: "x", isError: false })])
      )
      expect(Exit.isFailure(stray) && !Exit.isInterrupted(stray)).toBe(true)
      yield* agent.resume([new Message.ToolResult({ callId: "c2", name: "weather", content: "sun", isError: false })])
      const sent = (yield* ScriptedEngine.requests)[1]!.messages.filter(Message.isTool)
      expect(sent.map((m) => [m.toolCallId, m.isError])).toEqual([["c1", true], ["c2", false]])
      expect(sent[0]!.content).toContain("not executed")
    }).pipe(
      Effect.provide(
        setup([
          ScriptedEngine.toolCalls([
            { id: "c1", name: "weather", arguments: { city: "A" } },
            { id: "c2", name: "weather", arguments: { city: "B" } }
          ]),
          ScriptedEngine.reply("ok")
        ])
      )
    ))

  it.effect("resumeStream emits the turn's events and ends with TurnFinished", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ clientTools: [weather] })
      yield* agent.chat("Paris?")
      const events = yield* Stream.runCollect(
        agent.resumeStream([new Message.ToolResult({ callId: "c1", name: "weather", content: "sun", isError: false })])
      )
      const tags = Array.from(events, (e) => e._tag)
      expect(tags.at(-1)).toBe("TurnFinished")
      expect(tags).toContain("TextDelta")
    }).pipe(
      Effect.provide(
        setup([
          ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "Paris" } }]),
          ScriptedEngine.reply("Sunny.")
        ])
      )
    ))

  describe("toolChoice and parallelToolCalls", () => {
    it.effect("none offers no tool; a name offers only that tool", () =>
      Effect.gen(function* () {
        yield* Effect.flatMap(AgentLoop.make({ clientTools: [weather], toolChoice: "none" }), (a) => a.chat("hi"))
        yield* Effect.flatMap(AgentLoop.make({ clientTools: [weather], toolChoice: { name: "add" } }), (a) => a.chat("hi"))
        const requests = yield* ScriptedEngine.requests
        expect(requests[0]!.tools).toEqual([])
        expect(requests[1]!.tools.map((t) => t.name)).toEqual(["add"])
      }).pipe(
        Effect.provide(
          setup([
            ScriptedEngine.reply("hi"),
            ScriptedEngine.toolCalls([{ id: "s1", name: "add", arguments: { a: 1, b: 1 } }]),
            ScriptedEngine.reply("2")
          ])
        )
      ))

    it.effect("required asks again when the model answers before calling a tool", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ clientTools: [weather], toolChoice: "required" })
        const turn = yield* agent.chat("hi")
        expect(turn.stopReason).toBe("tool_calls")
        const requests = yield* ScriptedEngine.requests
        expect(requests.length).toBe(2)
        expect(requests[1]!.messages.at(-1)!.content).toContain("Use one of the tools")
      }).pipe(
        Effect.provide(
          setup([
            ScriptedEngine.reply("hello"),
            ScriptedEngine.toolCalls([{ id: "c1", name: "weather", arguments: { city: "X" } }])
          ])
        )
      ))

    it.effect("a name that is no tool is a defect when the loop is made", () =>
      Effect.gen(function* () {
        const exit = yield* Effect.exit(AgentLoop.make({ clientTools: [weather], toolChoice: { name: "nope" } }))
        expect(Exit.isFailure(exit)).toBe(true)
      }).pipe(Effect.provide(setup([]))))

    it.effect("parallelToolCalls false acts on the first call of a reply only", () =>
      Effect.gen(function* () {
        const agent = yield* AgentLoop.make({ clientTools: [weather], parallelToolCalls: false })
        const turn = yield* agent.chat("two")
        expect(turn.pendingToolCalls.map((c) => c.id)).toEqual(["c1"])
        const assistant = turn.transcript.filter(Message.isAssistant)
        expect(assistant.at(-1)!.toolCalls.map((c) => c.id)).toEqual(["c1"])
      }).pipe(
        Effect.provide(
          setup([
            ScriptedEngine.toolCalls([
              { id: "c1", name: "weather", arguments: { city: "A" } },
              { id: "c2", name: "weather", arguments: { city: "B" } }
            ])
          ])
        )
      ))
  })
})
