/**
 * Every inference a request causes, observed once.
 *
 * The loops observe their own inferences (internal/Observed: InferenceStart and
 * InferenceEnd with the request's correlation, the inference metrics, a
 * `chat {model}` span). Other inferences of a request go through the request's
 * engines without a loop around them: a model reranker's, a judge's, a model
 * planner's, a task analyzer's or processor's, a query's responders'. The
 * request's engines observe those here, as the loops do; a call made inside a
 * loop's own inference span is that inference's and is not observed twice.
 * (Streamed calls are the loops' alone, and observed by them.)
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Engine from "../../services/Engine.js"
import type { InferenceFailure } from "../../domain/Failure.js"
import * as Observed from "../internal/Observed.js"
import * as Spans from "../internal/Spans.js"

const inferenceSpanPrefix = Spans.inferenceSpanName("")

/**
 * Whether the fiber runs in an inference span (`chat {model}`): a loop
 * observing this very call. Read before the model's name, so a loop's call costs
 * no `modelInfo` (an HTTP engine may ask its server for it). Read from the fiber
 * in the call's own step: `Effect.option(Effect.currentSpan)` builds and throws
 * away an Error, its stack captured, for every call made outside any span.
 */
const insideInference = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean => {
  const span = Spans.currentSpanOf(fiber)
  return span !== undefined && span._tag === "Span" && span.name.startsWith(inferenceSpanPrefix)
}

/** `engine`, each inference no loop observes observed as one. */
export const observed = (engine: Engine.Service): Engine.Service => new ObservedEngine(engine)

/** `engine` with its `infer` observed. */
class ObservedEngine implements Engine.Service {
  readonly stream: Engine.Service["stream"]
  readonly modelInfo: Engine.Service["modelInfo"]
  readonly sampleMany: Engine.Service["sampleMany"]
  constructor(private readonly inner: Engine.Service) {
    this.stream = inner.stream
    this.modelInfo = inner.modelInfo
    this.sampleMany = inner.sampleMany
  }
  readonly infer: Engine.Service["infer"] = (request) =>
    Effect.withFiberRuntime<Engine.InferenceResult, InferenceFailure>((fiber) =>
      insideInference(fiber)
        ? this.inner.infer(request)
        : Observed.meteredInference(Effect.map(this.inner.modelInfo, (info) => info.name), request, this.inner.infer(request)))
}
