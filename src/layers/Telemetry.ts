/**
 * Telemetry: the observe layer seen from outside, through OpenTelemetry.
 *
 * The loops already make their spans with Effect's tracer (`Effect.fn`,
 * `Effect.withSpan`): the request (`Facade.run`), one span per lifecycle state
 * entered (`lifecycle {STATE}`), every inference (`chat {model}`, with
 * OpenTelemetry's gen_ai attributes), every tool execution (`execute_tool {name}`,
 * linked to the inference that asked for it) and every plan step
 * (`PlanExecutor.step`), each carrying the request's correlation ids. Which tracer
 * receives them is a layer choice, made here:
 *
 * - `layerInMemory`: the real OpenTelemetry SDK (a NodeTracerProvider) keeping
 *   every span as it ends, for tests and tools that want to read finished spans
 *   back (`InMemorySpans`).
 * - `layerOtlp`: OTLP/HTTP (JSON) export of spans and of Effect's metrics, through
 *   @effect/opentelemetry's exporter over an `HttpClient`.
 * - `layerConfig`: `layerOtlp` when `PAGANTIC_OTLP_ENDPOINT` is set, nothing otherwise.
 *
 * Metrics go to the `Metrics` service, and `metrics` is a Metrics layer that
 * records through Effect's `Metric` (which `layerOtlp` exports) and nowhere else:
 * latency per layer (`pagantic.latency_ms{layer}`), tokens
 * (`gen_ai.client.token.usage{gen_ai.token.type}`) and a counter per name
 * (`pagantic.tool_calls`, `pagantic.retries`, `pagantic.votes`...); its snapshot
 * reads them back. The in-memory Metrics (`InMemoryObserve`) stay for tests.
 * `costTracker` prices usage per model and adds it to `pagantic.cost{gen_ai.request.model}`,
 * its total read back from there too.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import * as Otlp from "@effect/opentelemetry/Otlp"
import * as OtelResource from "@effect/opentelemetry/Resource"
import * as OtelTracer from "@effect/opentelemetry/Tracer"
import * as OtelApi from "@opentelemetry/api"
import type { ReadableSpan, Span, SpanProcessor } from "@opentelemetry/sdk-trace-base"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricKeyType from "effect/MetricKeyType"
import type * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"
import type { Service as CostTrackerService } from "../services/CostTracker.js"
import type { EventLog } from "../services/EventLog.js"
import type { Service as MetricsService } from "../services/Metrics.js"
import { CostTracker } from "../services/CostTracker.js"
import { Metrics } from "../services/Metrics.js"
import type { Price } from "./InMemoryObserve.js"
import * as Observe from "./InMemoryObserve.js"
import { arrayAttributeKeys, sdkTracer } from "./telemetry/SdkTracer.js"

/** What the exported resource says about this process. */
export interface ResourceOptions {
  /** Default "pagantic". */
  readonly serviceName?: string | undefined
  readonly serviceVersion?: string | undefined
  readonly attributes?: Record<string, string> | undefined
}

const resourceOf = (options: ResourceOptions) => ({
  serviceName: options.serviceName ?? "pagantic",
  ...(options.serviceVersion === undefined ? {} : { serviceVersion: options.serviceVersion }),
  ...(options.attributes === undefined ? {} : { attributes: options.attributes })
})

// ---------------------------------------------------------------------------
// Array attributes
// ---------------------------------------------------------------------------

/** Attributes the loops set as arrays (see telemetry/SdkTracer). */
export { arrayAttributeKeys, sdkTracer } from "./telemetry/SdkTracer.js"

/** The JSON text of an array of strings (the loops' own attribute, stringified on the way): the array, else none. */
const decodeStringArray = (text: string): Option.Option<ReadonlyArray<string>> => {
  try {
    const parsed: unknown = JSON.parse(text)
    return Array.isArray(parsed) && parsed.every((x) => typeof x === "string") ? Option.some(parsed as ReadonlyArray<string>) : Option.none()
  } catch {
    return Option.none()
  }
}

/**
 * @effect/opentelemetry (0.64) hands non-primitive attribute values to the SDK as
 * JSON text. This processor turns the array attributes of `arrayAttributeKeys`
 * back into arrays as each span ends, then passes the span on to `processor`.
 * (Effect's own OTLP exporter, `layerOtlp`, sends arrays as arrays already.)
 */
export const restoreArrayAttributes = (processor: SpanProcessor): SpanProcessor => ({
  onStart: (span: Span, parentContext: OtelApi.Context) => processor.onStart(span, parentContext),
  onEnding: (span: Span) => {
    for (const key of arrayAttributeKeys) {
      const value = span.attributes[key]
      const array = typeof value === "string" && value.startsWith("[") ? decodeStringArray(value) : Option.none()
      if (Option.isSome(array)) span.setAttribute(key, [...array.value])
    }
    processor.onEnding?.(span)
  },
  onEnd: (span: ReadableSpan) => processor.onEnd(span),
  forceFlush: () => processor.forceFlush(),
  shutdown: () => processor.shutdown()
})

// ---------------------------------------------------------------------------
// Traces in memory
// ---------------------------------------------------------------------------

/** The finished spans of an in-memory telemetry layer. */
export interface InMemorySpansService {
  /** Every span ended so far (the SDK's ReadableSpan), in the order they ended. */
  readonly spans: Effect.Effect<ReadonlyArray<ReadableSpan>>
  readonly reset: Effect.Effect<void>
}

export class InMemorySpans extends Context.Tag("pagantic/Telemetry/InMemorySpans")<
  InMemorySpans,
  InMemorySpansService
>() {}

/**
 * A span processor that keeps every sampled span as it ends, in the order they
 * end: what OpenTelemetry's SimpleSpanProcessor into an InMemorySpanExporter
 * keeps, without the promise, the OpenTelemetry context and the timer that pair
 * makes for every span (its export is asynchronous, for exporters that send).
 * Shut down, it keeps nothing more and forgets what it kept, as that exporter does.
 */
class KeepSpans implements SpanProcessor {
  spans: Array<ReadableSpan> = []
  private stopped = false
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    if (!this.stopped && (span.spanContext().traceFlags & OtelApi.TraceFlags.SAMPLED) !== 0) this.spans.push(span)
  }
  forceFlush(): Promise<void> {
    return Promise.resolve()
  }
  shutdown(): Promise<void> {
    this.stopped = true
    this.spans = []
    return Promise.resolve()
  }
}

/**
 * Effect's tracer backed by the OpenTelemetry SDK, keeping every span as it
 * ends for `InMemorySpans` to read.
 *
 * The SDK is a NodeTracerProvider, its resource the one @effect/opentelemetry's
 * NodeSdk would make (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, then
 * `options`), its processor one that keeps ended spans in memory (`KeepSpans`).
 * The Effect tracer over it is @effect/opentelemetry's when a context manager is
 * registered (code instrumented by OpenTelemetry itself then sees the Effect span
 * as the active one), and otherwise `sdkTracer`, which makes the same SDK spans
 * without @effect/opentelemetry's per-span extras (see there).
 */
export const layerInMemory = (options: ResourceOptions = {}): Layer.Layer<InMemorySpans> =>
  Layer.unwrapEffect(
    Effect.sync(() => {
      const kept = new KeepSpans()
      const resource = OtelResource.layerFromEnv(OtelResource.configToAttributes(resourceOf(options)))
      const provider = NodeSdk.layerTracerProvider(restoreArrayAttributes(kept))
      const otel = Layer.provideMerge(OtelTracer.layerTracer, provider).pipe(Layer.provide(resource))
      const spans = Layer.succeed(InMemorySpans, {
        spans: Effect.sync(() => kept.spans.slice()),
        reset: Effect.sync(() => {
          kept.spans = []
        })
      })
      return Layer.merge(spans, Layer.discard(Layer.provide(installTracer, otel)))
    })
  )

/**
 * Whether OpenTelemetry's context propagates: a context manager is registered
 * (OpenTelemetry's default is a no-op one, under which `context.with` runs its
 * function in the root context whatever it is given).
 */
const contextPropagates = (): boolean => {
  const key = OtelApi.createContextKey("pagantic.probe")
  const probe = OtelApi.ROOT_CONTEXT.setValue(key, true)
  return OtelApi.context.with(probe, () => OtelApi.context.active().getValue(key) === true)
}

/**
 * The Effect tracer over the SDK's tracer: @effect/opentelemetry's when
 * OpenTelemetry's context propagates, `sdkTracer` when it goes nowhere (no
 * context manager): @effect/opentelemetry then still builds an OpenTelemetry
 * context around every run of a fiber in a span, and per span keeps a second
 * copy of its attributes and turns arrays into JSON text, for nobody to read.
 */
const installTracer: Layer.Layer<never, never, OtelTracer.OtelTracer> = Layer.unwrapEffect(
  Effect.map(OtelTracer.OtelTracer, (tracer) =>
    contextPropagates() ? Layer.unwrapEffect(Effect.map(OtelTracer.make, Layer.setTracer)) : Layer.setTracer(sdkTracer(tracer)))
)

// ---------------------------------------------------------------------------
// OTLP
// ---------------------------------------------------------------------------

export interface OtlpOptions extends ResourceOptions {
  /** The collector's base URL, e.g. http://localhost:4318 (paths /v1/traces and /v1/metrics are added). */
  readonly endpoint: string
  readonly headers?: Record<string, string> | undefined
  /** How often batches are sent. Default 5 seconds for spans, 10 for metrics. */
  readonly exportInterval?: Duration.DurationInput | undefined
  /** How long shutdown may take to flush what is left. Default 3 seconds. */
  readonly shutdownTimeout?: Duration.DurationInput | undefined
}

/**
 * Exports spans and Effect metrics over OTLP/HTTP (JSON) with the fetch HttpClient.
 * What is still buffered is flushed when the layer's scope closes.
 */
export const layerOtlp = (options: OtlpOptions): Layer.Layer<never> =>
  Otlp.layerJson({
    baseUrl: options.endpoint,
    resource: resourceOf(options),
    ...(options.headers === undefined ? {} : { headers: options.headers }),
    ...(options.exportInterval === undefined
      ? {}
      : { tracerExportInterval: options.exportInterval, metricsExportInterval: options.exportInterval }),
    ...(options.shutdownTimeout === undefined ? {} : { shutdownTimeout: options.shutdownTimeout })
  }).pipe(Layer.provide(FetchHttpClient.layer))

/**
 * `layerOtlp` when an endpoint is configured (default: `PAGANTIC_OTLP_ENDPOINT`),
 * no export at all otherwise. The service name comes from `PAGANTIC_SERVICE_NAME`
 * (default "pagantic").
 */
export const layerConfig = (
  config: {
    readonly endpoint?: Config.Config<Option.Option<string>>
    readonly serviceName?: Config.Config<string>
  } = {}
): Layer.Layer<never, ConfigError.ConfigError> =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const endpoint = yield* (config.endpoint ?? Config.option(Config.nonEmptyString("PAGANTIC_OTLP_ENDPOINT")))
      const serviceName = yield* (config.serviceName ?? Config.withDefault(Config.string("PAGANTIC_SERVICE_NAME"), "pagantic"))
      return Option.isSome(endpoint) ? layerOtlp({ endpoint: endpoint.value, serviceName }) : Layer.empty
    })
  )

// ---------------------------------------------------------------------------
// Metrics through Effect's Metric module
// ---------------------------------------------------------------------------

/** Latency of a layer's unit of work, in milliseconds, tagged `layer`. */
export const latency = Metric.histogram(
  "pagantic.latency_ms",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 16 }),
  "Latency of one unit of work per pagantic layer (inference, tool, ...)"
)

/** Tokens per inference, tagged `gen_ai.token.type` (input or output), as OpenTelemetry's gen_ai conventions name it. */
export const tokenUsage = Metric.counter("gen_ai.client.token.usage", {
  description: "Tokens used by inference, by type"
})

/** The prefix of the counters the Metrics service exports. */
const counterPrefix = "pagantic."

/**
 * The counter a name of the Metrics service (`tool_calls`, `retries`, `votes`...)
 * is exported as; names past the service's bound share `pagantic.other_names`.
 */
export const counter = (name: string): Metric.Metric.Counter<number> => {
  const exported = name === Observe.otherName ? "other_names" : name
  return Metric.counter(`${counterPrefix}${exported}`, { description: `pagantic ${exported.replaceAll("_", " ")}` })
}

const costName = "pagantic.cost"

/** Cost of inference in the price table's currency, tagged `gen_ai.request.model`. */
export const cost = Metric.counter(costName, { description: "Inference cost from the per-model price table" })

const inputTokens = Metric.tagged(tokenUsage, "gen_ai.token.type", "input")
const outputTokens = Metric.tagged(tokenUsage, "gen_ai.token.type", "output")

/** The counters of the Metrics service in Effect's registry, by the service's names. */
const countersOf = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): Record<string, number> => {
  const counters: Record<string, number> = {}
  for (const { metricKey, metricState } of pairs) {
    if (!metricKey.name.startsWith(counterPrefix) || metricKey.tags.length > 0) continue
    if (!MetricKeyType.isCounterKey(metricKey.keyType) || !MetricState.isCounterState(metricState)) continue
    const name = metricKey.name.slice(counterPrefix.length)
    counters[name === "other_names" ? Observe.otherName : name] = Number(metricState.count)
  }
  return counters
}

/**
 * A Metrics service on Effect's `Metric` (which `layerOtlp` exports): counters
 * (`pagantic.{name}`), tokens (`gen_ai.client.token.usage{gen_ai.token.type}`)
 * and latencies (`pagantic.latency_ms{layer}`) are recorded there and nowhere
 * else, so what is exported and what `snapshot` says cannot drift apart. The
 * snapshot reads the counters and token totals back from Effect's registry,
 * which is global: they are the process's values, the ones the exporter sends
 * (two such layers in one process see the same counts). A histogram keeps
 * buckets, not samples, so the snapshot's latency lists are this layer's most
 * recent samples (up to `maxSamples` per layer). Layer names and counter names
 * are bounded as the in-memory metrics bound them (`maxNames`; further names
 * share one), which also bounds the exported tag values and metric names.
 */
export const makeMetricsBounded = (options: Observe.MetricsOptions = {}): Effect.Effect<MetricsService> =>
  Effect.sync(() => {
    const samples = Observe.makeLatencySamples(options)
    const slot = Observe.makeNameSlots(options)
    return {
      recordLatency: (layer, millis) =>
        Effect.suspend(() => Metric.update(Metric.tagged(latency, "layer", samples.record(layer, millis)), millis)),
      recordTokens: (usage) =>
        Effect.zipRight(
          Metric.incrementBy(inputTokens, usage.promptTokens),
          Metric.incrementBy(outputTokens, usage.outputTokens)
        ),
      increment: (name, delta = 1) => Effect.suspend(() => Metric.incrementBy(counter(slot(name)), delta)),
      snapshot: Effect.gen(function* () {
        const pairs = yield* Metric.snapshot
        return {
          latencies: samples.snapshot(),
          counters: countersOf(pairs),
          promptTokens: (yield* Metric.value(inputTokens)).count,
          outputTokens: (yield* Metric.value(outputTokens)).count
        }
      })
    } satisfies MetricsService
  })

/** `makeMetricsBounded` with the in-memory metrics' default bounds. */
export const makeMetrics: Effect.Effect<MetricsService> = makeMetricsBounded()

/** Metrics through Effect's `Metric` (see `makeMetricsBounded`). */
export const metrics: Layer.Layer<Metrics> = Layer.effect(Metrics, makeMetrics)

/**
 * A CostTracker on Effect's `Metric`: usage priced by the per-model table goes
 * to `pagantic.cost{gen_ai.request.model}` and nowhere else, and `totalCost` is
 * the sum of that counter over every model in Effect's registry (the process's
 * total, as exported).
 */
export const makeCostTracker = (prices: Readonly<Record<string, Price>>): Effect.Effect<CostTrackerService> =>
  Effect.succeed({
    recordUsage: (model, usage) => {
      const amount = Observe.costOf(prices, model, usage)
      return amount === 0 ? Effect.void : Metric.incrementBy(Metric.tagged(cost, "gen_ai.request.model", model), amount)
    },
    totalCost: Effect.map(Metric.snapshot, (pairs) => {
      let total = 0
      for (const { metricKey, metricState } of pairs) {
        if (metricKey.name === costName && MetricState.isCounterState(metricState)) total += Number(metricState.count)
      }
      return total
    })
  })

export const costTracker = (prices: Readonly<Record<string, Price>> = {}): Layer.Layer<CostTracker> =>
  Layer.effect(CostTracker, makeCostTracker(prices))

/** Events in memory, metrics through Effect's Metric module, and cost from `prices`. */
export const layerObserve = (
  prices: Readonly<Record<string, Price>> = {}
): Layer.Layer<EventLog | Metrics | CostTracker> =>
  Layer.mergeAll(Observe.eventLogMemory, metrics, costTracker(prices))
