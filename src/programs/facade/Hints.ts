/**
 * A request's ExecutionHints on every inference it makes.
 *
 * The hints are request-wide tuning knobs (maxTokens, temperature, topP, stop
 * texts, seed, presence and frequency penalties, logprobs and topLogprobs, vendor
 * options) that adapters pass through without interpretation. The mode runners
 * hand them to their loops, where they take the place of the loops' defaults;
 * and the engine a request runs on fills them into every inference request that
 * left the field unset, so they reach inferences no runner configures (plan
 * steps, the task analyzer and processors, a structured call's tool phase). A
 * value the inference sets itself (a plan step's own temperature, a judge's
 * temperature 0) is more specific and stays; vendor options are merged, the
 * inference's own keys winning. As the boundary contract says, a maxTokens or
 * topP of 0 means the engine's default: such a hint is no hint.
 */
import * as Effect from "effect/Effect"
import type { ExecutionHints } from "../../domain/System.js"
import * as Engine from "../../services/Engine.js"

/** The hints that set something (maxTokens and topP of 0 mean the engine's default). */
export interface Effective {
  readonly maxTokens?: number | undefined
  readonly temperature?: number | undefined
  readonly topP?: number | undefined
  readonly stop?: ReadonlyArray<string> | undefined
  readonly seed?: number | undefined
  readonly presencePenalty?: number | undefined
  readonly frequencyPenalty?: number | undefined
  readonly logprobs?: boolean | undefined
  readonly topLogprobs?: number | undefined
  readonly options?: Readonly<Record<string, unknown>> | undefined
}

/** The hints of a request, a 0 maxTokens or topP read as absent. */
export const effective = (hints: ExecutionHints): Effective => ({
  maxTokens: hints.maxTokens === 0 ? undefined : hints.maxTokens,
  temperature: hints.temperature,
  topP: hints.topP === 0 ? undefined : hints.topP,
  stop: hints.stop,
  seed: hints.seed,
  presencePenalty: hints.presencePenalty,
  frequencyPenalty: hints.frequencyPenalty,
  logprobs: hints.logprobs,
  topLogprobs: hints.topLogprobs,
  options: hints.options
})

/** The hinted fields an inference request has with the same name, filled when the request leaves them unset. */
const filled = [
  "maxTokens",
  "temperature",
  "topP",
  "stop",
  "seed",
  "presencePenalty",
  "frequencyPenalty",
  "logprobs",
  "topLogprobs"
] as const satisfies ReadonlyArray<keyof Effective & keyof Engine.InferenceRequest>

const isEmpty = (hints: Effective): boolean =>
  filled.every((key) => hints[key] === undefined) && hints.options === undefined

/** `request` with every hint it leaves unset filled in; its own options keys win over the hints'. */
export const fill = (request: Engine.InferenceRequest, hints: Effective): Engine.InferenceRequest => {
  const missing = filled.filter((key) => request[key] === undefined && hints[key] !== undefined)
  const options = hints.options === undefined ? request.options : { ...hints.options, ...request.options }
  if (missing.length === 0 && options === request.options) return request
  return new Engine.InferenceRequest({
    ...request,
    ...Object.fromEntries(missing.map((key) => [key, hints[key]])),
    ...(options === undefined ? {} : { options })
  })
}

/** The engine a request runs on: every inference, streamed or not, gets the hints it leaves unset. */
export const engine = (inner: Engine.Service, hints: Effective): Engine.Service => {
  if (isEmpty(hints)) return inner
  const sampleMany = inner.sampleMany
  return {
    infer: (request) => inner.infer(fill(request, hints)),
    stream: (request) => Engine.unwrapParts(Effect.sync(() => inner.stream(fill(request, hints)))),
    modelInfo: inner.modelInfo,
    ...(sampleMany === undefined ? {} : { sampleMany: (request: Engine.InferenceRequest, n: number) => sampleMany(fill(request, hints), n) })
  }
}
