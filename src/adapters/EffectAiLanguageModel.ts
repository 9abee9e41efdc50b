/**
 * pagantic's Engine as an `@effect/ai` LanguageModel: an Effect AI program
 * (`LanguageModel.generateText`, `generateObject`, `streamText`, toolkits, `Chat`)
 * runs unchanged on any Engine here, the local llama.cpp one on the bundled model
 * included.
 *
 * - Prompts map one to one to Messages (tool calls and tool results keep their
 *   ids; a tool result that is not a string is sent as its JSON). File parts have
 *   no counterpart and are refused as MalformedInput.
 * - Tools are offered with their JSON schema (`Tool.getJsonSchema`); `toolChoice`
 *   "none" offers none, a named tool or `oneOf` offers only those. "required" is
 *   not enforced: the Engine has no way to demand a call, so the model may answer
 *   in text.
 * - `generateObject` sends the schema as the request's JSON schema, so an engine
 *   that constrains decoding (llama.cpp) can only produce parseable output.
 * - Sampling settings come from `withSettings` around the call (temperature,
 *   topP, maxTokens, seed, stop...), as a provider's `withConfigOverride` does.
 * - Usage and finish reasons are the engine's; an engine failure is an AiError
 *   (UnknownError) whose description carries the failure's code and message and
 *   whose cause is the InferenceFailure.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { InferenceFailure } from "../domain/Failure.js"
import * as Message from "../domain/Message.js"
import type { TokenUsage } from "../domain/TokenUsage.js"
import * as Engine from "../services/Engine.js"

/** Sampling settings for the calls inside `withSettings` (fields of the Engine's InferenceRequest). */
export type Settings = Partial<
  Pick<
    Engine.InferenceRequest,
    "maxTokens" | "temperature" | "topP" | "seed" | "stop" | "presencePenalty" | "frequencyPenalty" | "sessionKey" | "options"
  >
>

/** The settings in effect; absent means the engine's defaults. */
export class CurrentSettings extends Context.Tag("pagantic/EffectAi/CurrentSettings")<CurrentSettings, Settings>() {}

/** Runs `self` with these sampling settings (merged over any outer ones). */
export const withSettings: {
  (settings: Settings): <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  <A, E, R>(self: Effect.Effect<A, E, R>, settings: Settings): Effect.Effect<A, E, R>
} = ((...args: Array<any>) => {
  if (args.length === 1) return (self: Effect.Effect<any, any, any>) => provideSettings(self, args[0])
  return provideSettings(args[0], args[1])
}) as any

const provideSettings = <A, E, R>(self: Effect.Effect<A, E, R>, settings: Settings): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    Effect.serviceOption(CurrentSettings),
    (outer) => Effect.provideService(self, CurrentSettings, { ...Option.getOrElse(outer, () => ({})), ...settings })
  )

// ---------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------

const malformed = (description: string) =>
  new AiError.MalformedInput({ module: "EffectAiLanguageModel", method: "prepareMessages", description })

const resultText = (result: unknown): string => typeof result === "string" ? result : JSON.stringify(result) ?? ""

/** An Effect AI prompt as Messages. */
export const toMessages = (prompt: Prompt.Prompt): Effect.Effect<ReadonlyArray<Message.Message>, AiError.MalformedInput> =>
  Effect.suspend(() => {
    const out: Array<Message.Message> = []
    for (const message of prompt.content) {
      switch (message.role) {
        case "system":
          out.push(Message.system(message.content))
          break
        case "user": {
          let text = ""
          for (const part of message.content) {
            if (part.type !== "text") return Effect.fail(malformed(`a ${part.type} part has no counterpart in a pagantic message`))
            text += part.text
          }
          out.push(Message.user(text))
          break
        }
        case "assistant": {
          let text = ""
          const calls: Array<Message.ToolCall> = []
          const results: Array<Message.Message> = []
          for (const part of message.content) {
            switch (part.type) {
              case "text":
                text += part.text
                break
              case "reasoning":
                break
              case "tool-call":
                calls.push(new Message.ToolCall({ id: part.id, name: part.name, arguments: asObject(part.params) }))
                break
              case "tool-result":
                results.push(toolMessage(part))
                break
              case "file":
                return Effect.fail(malformed("a file part has no counterpart in a pagantic message"))
            }
          }
          out.push(Message.assistant(text, calls), ...results)
          break
        }
        case "tool":
          for (const part of message.content) out.push(toolMessage(part))
          break
      }
    }
    return Effect.succeed(out)
  })

const toolMessage = (part: Prompt.ToolResultPart): Message.Message =>
  Message.toolResult(
    new Message.ToolResult({ callId: part.id, name: part.name, content: resultText(part.result), isError: part.isFailure })
  )

const asObject = (params: unknown): Record<string, unknown> =>
  typeof params === "object" && params !== null && !Array.isArray(params) ? params as Record<string, unknown> : {}

/** The tools offered under the provider options' tool choice. */
const toolsOf = (options: LanguageModel.ProviderOptions): ReadonlyArray<Message.ToolDefinition> => {
  const choice = options.toolChoice
  if (choice === "none") return []
  const chosen = typeof choice === "object" && "tool" in choice
    ? options.tools.filter((tool) => tool.name === choice.tool)
    : options.tools
  return chosen.map((tool) =>
    new Message.ToolDefinition({
      name: tool.name,
      description: Tool.getDescription(tool as any) ?? "",
      parameters: Tool.getJsonSchema(tool as any) as unknown as Record<string, unknown>
    })
  )
}

/** The InferenceRequest for a call, with the settings in effect. */
const requestOf = (options: LanguageModel.ProviderOptions) =>
  Effect.gen(function*() {
    const messages = yield* toMessages(options.prompt)
    const settings = Option.getOrElse(yield* Effect.serviceOption(CurrentSettings), () => ({}))
    return new Engine.InferenceRequest({
      ...settings,
      messages,
      tools: toolsOf(options),
      ...(options.responseFormat.type === "json"
        ? { schema: Tool.getJsonSchemaFromSchemaAst(options.responseFormat.schema.ast) as unknown as Record<string, unknown> }
        : {})
    })
  })

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

const finishReason = (reason: Engine.FinishReason): Response.FinishReason => {
  switch (reason) {
    case "tool_calls":
      return "tool-calls"
    case "length":
      return "length"
    case "stop":
      return "stop"
    case "aborted":
      return "other"
  }
}

const usage = (spent: TokenUsage) => ({
  inputTokens: spent.promptTokens,
  outputTokens: spent.outputTokens + spent.reasoningTokens,
  totalTokens: spent.promptTokens + spent.outputTokens + spent.reasoningTokens,
  ...(spent.reasoningTokens > 0 ? { reasoningTokens: spent.reasoningTokens } : {})
})

const toolCallPart = (call: Message.ToolCall): Response.ToolCallPartEncoded => ({
  type: "tool-call",
  id: call.id,
  name: call.name,
  params: call.arguments,
  providerExecuted: false
})

/** An engine failure as an AiError; the InferenceFailure is kept as its cause. */
export const toAiError = (method: string) => (failure: InferenceFailure): AiError.AiError =>
  new AiError.UnknownError({
    module: "EffectAiLanguageModel",
    method,
    description: `${failure.code}: ${failure.message}`,
    cause: failure
  })

// ---------------------------------------------------------------------------
// Constructor
// ---------------------------------------------------------------------------

/** The LanguageModel on the Engine in context. */
export const make: Effect.Effect<LanguageModel.Service, never, Engine.Engine> = Effect.gen(function*() {
  const engine = yield* Engine.Engine
  const model = yield* engine.modelInfo
  return yield* LanguageModel.make({
    generateText: (options) =>
      requestOf(options).pipe(
        Effect.flatMap((request) => Effect.mapError(engine.infer(request), toAiError("generateText"))),
        Effect.map((result): Array<Response.PartEncoded> => [
          { type: "response-metadata", modelId: model.name },
          ...(result.content === "" ? [] : [{ type: "text" as const, text: result.content }]),
          ...result.toolCalls.map(toolCallPart),
          { type: "finish", reason: finishReason(result.finishReason), usage: usage(result.usage) }
        ])
      ),
    streamText: (options) =>
      Stream.unwrap(Effect.map(requestOf(options), (request) => {
        const id = "text-0"
        let open = false
        return engine.stream(request).pipe(
          Stream.mapError(toAiError("streamText")),
          Stream.mapConcat((part): ReadonlyArray<Response.StreamPartEncoded> => {
            switch (part._tag) {
              case "TextDelta": {
                const start: ReadonlyArray<Response.StreamPartEncoded> = open ? [] : [{ type: "text-start", id }]
                open = true
                return [...start, { type: "text-delta", id, delta: part.text }]
              }
              case "ToolCallPart": {
                const end: ReadonlyArray<Response.StreamPartEncoded> = open ? [{ type: "text-end", id }] : []
                open = false
                return [...end, toolCallPart(part.toolCall)]
              }
              case "Finish": {
                const end: ReadonlyArray<Response.StreamPartEncoded> = open ? [{ type: "text-end", id }] : []
                open = false
                return [
                  ...end,
                  { type: "finish", reason: finishReason(part.result.finishReason), usage: usage(part.result.usage) }
                ]
              }
            }
          }),
          Stream.prepend(Chunk.of<Response.StreamPartEncoded>({ type: "response-metadata", modelId: model.name }))
        )
      }))
  })
})

/** The LanguageModel layer on the Engine in context (e.g. `LlamaEngine.layerBundled`). */
export const layer: Layer.Layer<LanguageModel.LanguageModel, never, Engine.Engine> = Layer.effect(
  LanguageModel.LanguageModel,
  make
)
