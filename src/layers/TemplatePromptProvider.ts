/**
 * The PromptProvider layer: a system prompt, instruction sets and templates from
 * configuration.
 *
 * Templates use `{{name}}` (spaces inside the braces allowed). Rendering first
 * collects every variable the template names; if any is missing the result is a
 * PromptFailure listing them all, so a prompt with "undefined" in it cannot be
 * produced. Active instruction sets are appended to the system prompt as a
 * bulleted list under their name.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Message from "../domain/Message.js"
import type { ContextPlacement, Service, Variables } from "../services/PromptProvider.js"
import { placeContext, PromptFailure, PromptProvider } from "../services/PromptProvider.js"

const variable = /\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}/g

/** The variables a template names, in order of first use. */
export const variablesOf = (template: string): ReadonlyArray<string> => [
  ...new Set(Array.from(template.matchAll(variable), (m) => m[1]!))
]

/** Renders `template` with `variables`; `name` identifies the template in a failure. */
export const renderTemplate = (
  template: string,
  variables: Variables = {},
  name = "inline"
): Effect.Effect<string, PromptFailure> => {
  const missing = variablesOf(template).filter((v) => !Object.hasOwn(variables, v))
  if (missing.length > 0) {
    return Effect.fail(
      new PromptFailure({
        code: "PROMPT_VARIABLE_MISSING",
        message: `template "${name}" needs ${missing.map((m) => `{{${m}}}`).join(", ")}, which ${missing.length === 1 ? "was" : "were"} not given`,
        template: name,
        missing
      })
    )
  }
  return Effect.succeed(template.replace(variable, (_, v: string) => String(variables[v])))
}

export interface Options {
  /** The system prompt; may use `{{variables}}`. */
  readonly systemPrompt: string
  /** Variables always available (a call's variables override them). */
  readonly variables?: Variables
  /** Named instruction sets. */
  readonly instructionSets?: Readonly<Record<string, ReadonlyArray<string>>>
  /** The sets appended to the system prompt, in this order. */
  readonly activeInstructionSets?: ReadonlyArray<string>
  /** Named templates. */
  readonly templates?: Readonly<Record<string, string>>
  /** Where context goes. Default "beforeLastUser". */
  readonly contextPlacement?: ContextPlacement
}

export const make = (options: Options): Service => {
  const sets = options.instructionSets ?? {}
  const templates = options.templates ?? {}
  const placement = options.contextPlacement ?? "beforeLastUser"

  const instructions = (set: string): Effect.Effect<ReadonlyArray<string>, PromptFailure> =>
    Object.hasOwn(sets, set)
      ? Effect.succeed(sets[set]!)
      : Effect.fail(
        new PromptFailure({
          code: "PROMPT_INSTRUCTION_SET_NOT_FOUND",
          message: `no instruction set named "${set}"`,
          template: set
        })
      )

  const buildSystemPrompt = Effect.fn("PromptProvider.buildSystemPrompt")(function* (variables?: Variables) {
    const base = yield* renderTemplate(options.systemPrompt, { ...options.variables, ...variables }, "systemPrompt")
    const blocks = yield* Effect.forEach(options.activeInstructionSets ?? [], (set) =>
      Effect.map(instructions(set), (lines) => `${set}:\n${lines.map((l) => `- ${l}`).join("\n")}`))
    return Message.system([base, ...blocks].join("\n\n"))
  })

  const render = Effect.fn("PromptProvider.render")(function* (template: string, variables?: Variables) {
    if (!Object.hasOwn(templates, template)) {
      return yield* new PromptFailure({
        code: "PROMPT_TEMPLATE_NOT_FOUND",
        message: `no template named "${template}"`,
        template
      })
    }
    return yield* renderTemplate(templates[template]!, { ...options.variables, ...variables }, template)
  })

  return {
    buildSystemPrompt,
    render,
    instructions,
    contextPlacement: placement,
    placeContext: (messages, context) => placeContext(placement, messages, context)
  }
}

export const layer = (options: Options): Layer.Layer<PromptProvider> =>
  Layer.succeed(PromptProvider, PromptProvider.of(make(options)))
