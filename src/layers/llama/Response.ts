/**
 * node-llama-cpp's answers in pagantic's terms: a chat response becomes an
 * InferenceResult (content, tool calls, finish reason, usage), and whatever
 * node-llama-cpp throws or refuses becomes an InferenceFailure.
 *
 * Tool calls are checked against the request's tools and must carry an object of
 * arguments; a call the model did not finish (cut off by maxTokens) is no call:
 * the answer is what came before it, with finish reason "length".
 */
import * as Effect from "effect/Effect"
import { LlamaJsonSchemaValidationError } from "node-llama-cpp"
import type {
  ChatModelFunctions,
  LlamaChatResponse,
  LlamaChatResponseFunctionCallParamsChunk,
  LlamaContextSequence
} from "node-llama-cpp"
import { InferenceFailure } from "../../domain/Failure.js"
import { ToolCall } from "../../domain/Message.js"
import * as TokenUsage from "../../domain/TokenUsage.js"
import * as Construct from "../../domain/Construct.js"
import { InferenceResult } from "../../services/Engine.js"
import type { FinishReason, InferenceRequest } from "../../services/Engine.js"
import type { OrphanToolResult } from "./ChatHistory.js"
import type * as Grammars from "./Grammars.js"

// ---------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------

export const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** Raised by our context-shift strategy: the history no longer fits and we refuse to drop parts of it. */
class ContextOverflow {
  readonly _tag = "ContextOverflow"
}

/** A history that outgrows the context is an error, never silently truncated. */
export const contextShift = {
  strategy: (): never => {
    throw new ContextOverflow()
  }
}

/** What a failed generation means: the context overflowed, a function call was malformed, or llama.cpp failed. */
export const fromGenerationError = (error: unknown, details: Record<string, unknown>): InferenceFailure => {
  if (error instanceof ContextOverflow || /context size is too small|not enough tokens/i.test(errorMessage(error))) {
    return InferenceFailure.contextExceeded("the conversation does not fit the context window", details, error)
  }
  if (error instanceof SyntaxError || error instanceof LlamaJsonSchemaValidationError) {
    return InferenceFailure.malformed(`the model produced a malformed function call: ${errorMessage(error)}`, details, error)
  }
  return InferenceFailure.engineError(`llama.cpp generation failed: ${errorMessage(error)}`, details, error)
}

/**
 * A grammar or schema of the request that is refused before or by llama.cpp: the
 * caller's input, not retryable (the HTTP adapter answers it 400). Its message
 * and details carry the problem, the size and the request's field, never the text.
 */
export const grammarRejected = (rejected: Grammars.Rejected): InferenceFailure =>
  new InferenceFailure({
    code: "INFERENCE_ENGINE_ERROR",
    retryable: false,
    message: `${rejected.source === "gbnf" ? "the GBNF grammar" : "the JSON schema"} cannot be used: ${rejected.problem}`,
    details: {
      kind: "grammar",
      source: rejected.source,
      field: rejected.source === "gbnf" ? "output.grammar" : "output.schema",
      problem: rejected.problem,
      ...(rejected.bytes === undefined ? {} : { bytes: rejected.bytes })
    },
    cause: rejected.cause
  })

/** A tool message of the request that answers no tool call of the conversation. */
export const orphanToolResult = (orphan: OrphanToolResult): InferenceFailure =>
  new InferenceFailure({
    code: "INFERENCE_ENGINE_ERROR",
    retryable: false,
    message: `tool result ${orphan.toolCallId} (${orphan.name}) answers no tool call of the conversation`,
    details: { toolCallId: orphan.toolCallId, name: orphan.name }
  })

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

export const finishReasonOf = (response: LlamaChatResponse<ChatModelFunctions>): FinishReason => {
  if ((response.functionCalls?.length ?? 0) > 0) return "tool_calls"
  switch (response.metadata.stopReason) {
    case "maxTokens":
      return "length"
    case "abort":
      return "aborted"
    case "functionCalls":
      return "tool_calls"
    default:
      return "stop"
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The result of a generation that was asked for no tokens (node-llama-cpp reads maxTokens 0 as "no limit"); no token, no log-probability. */
export const empty = (contextWindow: number, logprobs: boolean): InferenceResult =>
  new InferenceResult({
    content: "",
    toolCalls: [],
    finishReason: "length",
    usage: TokenUsage.make({ contextWindow }),
    ...(logprobs ? { logprobs: [] } : {})
  })

/**
 * The calls the model made, each with a fresh id; a call to an unknown tool or
 * with arguments that are not an object is a malformed answer. A call cut off by
 * maxTokens is recorded on the span.
 */
export const toolCallsOf = (
  response: LlamaChatResponse<ChatModelFunctions>,
  request: InferenceRequest,
  partialCalls: ReadonlyMap<number, LlamaChatResponseFunctionCallParamsChunk>,
  nextCallId: Effect.Effect<string>
): Effect.Effect<Array<ToolCall>, InferenceFailure> =>
  // most replies call nothing: no generator for them
  (response.functionCalls === undefined || response.functionCalls.length === 0) && partialCalls.size === 0
    ? Effect.succeed([])
    : checkedToolCalls(response, request, partialCalls, nextCallId)

const checkedToolCalls = Effect.fnUntraced(function*(
  response: LlamaChatResponse<ChatModelFunctions>,
  request: InferenceRequest,
  partialCalls: ReadonlyMap<number, LlamaChatResponseFunctionCallParamsChunk>,
  nextCallId: Effect.Effect<string>
) {
  const calls = response.functionCalls ?? []
  const cut = [...partialCalls.values()].find((chunk) => !chunk.done)
  if (cut !== undefined && calls.length === 0) {
    yield* Effect.annotateCurrentSpan("pagantic.tool_call.cut_off", cut.functionName)
  }
  const toolCalls: Array<ToolCall> = []
  for (const call of calls) {
    const params: unknown = call.params ?? {}
    if (!request.tools.some((tool) => tool.name === call.functionName)) {
      return yield* InferenceFailure.malformed(`the model called an unknown tool: ${call.functionName}`, {
        kind: "unknown_tool",
        functionName: call.functionName
      })
    }
    if (!isRecord(params)) {
      return yield* InferenceFailure.malformed(
        `the model called ${call.functionName} with arguments that are not an object`,
        { kind: "arguments_not_object", functionName: call.functionName, params }
      )
    }
    toolCalls.push(new ToolCall({ id: yield* nextCallId, name: call.functionName, arguments: params }, true))
  }
  return toolCalls
})

/**
 * What a generation cost, from the sequence's token meter over the generation;
 * the prompt's tokens it did not evaluate (`promptLength` less those evaluated)
 * are its cached prompt tokens.
 */
export const usageOf = (
  used: { readonly usedInputTokens: number; readonly usedOutputTokens: number },
  sequence: LlamaContextSequence,
  contextWindow: number,
  elapsedNanos: bigint,
  promptLength: number
): TokenUsage.TokenUsage => {
  const seconds = Number(elapsedNanos) / 1e9
  const cached = Math.max(0, promptLength - used.usedInputTokens)
  // Built from values llama.cpp just gave us: not validated again (see domain/Construct)
  return Construct.unchecked(TokenUsage.TokenUsage, {
    promptTokens: used.usedInputTokens,
    ...(cached === 0 ? {} : { cachedPromptTokens: cached }),
    reasoningTokens: 0,
    outputTokens: used.usedOutputTokens,
    contextTokens: sequence.nextTokenIndex,
    contextWindow,
    tokensPerSecond: seconds > 0 ? used.usedOutputTokens / seconds : 0,
    calls: 1
  })
}

/** The InferenceResult of a response, with its tool calls already checked. */
export const resultOf = (
  response: LlamaChatResponse<ChatModelFunctions>,
  toolCalls: ReadonlyArray<ToolCall>,
  usage: TokenUsage.TokenUsage
): InferenceResult =>
  Construct.unchecked(InferenceResult, { content: response.response, toolCalls, finishReason: finishReasonOf(response), usage })
