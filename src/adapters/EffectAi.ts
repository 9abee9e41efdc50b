/**
 * The bridge to Effect's own AI modules, both ways: `languageModel` serves
 * pagantic's Engine as an `@effect/ai` LanguageModel, `engine` serves an
 * `@effect/ai` LanguageModel as pagantic's Engine. The halves live in
 * EffectAiLanguageModel (an adapter) and layers/EffectAiEngine (a layer).
 */
import * as EffectAiEngine from "../layers/EffectAiEngine.js"
import * as EffectAiLanguageModel from "./EffectAiLanguageModel.js"

/** Options of `engine`. */
export type EngineOptions = EffectAiEngine.Options

/** Sampling settings for `withSettings`. */
export type Settings = EffectAiLanguageModel.Settings

/** pagantic's Engine in context as an `@effect/ai` LanguageModel. */
export const languageModel = EffectAiLanguageModel.layer

/** The LanguageModel service on the Engine in context, for building it by hand. */
export const makeLanguageModel = EffectAiLanguageModel.make

/** Runs Effect AI calls on the bridge with these sampling settings (temperature, maxTokens, seed, stop...). */
export const withSettings = EffectAiLanguageModel.withSettings

/** The sampling settings in effect for the bridge's calls. */
export const CurrentSettings = EffectAiLanguageModel.CurrentSettings

/** The `@effect/ai` LanguageModel in context as pagantic's Engine. */
export const engine = EffectAiEngine.layer

/** The Engine service on the LanguageModel in context, for building it by hand. */
export const makeEngine = EffectAiEngine.make

/** An Effect AI error (or a reply that does not decode) as an InferenceFailure. */
export const fromAiError = EffectAiEngine.fromAiError

/** An InferenceFailure as an Effect AI error (its cause). */
export const toAiError = EffectAiLanguageModel.toAiError
