/**
 * The built-in step handlers: `infer` (the Engine), `tool` (the ToolRegistry),
 * `retrieve` (the Retriever, or the ContextProvider with `retrieveContext`),
 * `rerank` (the Reranker) and `validate` (the Validator). Each is a StepHandler
 * over the step data of StepData.ts, so they chain: retrieve -> rerank -> infer
 * -> validate.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as Option from "effect/Option"
import * as Message from "../../domain/Message.js"
import { ContextProvider } from "../../services/ContextProvider.js"
import { Engine, InferenceRequest, InferenceResult } from "../../services/Engine.js"
import { renderContext } from "../../services/PromptProvider.js"
import { Reranker, RerankInput } from "../../services/Reranker.js"
import { Retriever } from "../../services/Retriever.js"
import { ToolRegistry } from "../../services/ToolRegistry.js"
import type { Rule } from "../../services/Validator.js"
import { Validator } from "../../services/Validator.js"
import * as Observed from "../internal/Observed.js"
import * as Request from "../internal/Request.js"
import * as Spans from "../internal/Spans.js"
import type { StepHandler } from "./Handler.js"
import { handler } from "./Handler.js"
import {
  CandidateSet,
  ContextSet,
  InferInput,
  QueryInput,
  queryOf,
  TextInput,
  ToolStepInput,
  ToolStepOutput,
  Validated
} from "./StepData.js"

export interface InferOptions {
  /** Prepended as a system message when the input is not a full request. */
  readonly systemPrompt?: string | undefined
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
}

/** The messages of an `infer` step whose input is not a full request. */
const inferMessages = (
  input: string | CandidateSet | ContextSet,
  systemPrompt: string | undefined
): ReadonlyArray<Message.Message> => {
  const system = systemPrompt === undefined ? [] : [Message.system(systemPrompt)]
  if (typeof input === "string") return [...system, Message.user(input)]
  if (input instanceof ContextSet) return [...system, ...input.messages, Message.user(input.query)]
  return [
    ...system,
    ...(input.candidates.length === 0 ? [] : [Message.system(renderContext(input.candidates))]),
    Message.user(input.query)
  ]
}

/** `infer`: runs the Engine. A string is a user prompt; candidates or context become a RAG prompt. */
export const infer = (options: InferOptions = {}): StepHandler<typeof InferInput.Type, InferenceResult, Engine> =>
  handler("infer", {
    input: InferInput,
    output: InferenceResult,
    run: (input) =>
      // the engine read from the fiber's context in the step that calls it
      Effect.withFiberRuntime<InferenceResult, InferenceFailure, Engine>((fiber) => {
        const engine = Context.get(fiber.currentContext as Context.Context<Engine>, Engine)
        const model = Effect.map(engine.modelInfo, (info) => info.name)
        const call = (request: InferenceRequest) => Observed.meteredInference(model, request, engine.infer(request))
        if (input instanceof InferenceRequest) return call(input)
        return call(
          Request.make(inferMessages(input, options.systemPrompt), [], {
            ...(options.maxTokens === undefined ? {} : { maxTokens: options.maxTokens }),
            ...(options.temperature === undefined ? {} : { temperature: options.temperature })
          })
        )
      })
  })

/** `tool`: runs a tool of the ToolRegistry (narrowed by `allow`). */
export const tool = (
  options: { readonly allow?: ReadonlyArray<string> | undefined } = {}
): StepHandler<typeof ToolStepInput.Type, typeof ToolStepOutput.Type, ToolRegistry> =>
  handler("tool", {
    input: ToolStepInput,
    output: ToolStepOutput,
    run: (input, { attempt, step }) =>
      Effect.flatMap(ToolRegistry, (registry) => {
        const call = new Message.ToolCall({ id: input.id ?? step.name, name: input.name, arguments: input.arguments })
        return Effect.map(
          registry.execute(call, { allow: options.allow }).pipe(Spans.tool(call, Option.none(), attempt)),
          (out) => ({ id: out.call.id, name: out.call.name, content: out.content, value: out.value })
        )
      })
  })

/** `retrieve` over the Retriever: a query (or `{query, limit}`) in, scored candidates out. */
export const retrieve = (
  options: { readonly limit?: number | undefined } = {}
): StepHandler<typeof QueryInput.Type, CandidateSet, Retriever> =>
  handler("retrieve", {
    input: QueryInput,
    output: CandidateSet,
    run: (input) =>
      Effect.flatMap(Retriever, (retriever) => {
        const { limit, query } = queryOf(input)
        return Effect.map(
          retriever.retrieve(query, limit ?? options.limit ?? 10),
          (chunks) => new CandidateSet({ query, candidates: chunks })
        )
      })
  })

/** `retrieve` over the ContextProvider: a query in, ephemeral context messages out. */
export const retrieveContext = (): StepHandler<typeof QueryInput.Type, ContextSet, ContextProvider> =>
  handler("retrieve", {
    input: QueryInput,
    output: ContextSet,
    run: (input) =>
      Effect.flatMap(ContextProvider, (provider) => {
        const { query } = queryOf(input)
        return Effect.map(provider.build(query), (messages) => new ContextSet({ query, messages }))
      })
  })

/** `rerank`: candidates for a query in, the best `topK` out, ordered by the Reranker. */
export const rerank = (
  options: { readonly topK?: number | undefined } = {}
): StepHandler<RerankInput, CandidateSet, Reranker> =>
  handler("rerank", {
    input: RerankInput,
    output: CandidateSet,
    run: (input) =>
      Effect.flatMap(Reranker, (reranker) =>
        Effect.map(
          reranker.rerank(
            input.topK === undefined && options.topK !== undefined
              ? new RerankInput({ ...input, topK: options.topK })
              : input
          ),
          (candidates) => new CandidateSet({ query: input.query, candidates })
        ))
  })

/**
 * `validate`: text (or an inference result, or `{content}`) in, Validated out when
 * every rule passes; VALIDATION_RULE_FAILED otherwise. Validation is deterministic,
 * so this step is never re-run; to re-run the step that produced the text, wrap
 * that step with `validatedBy` instead.
 */
export const validate = (
  options: { readonly rules?: ReadonlyArray<Rule> | undefined } = {}
): StepHandler<typeof TextInput.Type, Validated, Validator> =>
  handler("validate", {
    input: TextInput,
    output: Validated,
    retry: false,
    run: (input) =>
      Effect.flatMap(Validator, (validator) => {
        const content = typeof input === "string" ? input : input.content
        return Effect.map(validator.validate(content, options.rules), (report) => new Validated({ content, report }))
      })
  })
