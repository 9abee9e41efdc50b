/**
 * An Effect tracer whose spans are OpenTelemetry SDK spans and nothing more
 * (`sdkTracer`), for when OpenTelemetry's context goes nowhere (no context
 * manager registered): the same SDK span, parent, links, attributes, status,
 * exception and events as @effect/opentelemetry's OtelSpan makes, without its
 * second copy of the attributes or an OpenTelemetry context built per run of a
 * fiber in a span. Telemetry.layerInMemory installs it (see there).
 */
import * as OtelTracer from "@effect/opentelemetry/Tracer"
import * as OtelApi from "@opentelemetry/api"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import type * as Exit from "effect/Exit"
import * as Inspectable from "effect/Inspectable"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"

/** Attributes the loops set as arrays (the gen_ai conventions make finish reasons a string[]). */
export const arrayAttributeKeys: ReadonlyArray<string> = ["gen_ai.response.finish_reasons", "pagantic.tool_call_ids"]

const kinds: Record<Tracer.SpanKind, OtelApi.SpanKind> = {
  internal: OtelApi.SpanKind.INTERNAL,
  client: OtelApi.SpanKind.CLIENT,
  server: OtelApi.SpanKind.SERVER,
  producer: OtelApi.SpanKind.PRODUCER,
  consumer: OtelApi.SpanKind.CONSUMER
}

const billion = 1_000_000_000n
const hrTime = (nanos: bigint): OtelApi.HrTime => [Number(nanos / billion), Number(nanos % billion)]

const arrayKeys = new Set(arrayAttributeKeys)

/**
 * An attribute value as the SDK takes it: a string, number or boolean as it is;
 * the loops' string arrays (`arrayAttributeKeys`) as arrays; anything else as
 * @effect/opentelemetry writes it (a bigint's digits, JSON text otherwise).
 */
const attributeValue = (key: string, value: unknown): OtelApi.AttributeValue => {
  switch (typeof value) {
    case "string":
    case "number":
    case "boolean":
      return value
    case "bigint":
      return value.toString()
  }
  if (Array.isArray(value) && arrayKeys.has(key) && value.every((x) => typeof x === "string")) return value.slice()
  return Inspectable.toStringUnknown(value)
}

const attributesOf = (record: Readonly<Record<string, unknown>>): OtelApi.Attributes => {
  const out: OtelApi.Attributes = {}
  for (const key in record) out[key] = attributeValue(key, record[key])
  return out
}

/** @effect/opentelemetry's span brand: its `currentOtelSpan` hands such a span's `span`, the SDK span, to the caller. */
const OtelSpanTypeId = Symbol.for("@effect/opentelemetry/Tracer/OtelSpan")

/** An Effect span's OpenTelemetry span context, as @effect/opentelemetry makes it (flags and state from the span's context). */
const spanContextOf = (span: Tracer.AnySpan, context?: Context.Context<never>): OtelApi.SpanContext => {
  const flags = context === undefined ? Option.none() : Context.getOption(context, OtelTracer.OtelTraceFlags)
  const state = context === undefined ? Option.none() : Context.getOption(context, OtelTracer.OtelTraceState)
  return {
    spanId: span.spanId,
    traceId: span.traceId,
    isRemote: span._tag === "ExternalSpan",
    traceFlags: Option.getOrElse(Option.orElse(flags, () => Context.getOption(span.context, OtelTracer.OtelTraceFlags)), () => OtelApi.TraceFlags.SAMPLED),
    traceState: Option.getOrUndefined(Option.orElse(state, () => Context.getOption(span.context, OtelTracer.OtelTraceState)))
  } as OtelApi.SpanContext
}

/**
 * An Effect span that is an OpenTelemetry SDK span and nothing more: the same
 * SDK span, parent, links, attributes, status, exception and events as
 * @effect/opentelemetry's OtelSpan makes, without its second copy of the
 * attributes (`attributes` reads the SDK span's) or an OpenTelemetry context
 * built per span (a span's own is built once, when it first has a child).
 */
class SdkSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly [OtelSpanTypeId] = OtelSpanTypeId
  readonly span: OtelApi.Span
  readonly spanId: string
  readonly traceId: string
  readonly sampled: boolean
  readonly parent: Option.Option<Tracer.AnySpan>
  status: Tracer.SpanStatus
  private otelContext: OtelApi.Context | undefined = undefined

  constructor(
    tracer: OtelApi.Tracer,
    readonly name: string,
    effectParent: Option.Option<Tracer.AnySpan>,
    readonly context: Context.Context<never>,
    public links: ReadonlyArray<Tracer.SpanLink>,
    startTime: bigint,
    readonly kind: Tracer.SpanKind,
    options: Tracer.SpanOptions | undefined
  ) {
    let parentContext: OtelApi.Context
    if (effectParent._tag === "Some") {
      this.parent = effectParent
      parentContext = contextOf(effectParent.value, context)
    } else {
      // no Effect parent: the span active in OpenTelemetry's context, if any (none without a context manager)
      const active = OtelApi.context.active()
      const otelParent = options?.root === true ? undefined : OtelApi.trace.getSpan(active)?.spanContext()
      this.parent = otelParent === undefined
        ? Option.none()
        : Option.some(Tracer.externalSpan({
          spanId: otelParent.spanId,
          traceId: otelParent.traceId,
          sampled: (otelParent.traceFlags & 1) === 1,
          context
        }))
      parentContext = this.parent._tag === "Some" ? contextOf(this.parent.value, context) : OtelApi.trace.deleteSpan(active)
    }
    this.span = tracer.startSpan(name, {
      startTime: hrTime(startTime),
      links: links.length > 0
        ? links.map((link) => ({ context: spanContextOf(link.span), attributes: attributesOf(link.attributes) }))
        : undefined,
      kind: kinds[kind]
    } as OtelApi.SpanOptions, parentContext)
    const spanContext = this.span.spanContext()
    this.spanId = spanContext.spanId
    this.traceId = spanContext.traceId
    this.status = { _tag: "Started", startTime }
    this.sampled = (spanContext.traceFlags & OtelApi.TraceFlags.SAMPLED) === OtelApi.TraceFlags.SAMPLED
  }

  /** The OpenTelemetry context with this span active: the parent context of its children. */
  childContext(): OtelApi.Context {
    return this.otelContext ??= OtelApi.trace.setSpan(OtelApi.ROOT_CONTEXT, this.span)
  }

  /** The SDK span's attributes (as it keeps them: arrays of the loops' lists, JSON text of other values). */
  get attributes(): ReadonlyMap<string, unknown> {
    return new Map(Object.entries((this.span as unknown as { readonly attributes?: OtelApi.Attributes }).attributes ?? {}))
  }

  attribute(key: string, value: unknown): void {
    this.span.setAttribute(key, attributeValue(key, value))
  }

  addLinks(links: ReadonlyArray<Tracer.SpanLink>): void {
    // a copy: the span was made with the caller's array
    this.links = [...this.links, ...links]
    this.span.addLinks(links.map((link) => ({ context: spanContextOf(link.span), attributes: attributesOf(link.attributes) })))
  }

  event(name: string, startTime: bigint, attributes?: Record<string, unknown>): void {
    this.span.addEvent(name, attributes === undefined ? undefined : attributesOf(attributes), hrTime(startTime))
  }

  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    const time = hrTime(endTime)
    this.status = { _tag: "Ended", endTime, exit, startTime: this.status.startTime }
    if (exit._tag === "Success") {
      this.span.setStatus({ code: OtelApi.SpanStatusCode.OK })
    } else if (Cause.isInterruptedOnly(exit.cause)) {
      this.span.setStatus({ code: OtelApi.SpanStatusCode.OK, message: Cause.pretty(exit.cause) })
      this.span.setAttribute("span.label", "⚠︎ Interrupted")
      this.span.setAttribute("status.interrupted", true)
    } else {
      const firstError = Cause.prettyErrors(exit.cause)[0]
      if (firstError !== undefined) {
        firstError.stack = Cause.pretty(exit.cause, { renderErrorCause: true })
        this.span.recordException(firstError, time)
        this.span.setStatus({ code: OtelApi.SpanStatusCode.ERROR, message: firstError.message })
      } else {
        // an empty cause: no error
        this.span.setStatus({ code: OtelApi.SpanStatusCode.OK })
      }
    }
    this.span.end(time)
  }
}

/** The OpenTelemetry context a child of `span` starts in. */
const contextOf = (span: Tracer.AnySpan, context: Context.Context<never>): OtelApi.Context =>
  span instanceof SdkSpan
    ? span.childContext()
    : OtelSpanTypeId in span
    ? OtelApi.trace.setSpan(OtelApi.ROOT_CONTEXT, (span as unknown as { readonly span: OtelApi.Span }).span)
    : OtelApi.trace.setSpanContext(OtelApi.ROOT_CONTEXT, spanContextOf(span, context))

/**
 * An Effect tracer whose spans are the SDK tracer's (`SdkSpan`), for when
 * OpenTelemetry's context goes nowhere (no context manager): a fiber's runs are
 * not wrapped in an OpenTelemetry context (nothing could read it).
 */
export const sdkTracer = (tracer: OtelApi.Tracer): Tracer.Tracer =>
  Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) =>
      new SdkSpan(tracer, name, parent, context, links, startTime, kind, options),
    context: (f) => f()
  })
