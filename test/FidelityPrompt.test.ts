/**
 * Seeds 01-03 to the letter (issue #12), gap 8: the prompt layer and the session
 * state are used by the loops. A PromptProvider gives the system prompt of a loop
 * that has none (built each turn with the session state's values) and decides
 * where ephemeral context goes; the facade checks the provider's prompt at
 * PREPARE.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Message from "../src/domain/Message.js"
import { SystemRequest } from "../src/domain/System.js"
import * as Memory from "../src/layers/InMemoryMemory.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as TemplatePromptProvider from "../src/layers/TemplatePromptProvider.js"
import * as AgentLoop from "../src/programs/AgentLoop.js"
import * as Facade from "../src/programs/Facade.js"
import * as RedundantLoop from "../src/programs/RedundantLoop.js"
import * as SpecializedLoop from "../src/programs/SpecializedLoop.js"
import { ContextProvider } from "../src/services/ContextProvider.js"
import type { ContextPlacement } from "../src/services/PromptProvider.js"
import { SessionState } from "../src/services/SessionState.js"
import { add } from "./support/tools.js"

const bound = 20_000

const prompts = (contextPlacement: ContextPlacement = "beforeLastUser") =>
  TemplatePromptProvider.layer({
    systemPrompt: "You help {{name}}.",
    variables: { name: "someone" },
    instructionSets: { brief: ["Answer in one line."] },
    activeInstructionSets: ["brief"],
    contextPlacement
  })
const context = Layer.succeed(ContextProvider, { build: () => Effect.succeed([Message.system("CONTEXT: it is sunny.")]) })
const env = (script: ReadonlyArray<ScriptedEngine.Step>, placement?: ContextPlacement) =>
  Layer.mergeAll(ScriptedEngine.layer(script), Constraint.layer, prompts(placement), Memory.layerMemory)

/** Each request the engine got, as `role: content` lines. */
const sent = Effect.map(ScriptedEngine.requests, (requests) =>
  requests.map((r) => r.messages.map((m) => `${m.role}: ${m.content}`)))

const Weather = Schema.Struct({ sunny: Schema.Boolean })

describe("gap 8: the loops take their system prompt and context placement from the PromptProvider, and use the session state", { timeout: bound }, () => {
  it.effect("AgentLoop: the provider's system prompt in every request, with the session state's values of that turn; not stored", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ sessionId: "s-1" })
      yield* agent.chat("hello")
      yield* agent.state.set("name", "Bob")
      yield* agent.chat("again")
      const [first, second] = yield* sent
      expect(first![0]).toBe("system: You help someone.\n\nbrief:\n- Answer in one line.")
      expect(second![0]).toBe("system: You help Bob.\n\nbrief:\n- Answer in one line.")
      // the state is the session's, in the SessionState provided
      expect(yield* Effect.flatMap(SessionState, (s) => s.snapshot("s-1"))).toEqual({ name: "Bob" })
      const messages = yield* agent.messages
      expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"])
      expect(messages[0]!.content).toContain("You help Bob.")
    }).pipe(Effect.provide(env([ScriptedEngine.reply("hi"), ScriptedEngine.reply("hi again")]))))

  it.effect("AgentLoop: its own systemPrompt wins over the provider's", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make({ systemPrompt: "Mine." })
      yield* agent.chat("hello")
      expect((yield* sent)[0]![0]).toBe("system: Mine.")
    }).pipe(Effect.provide(env([ScriptedEngine.reply("hi")]))))

  it.effect("AgentLoop: context goes where the provider's policy says (afterSystem, appendToSystem)", () =>
    Effect.gen(function* () {
      const after = yield* Effect.flatMap(AgentLoop.make(), (a) => a.chat("weather?")).pipe(
        Effect.zipRight(sent),
        Effect.provide(Layer.merge(env([ScriptedEngine.reply("sunny")], "afterSystem"), context))
      )
      expect(after[0]!.map((l) => l.slice(0, 20))).toEqual(["system: You help som", "system: CONTEXT: it ", "user: weather?"])
      const merged = yield* Effect.flatMap(AgentLoop.make(), (a) => a.chat("weather?")).pipe(
        Effect.zipRight(sent),
        Effect.provide(Layer.merge(env([ScriptedEngine.reply("sunny")], "appendToSystem"), context))
      )
      expect(merged[0]).toHaveLength(2)
      expect(merged[0]![0]).toContain("You help someone.")
      expect(merged[0]![0]).toContain("CONTEXT: it is sunny.")
    }))

  it.effect("AgentLoop.chatStructured: the provider's system prompt and its placement", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make()
      const result = yield* agent.chatStructured(Weather, "Is it sunny?")
      expect(result.value).toEqual({ sunny: true })
      const [request] = yield* sent
      expect(request!.map((l) => l.slice(0, 20))).toEqual(["system: You help som", "system: CONTEXT: it ", "user: Is it sunny?"])
    }).pipe(Effect.provide(Layer.merge(env([ScriptedEngine.reply('{"sunny":true}')], "afterSystem"), context))))

  it.effect("SpecializedLoop and RedundantLoop: the provider's system prompt when the call has none; context by its policy", () =>
    Effect.gen(function* () {
      yield* SpecializedLoop.call("Is it sunny?", { schema: Weather })
      yield* RedundantLoop.run("Is it sunny?", { schema: Weather, n: 1 })
      const requests = yield* sent
      for (const request of requests) {
        expect(request).toHaveLength(2)
        expect(request[0]).toMatch(/^system: You help someone\./)
        expect(request[0]).toContain("CONTEXT: it is sunny.")
        expect(request[1]).toBe("user: Is it sunny?")
      }
      expect(requests).toHaveLength(2)
    }).pipe(
      Effect.provide(
        Layer.merge(env([ScriptedEngine.reply('{"sunny":true}'), ScriptedEngine.reply('{"sunny":true}')], "appendToSystem"), context)
      )
    ))

  it.effect("a loop used directly with a provider that cannot build its prompt dies naming why", () =>
    Effect.gen(function* () {
      const agent = yield* AgentLoop.make()
      const exit = yield* Effect.exit(agent.chat("hello"))
      expect(Exit.isFailure(exit) && String(Exit.causeOption(exit))).toContain("{{city}}")
      expect(yield* ScriptedEngine.requests).toEqual([])
    }).pipe(
      Effect.provide(
        Layer.mergeAll(ScriptedEngine.layer([]), TemplatePromptProvider.layer({ systemPrompt: "Weather in {{city}}." }))
      )
    ))

  const decode = Schema.decodeUnknownSync(SystemRequest)

  it.effect("facade chat: the session state of the request's session is in the provider's prompt", () =>
    Effect.gen(function* () {
      yield* Effect.flatMap(SessionState, (s) => s.set("s-9", "name", "Ada"))
      const system = yield* Facade.make({ defaultSystemPrompt: "Default." })
      const response = yield* system.run(decode({ mode: "chat", sessionId: "s-9", messages: [{ role: "user", content: "hi" }] }))
      expect(response.error).toBeUndefined()
      expect((yield* sent)[0]![0]).toMatch(/^system: You help Ada\./)
    }).pipe(Effect.provide(env([ScriptedEngine.reply("hello Ada")]))))

  it.effect("facade structured: the provider's prompt in place of defaultSystemPrompt; the request's own system message first of all", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make({ defaultSystemPrompt: "Default." })
      const schema = { type: "object", properties: { sunny: { type: "boolean" } }, required: ["sunny"] }
      yield* system.run(decode({ mode: "structured", messages: [{ role: "user", content: "sunny?" }], output: { schema } }))
      yield* system.run(
        decode({ mode: "structured", messages: [{ role: "system", content: "Own." }, { role: "user", content: "sunny?" }], output: { schema } })
      )
      const [provided, own] = yield* sent
      expect(provided![0]).toMatch(/^system: You help someone\./)
      expect(own![0]).toBe("system: Own.")
    }).pipe(Effect.provide(env([ScriptedEngine.reply('{"sunny":true}'), ScriptedEngine.reply('{"sunny":false}')]))))

  it.effect("facade: a provider that cannot build its prompt is CONFIG_INVALID_REQUEST naming the variable, before any inference", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const response = yield* system.run(decode({ mode: "chat", messages: [{ role: "user", content: "hi" }] }))
      expect(response.error).toMatchObject({ code: "CONFIG_INVALID_REQUEST", details: { missing: ["city"] } })
      expect(yield* ScriptedEngine.requests).toEqual([])
    }).pipe(
      Effect.provide(
        Layer.mergeAll(ScriptedEngine.layer([]), Constraint.layer, TemplatePromptProvider.layer({ systemPrompt: "Weather in {{city}}." }))
      )
    ))

  it.effect("the loops' built-in instructions give way to the provider's templates: correction and structuredPhase", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(SpecializedLoop.call("Is it sunny?", { schema: Weather }))
      yield* TestClock.adjust("1 minute")
      const result = yield* Fiber.join(fiber)
      expect(result.value).toEqual({ sunny: true })
      const requests = yield* sent
      // tool phase, structured phase, its correction
      expect(requests).toHaveLength(3)
      expect(requests[1]!.at(-1)).toBe("user: Now the JSON, please.")
      expect(requests[2]!.at(-1)).toMatch(/^user: Fix it \(CONSTRAINT_SCHEMA_INVALID\):\n- /)
    }).pipe(
      Effect.provide(
        Layer.mergeAll(
          ScriptedEngine.layer([ScriptedEngine.reply("Let me think."), ScriptedEngine.reply('{"sunny":"yes"}'), ScriptedEngine.reply('{"sunny":true}')]),
          Constraint.layer,
          Registry.layer([add]),
          TemplatePromptProvider.layer({
            systemPrompt: "You help.",
            templates: { correction: "Fix it ({{code}}):\n{{problems}}", structuredPhase: "Now the JSON, please." }
          })
        )
      )
    ))
})
