/**
 * `pagantic/effect-ai`: the bridge to Effect's own AI modules, both ways.
 *
 * - `EffectAi.languageModel`: any pagantic Engine (the local llama.cpp one on the
 *   bundled model included) as an `@effect/ai` LanguageModel layer, so an Effect AI
 *   program (generateText, generateObject, streamText, toolkits) runs on it unchanged.
 * - `EffectAi.engine`: any `@effect/ai` LanguageModel (OpenAI, Anthropic, Google,
 *   Bedrock, OpenRouter) as pagantic's Engine, so every loop here runs on any Effect
 *   AI provider; its failures map to the InferenceFailure taxonomy.
 *
 * Needs the optional peer dependency `@effect/ai` (0.37, for effect 3.22).
 *
 * @example
 * import { LanguageModel } from "@effect/ai"
 * import { EffectAi } from "pagantic/effect-ai"
 * import { LlamaEngine } from "pagantic/llama"
 * const program = LanguageModel.generateText({ prompt: "Say hi" })
 * program.pipe(Effect.provide(EffectAi.languageModel), Effect.provide(LlamaEngine.layer({ threads: 1 })))
 */
export * as EffectAi from "./adapters/EffectAi.js"
