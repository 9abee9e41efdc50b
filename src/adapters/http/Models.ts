/**
 * OpenAI's models routes: the one model this server serves, as an OpenAI client
 * discovers it before its first request.
 *
 *   GET /v1/models        `{ object: "list", data: [model] }`
 *   GET /v1/models/{id}   the model when `id` is its name, otherwise a 404 in
 *                         OpenAI's error shape (`CONFIG_INVALID_REQUEST`, naming the id)
 *
 * A model's `id` is the engine's model name (the name every completion reports
 * as `model`), `created` the time this server started serving it, `owned_by`
 * "pagantic", `context_length` its context window in tokens, and `pagantic` what
 * the engine can do (constrained decoding, native tool calling).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { ModelInfo } from "../../domain/ModelInfo.js"
import * as Text from "../../domain/Text.js"
import { Engine } from "../../services/Engine.js"
import type { ChatFailure, OpenAiModel, OpenAiModelList } from "./Api.js"
import * as Refusals from "./Refusals.js"
import * as Lifetime from "./Lifetime.js"

/** Who a served model is listed as owned by. */
export const owner = "pagantic"

/** A model as OpenAI's models routes send it. */
export const modelOf = (info: ModelInfo, created: number): OpenAiModel => ({
  id: info.name,
  object: "model",
  created,
  owned_by: owner,
  context_length: info.contextWindow,
  pagantic: { supportsGrammar: info.supportsGrammar, supportsTools: info.supportsTools }
})

export interface Handlers {
  readonly list: Effect.Effect<OpenAiModelList>
  readonly show: (id: string) => Effect.Effect<OpenAiModel, ChatFailure>
}

/** The handlers of the models routes, on the engine in context; `created` is taken when they are built. */
export const make: Effect.Effect<Handlers, never, Engine> = Effect.gen(function* () {
  const engine = yield* Engine
  const created = Math.floor((yield* Clock.currentTimeMillis) / 1000)
  const newRequestId = yield* Lifetime.newRequestIds
  const model = Effect.map(engine.modelInfo, (info) => modelOf(info, created))
  return {
    list: Effect.map(model, (m) => ({ object: "list" as const, data: [m] })),
    show: (id: string) =>
      Effect.gen(function* () {
        const served = yield* model
        if (id === served.id) return served
        return yield* Refusals.refuseChat(
          Refusals.invalidRequest(
            `The model ${JSON.stringify(Text.excerpt(id, 80))} does not exist on this server: it serves ${JSON.stringify(served.id)}`,
            { field: "model" }
          ),
          yield* newRequestId,
          404
        )
      })
  }
})
