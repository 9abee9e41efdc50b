/**
 * The Engine for any `@effect/ai` LanguageModel: OpenAI, Anthropic, Google,
 * Bedrock, OpenRouter, or a user's own provider. Every loop here (AgentLoop,
 * Structured, RedundantLoop, plans, patterns) runs on any Effect AI provider
 * unchanged.
 *
 * One inference is one `generateText` (or `generateObject` when the request
 * carries a JSON schema) with tool-call resolution off: the model's tool calls
 * come back to the loop, which runs them under its own policy. Messages map one to
 * one (assistant tool calls as `tool-call` parts, tool messages as `tool-result`
 * parts); tool definitions become dynamic `Tool`s whose parameters are the
 * definition's own JSON schema; a GBNF grammar is not sent (the constraint layer
 * checks the reply afterwards, as the Engine contract says of engines that cannot
 * constrain decoding).
 *
 * Sampling settings (temperature, topP, maxTokens, seed) are provider
 * configuration in Effect AI, so they reach the provider through `configure`:
 * e.g. `(request) => OpenAiLanguageModel.withConfigOverride({ temperature:
 * request.temperature })`. Without it the provider's own configuration applies.
 *
 * Failures map to the taxonomy: a response status of 401, 403 or 404 is
 * INFERENCE_MODEL_UNAVAILABLE (no retry helps); a body that says the context
 * overflowed is INFERENCE_CONTEXT_EXCEEDED; 408, 409, 429 and 5xx, transport
 * errors and unknown provider errors are a retryable INFERENCE_ENGINE_ERROR, any
 * other 4xx and input the provider cannot encode a non-retryable one; a reply the
 * provider could not decode (or a schema-bound reply that does not parse) is
 * INFERENCE_MALFORMED_RESPONSE. The status, the provider's module and method and a
 * short excerpt of the body are in `details`; the AiError is the cause.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { InferenceFailure } from "../domain/Failure.js"
import type { JsonSchema } from "../domain/JsonSchema.js"
import { ToolCall } from "../domain/Message.js"
import type { Message, ToolDefinition } from "../domain/Message.js"
import { ModelInfo } from "../domain/ModelInfo.js"
import * as TokenUsage from "../domain/TokenUsage.js"
import { Engine, InferenceRequest, InferenceResult, StreamPart } from "../services/Engine.js"
import type { FinishReason } from "../services/Engine.js"

/** How the engine reaches its provider. */
export interface Options {
  /** The model's name, as `modelInfo` reports it (default "effect-ai"). */
  readonly name?: string | undefined
  /** The model's context window in tokens, as `modelInfo` reports it (default 0: unknown). */
  readonly contextWindow?: number | undefined
  /** Whether the provider speaks native tool calling (default true). */
  readonly supportsTools?: boolean | undefined
  /**
   * Wraps each call to the provider: the place to turn the request's sampling
   * settings into the provider's configuration (`withConfigOverride`).
   */
  readonly configure?: ((request: InferenceRequest) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) | undefined
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/** Our messages as an Effect AI prompt. */
export const toPrompt = (messages: ReadonlyArray<Message>): Prompt.RawInput => {
  const names = new Map<string, string>()
  const out: Array<Prompt.MessageEncoded> = []
  for (const message of messages) {
    switch (message._tag) {
      case "SystemMessage":
        out.push({ role: "system", content: message.content })
        break
      case "UserMessage":
        out.push({ role: "user", content: [{ type: "text", text: message.content }] })
        break
      case "AssistantMessage": {
        const parts: Array<Prompt.AssistantMessagePartEncoded> = []
        if (message.content !== "") parts.push({ type: "text", text: message.content })
        for (const call of message.toolCalls) {
          names.set(call.id, call.name)
          parts.push({ type: "tool-call", id: call.id, name: call.name, params: call.arguments, providerExecuted: false })
        }
        out.push({ role: "assistant", content: parts })
        break
      }
      case "ToolMessage":
        out.push({
          role: "tool",
          content: [{
            type: "tool-result",
            id: message.toolCallId,
            name: names.get(message.toolCallId) ?? message.name,
            result: message.content,
            isFailure: message.isError,
            providerExecuted: false
          }]
        })
        break
    }
  }
  return out
}

/** A schema that decodes any JSON object and describes itself as `schema`. */
const described = (schema: JsonSchema) =>
  Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({ jsonSchema: schema })

/** A tool definition as a dynamic Effect AI tool: its parameters are the definition's JSON schema. */
const toTool = (definition: ToolDefinition) =>
  Tool.make(definition.name, { description: definition.description }).setParameters(
    Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown })).annotations({
      jsonSchema: definition.parameters
    })
  )

/** The request's tools as a toolkit whose handlers are never called (resolution is off). */
const toolkitOf = (tools: ReadonlyArray<ToolDefinition>) => {
  const toolkit = Toolkit.make(...tools.map(toTool))
  const handlers: Record<string, () => Effect.Effect<never>> = {}
  for (const tool of tools) handlers[tool.name] = () => Effect.dieMessage("EffectAiEngine: tool resolution is off")
  return toolkit.pipe(Effect.provide(toolkit.toLayer(handlers as never)))
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

const finishReasonOf = (reason: Response.FinishReason): FinishReason => {
  switch (reason) {
    case "tool-calls":
      return "tool_calls"
    case "length":
      return "length"
    case "stop":
      return "stop"
    default:
      return "stop"
  }
}

const usageOf = (usage: Response.Usage, contextWindow: number): TokenUsage.TokenUsage =>
  TokenUsage.make({
    promptTokens: usage.inputTokens ?? 0,
    outputTokens: Math.max(0, (usage.outputTokens ?? 0) - (usage.reasoningTokens ?? 0)),
    reasoningTokens: usage.reasoningTokens ?? 0,
    contextTokens: (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0),
    contextWindow
  })

const asArguments = (params: unknown): Record<string, unknown> =>
  typeof params === "object" && params !== null && !Array.isArray(params) ? params as Record<string, unknown> : {}

// ---------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------

const CONTEXT_EXCEEDED = /context[ _-]?length|context[ _-]?window|maximum context|too many tokens|prompt is too long/i

const excerpt = (text: string | undefined): string | undefined =>
  text === undefined ? undefined : text.length <= 200 ? text : `${text.slice(0, 200)}…`

/** An Effect AI error (or a reply that does not decode) as an InferenceFailure. */
export const fromAiError = (error: AiError.AiError | ParseResult.ParseError): InferenceFailure => {
  if (ParseResult.isParseError(error)) {
    return InferenceFailure.malformed("the provider's reply does not match the request's tools or schema", {
      reason: excerpt(error.message)
    }, error)
  }
  const where = { module: error.module, method: error.method }
  switch (error._tag) {
    case "HttpResponseError": {
      const status = error.response.status
      const details = { ...where, status, ...(error.body === undefined ? {} : { body: excerpt(error.body) }) }
      if (error.reason !== "StatusCode") {
        return InferenceFailure.malformed(`the provider's reply could not be read (${error.reason})`, details, error)
      }
      if (status === 401 || status === 403 || status === 404) {
        return InferenceFailure.modelUnavailable(`the provider refused the model (${status})`, details, error)
      }
      if (error.body !== undefined && CONTEXT_EXCEEDED.test(error.body)) {
        return InferenceFailure.contextExceeded("the prompt does not fit the model's context window", details, error)
      }
      const transient = status === 408 || status === 409 || status === 429 || status >= 500
      return new InferenceFailure({
        code: "INFERENCE_ENGINE_ERROR",
        retryable: transient,
        message: `the provider answered ${status}`,
        details,
        cause: error
      })
    }
    case "HttpRequestError":
      return InferenceFailure.engineError(`the provider could not be reached (${error.reason})`, where, error)
    case "MalformedInput":
      return new InferenceFailure({
        code: "INFERENCE_ENGINE_ERROR",
        retryable: false,
        message: `the provider cannot encode this request${error.description === undefined ? "" : `: ${error.description}`}`,
        details: where,
        cause: error
      })
    case "MalformedOutput":
      return InferenceFailure.malformed(
        `the provider's reply could not be decoded${error.description === undefined ? "" : `: ${error.description}`}`,
        where,
        error
      )
    case "UnknownError":
      return InferenceFailure.engineError(
        `the provider failed${error.description === undefined ? "" : `: ${error.description}`}`,
        where,
        error
      )
  }
}

// ---------------------------------------------------------------------------
// Constructor
// ---------------------------------------------------------------------------

/** Builds the engine on the LanguageModel in context. */
export const make = Effect.fn("EffectAiEngine.make")(function*(options: Options = {}) {
  const model = yield* LanguageModel.LanguageModel
  const contextWindow = options.contextWindow ?? 0
  const info = new ModelInfo({
    name: options.name ?? "effect-ai",
    contextWindow,
    supportsGrammar: false,
    supportsTools: options.supportsTools ?? true
  })
  const configure = (request: InferenceRequest) =>
    options.configure === undefined ? <A, E, R>(self: Effect.Effect<A, E, R>) => self : options.configure(request)

  const infer = (request: InferenceRequest): Effect.Effect<InferenceResult, InferenceFailure> => {
    const prompt = toPrompt(request.messages)
    const common = request.tools.length === 0
      ? { prompt }
      : { prompt, toolkit: toolkitOf(request.tools), disableToolCallResolution: true as const }
    const call = request.schema === undefined
      ? model.generateText(common)
      : model.generateObject({ ...common, schema: described(request.schema), objectName: "output" })
    return (call as Effect.Effect<LanguageModel.GenerateTextResponse<any>, AiError.AiError>).pipe(
      configure(request),
      Effect.map((response) =>
        new InferenceResult({
          content: response.text,
          toolCalls: response.toolCalls.map((part) =>
            new ToolCall({ id: part.id, name: part.name, arguments: asArguments(part.params) })
          ),
          usage: usageOf(response.usage, contextWindow),
          finishReason: response.toolCalls.length > 0 ? "tool_calls" : finishReasonOf(response.finishReason)
        })
      ),
      Effect.mapError((error) => fromAiError(error as AiError.AiError | ParseResult.ParseError)),
      Effect.withSpan("EffectAiEngine.infer", { captureStackTrace: false })
    )
  }

  const stream = (request: InferenceRequest): Stream.Stream<StreamPart, InferenceFailure> =>
    Stream.suspend(() => {
      const prompt = toPrompt(request.messages)
      const parts = request.tools.length === 0
        ? model.streamText({ prompt })
        : model.streamText({ prompt, toolkit: toolkitOf(request.tools), disableToolCallResolution: true as const })
      let text = ""
      const calls: Array<ToolCall> = []
      let finished = false
      return (parts as Stream.Stream<Response.StreamPart<any>, AiError.AiError>).pipe(
        Stream.mapConcat((part): ReadonlyArray<StreamPart> => {
          switch (part.type) {
            case "text-delta":
              text += part.delta
              return part.delta === "" ? [] : [StreamPart.textDelta(part.delta)]
            case "tool-call": {
              const call = new ToolCall({ id: part.id, name: part.name, arguments: asArguments(part.params) })
              calls.push(call)
              return [StreamPart.toolCall(call)]
            }
            case "finish":
              finished = true
              return [StreamPart.finish(
                new InferenceResult({
                  content: text,
                  toolCalls: calls,
                  usage: usageOf(part.usage, contextWindow),
                  finishReason: calls.length > 0 ? "tool_calls" : finishReasonOf(part.reason)
                })
              )]
            default:
              return []
          }
        }),
        Stream.concat(Stream.suspend(() =>
          finished
            ? Stream.empty
            : Stream.fail(InferenceFailure.malformed("the provider's stream ended without a finish part", {}))
        )),
        Stream.mapError((error) =>
          error instanceof InferenceFailure ? error : fromAiError(error as AiError.AiError | ParseResult.ParseError)
        ),
        (self) =>
          options.configure === undefined
            ? self
            // The hook provides services (the provider's configuration) to an effect: capture the
            // context it builds and run the whole stream in it.
            : Stream.unwrap(Effect.map(options.configure(request)(Effect.context<never>()), (context) =>
              Stream.provideSomeContext(self, context)))
      )
    })

  return Engine.of({ infer, stream, modelInfo: Effect.succeed(info) })
})

/** The engine on the LanguageModel in context (provide a provider's layer, e.g. `OpenAiLanguageModel.layer`). */
export const layer = (options: Options = {}): Layer.Layer<Engine, never, LanguageModel.LanguageModel> =>
  Layer.effect(Engine, make(options))
