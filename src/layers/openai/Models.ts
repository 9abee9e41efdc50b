/**
 * What the OpenAI engine knows about its model: the name it was given and the
 * context window, taken from the options or, when absent, asked of `/v1/models`
 * once (a listing that says nothing leaves it 0, and it is asked again next time).
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import { ModelInfo } from "../../domain/ModelInfo.js"
import type { Transport } from "./Transport.js"

/**
 * The context window a `/v1/models` listing reports for `model` (or for its only
 * entry): vLLM's `max_model_len`, `context_length`/`max_context_length` (LM Studio,
 * OpenRouter), llama.cpp's `meta.n_ctx_train`. Undefined when none is given.
 */
export const contextWindowFromModels = (text: string, model: string): number | undefined => {
  const parsed = Either.getOrUndefined(Either.try((): unknown => JSON.parse(text)))
  const data = typeof parsed === "object" && parsed !== null ? (parsed as { data?: unknown }).data : undefined
  if (!Array.isArray(data)) return undefined
  const entries = data.filter((e): e is Record<string, unknown> => typeof e === "object" && e !== null)
  const entry = entries.find((e) => e.id === model) ?? (entries.length === 1 ? entries[0] : undefined)
  if (entry === undefined) return undefined
  const meta = typeof entry.meta === "object" && entry.meta !== null ? (entry.meta as Record<string, unknown>) : {}
  for (const value of [entry.max_model_len, entry.context_length, entry.max_context_length, meta.n_ctx, meta.n_ctx_train]) {
    if (typeof value === "number" && Number.isInteger(value) && value > 0) return value
  }
  return undefined
}

/** Asks `${apiUrl}/models` for the window and remembers it when found; none on any failure. */
const fetchContextWindow = (
  transport: Transport,
  apiUrl: string,
  known: Ref.Ref<Option.Option<number>>
): Effect.Effect<Option.Option<number>> =>
  HttpClient.filterStatusOk(transport.client).get(`${apiUrl}/models`).pipe(
    Effect.flatMap((response) => response.text),
    Effect.map((text) => Option.fromNullable(contextWindowFromModels(text, transport.model))),
    Effect.timeout(transport.timeout),
    Effect.orElseSucceed(() => Option.none<number>()),
    Effect.tap((found) => Option.isSome(found) ? Ref.set(known, found) : Effect.void)
  )

/** The engine's ModelInfo. */
export const modelInfo = (
  transport: Transport,
  apiUrl: string,
  known: Ref.Ref<Option.Option<number>>,
  supportsGrammar: boolean
): Effect.Effect<ModelInfo> =>
  Effect.gen(function*() {
    const current = yield* Ref.get(known)
    const window = Option.isSome(current) ? current : yield* fetchContextWindow(transport, apiUrl, known)
    return new ModelInfo({
      name: transport.model,
      contextWindow: Option.getOrElse(window, () => 0),
      supportsGrammar,
      supportsTools: true
    })
  }).pipe(Effect.withSpan("OpenAiEngine.modelInfo"))
