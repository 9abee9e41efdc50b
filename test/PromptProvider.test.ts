import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Message from "../src/domain/Message.js"
import * as PromptLayer from "../src/layers/TemplatePromptProvider.js"
import * as Prompt from "../src/services/PromptProvider.js"

const options: PromptLayer.Options = {
  systemPrompt: "You are {{persona}}, helping {{ user }}.",
  variables: { persona: "a librarian" },
  instructionSets: {
    citations: ["Cite sources as [n].", "Never invent a source."],
    tone: ["Be brief."]
  },
  activeInstructionSets: ["citations", "tone"],
  templates: { question: "Answer {{question}} in {{words}} words." }
}

describe("PromptProvider", () => {
  it.effect("builds the system prompt from its template, defaults and the active instruction sets", () =>
    Effect.gen(function* () {
      const prompts = yield* Prompt.PromptProvider
      const message = yield* prompts.buildSystemPrompt({ user: "Ada" })
      expect(Message.isSystem(message)).toBe(true)
      expect(message.content).toBe(
        "You are a librarian, helping Ada.\n\n" +
          "citations:\n- Cite sources as [n].\n- Never invent a source.\n\n" +
          "tone:\n- Be brief."
      )
      // A call's variables override the defaults.
      expect((yield* prompts.buildSystemPrompt({ user: "Ada", persona: "a pirate" })).content).toContain("You are a pirate")
    }).pipe(Effect.provide(PromptLayer.layer(options))))

  it.effect("a missing variable is a PromptFailure listing every missing name, never \"undefined\"", () =>
    Effect.gen(function* () {
      const prompts = yield* Prompt.PromptProvider
      const system = yield* Effect.flip(prompts.buildSystemPrompt())
      expect(system).toMatchObject({ code: "PROMPT_VARIABLE_MISSING", template: "systemPrompt", missing: ["user"] })
      const template = yield* Effect.flip(prompts.render("question", {}))
      expect(template.missing).toEqual(["question", "words"])
      expect(template.message).toBe("template \"question\" needs {{question}}, {{words}}, which were not given")
      expect(template.toFailure()).toMatchObject({
        _tag: "ConfigurationFailure",
        code: "CONFIG_INVALID_REQUEST",
        details: { promptCode: "PROMPT_VARIABLE_MISSING", template: "question", missing: ["question", "words"] }
      })
    }).pipe(Effect.provide(PromptLayer.layer(options))))

  it.effect("renders named templates; numbers and booleans are written as text; unknown names fail", () =>
    Effect.gen(function* () {
      const prompts = yield* Prompt.PromptProvider
      expect(yield* prompts.render("question", { question: "why", words: 12 })).toBe("Answer why in 12 words.")
      expect((yield* Effect.flip(prompts.render("nope"))).code).toBe("PROMPT_TEMPLATE_NOT_FOUND")
      expect(yield* prompts.instructions("tone")).toEqual(["Be brief."])
      expect((yield* Effect.flip(prompts.instructions("nope"))).code).toBe("PROMPT_INSTRUCTION_SET_NOT_FOUND")
      expect(yield* PromptLayer.renderTemplate("{{a}}{{a}} {{b}}", { a: true, b: 0 })).toBe("truetrue 0")
      expect(PromptLayer.variablesOf("{{x}} {{ y }} {{x}}")).toEqual(["x", "y"])
    }).pipe(Effect.provide(PromptLayer.layer(options))))

  describe("context placement", () => {
    const context = [Message.system("Relevant context:\n\n[1] (doc): fact")]
    const conversation = [
      Message.system("You are helpful."),
      Message.user("first"),
      Message.assistant("answer"),
      Message.user("second")
    ]
    const shape = (ms: ReadonlyArray<Message.Message>) => ms.map((m) => `${m.role}:${m.content}`)

    it("beforeLastUser puts the context just before the last user message", () => {
      expect(shape(Prompt.placeContext("beforeLastUser", conversation, context))).toEqual([
        "system:You are helpful.",
        "user:first",
        "assistant:answer",
        "system:Relevant context:\n\n[1] (doc): fact",
        "user:second"
      ])
    })

    it("afterSystem puts it right after the leading system messages", () => {
      expect(shape(Prompt.placeContext("afterSystem", conversation, context)).slice(0, 3)).toEqual([
        "system:You are helpful.",
        "system:Relevant context:\n\n[1] (doc): fact",
        "user:first"
      ])
    })

    it("appendToSystem merges it into the system prompt, creating one when absent", () => {
      const merged = Prompt.placeContext("appendToSystem", conversation, context)
      expect(merged).toHaveLength(4)
      expect(merged[0]!.content).toBe("You are helpful.\n\nRelevant context:\n\n[1] (doc): fact")
      const created = Prompt.placeContext("appendToSystem", [Message.user("q")], context)
      expect(shape(created)).toEqual(["system:Relevant context:\n\n[1] (doc): fact", "user:q"])
    })

    it("no context leaves the conversation unchanged", () => {
      expect(Prompt.placeContext("beforeLastUser", conversation, [])).toBe(conversation)
    })

    it.effect("the provider applies its configured policy", () =>
      Effect.gen(function* () {
        const prompts = yield* Prompt.PromptProvider
        expect(prompts.contextPlacement).toBe("afterSystem")
        expect(shape(prompts.placeContext(conversation, context))[1]).toBe("system:Relevant context:\n\n[1] (doc): fact")
      }).pipe(Effect.provide(PromptLayer.layer({ systemPrompt: "x", contextPlacement: "afterSystem" }))))
  })

  it("renderContext writes chunks as the documents' ContextBuilder does", () => {
    expect(Prompt.renderContext([{ source: "a", content: "one" }, { source: "b", content: "two" }])).toBe(
      "Relevant context:\n\n[1] (a): one\n[2] (b): two"
    )
  })
})
