/**
 * The in-memory event log, bounded: a ring of at most `maxEvents` events and
 * `maxBytes` approximate bytes (the oldest dropped first), every string longer
 * than `maxStringLength` in an event (a tool name, an error, an id, a value of a
 * Custom event's data) kept as a short excerpt, so one hostile request cannot
 * pin a megabyte. Recording is O(1); `events` is a copy, and `subscribe` pushes
 * each event as it is recorded (through a sliding PubSub, so a listener that
 * stops reading loses its oldest unread events and holds up no one).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PubSub from "effect/PubSub"
import type { Event } from "../../domain/Event.js"
import { CorrelationContext } from "../../domain/System.js"
import type { Service as EventLogService } from "../../services/EventLog.js"
import { EventLog } from "../../services/EventLog.js"
import { positive, Ring } from "./Ring.js"

/** Bounds of the in-memory event log. */
export interface EventLogOptions {
  /** Events kept at most; past it the oldest is dropped. Default 10,000. */
  readonly maxEvents?: number | undefined
  /** Approximate bytes kept at most (see `approximateEventBytes`); past it the oldest are dropped. Default 16 MiB. */
  readonly maxBytes?: number | undefined
  /** A longer string in an event is kept as an excerpt of this many characters. Default 2,048. */
  readonly maxStringLength?: number | undefined
  /** Events a subscriber may leave unread; past it its oldest are dropped. Default 1,024. */
  readonly subscriberBacklog?: number | undefined
}

/** The bounds `eventLogMemory` and `makeEventLog` use. */
export const eventLogDefaults = {
  maxEvents: 10_000,
  maxBytes: 16 * 1024 * 1024,
  maxStringLength: 2_048,
  subscriberBacklog: 1_024
} as const

/** Values of a Custom event's data visited at most, and how deep; the rest becomes a marker. */
const DATA_NODES = 64
const DATA_DEPTH = 8
/** What a number, a boolean, an object's slot or an event's fixed fields count for. */
const SLOT_BYTES = 8
const EVENT_BYTES = 128
const ELIDED = "…"

/** `text` cut to `max` characters (never inside a surrogate pair), marked with how much went. */
export const excerpt = (text: string, max: number): string => {
  if (text.length <= max) return text
  const code = text.charCodeAt(max - 1)
  const cut = code >= 0xd800 && code <= 0xdbff ? max - 1 : max
  return `${text.slice(0, cut)}${ELIDED} [${text.length - cut} more characters]`
}

const isPlainObject = (value: object): value is Record<string, unknown> => {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

interface Budget {
  nodes: number
  bytes: number
}

/**
 * `value` with long strings cut to excerpts, arrays and plain objects walked at
 * most DATA_NODES values and DATA_DEPTH levels deep (what lies beyond becomes a
 * marker); copied only where something changed. Other objects are kept as they
 * are and counted as one slot: Custom data comes from code, not from clients.
 */
const boundData = (value: unknown, max: number, budget: Budget, depth: number): unknown => {
  if (typeof value === "string") {
    const kept = excerpt(value, max)
    budget.bytes += kept.length
    return kept
  }
  if (typeof value !== "object" || value === null || !(Array.isArray(value) || isPlainObject(value))) {
    budget.bytes += SLOT_BYTES
    return value
  }
  if (depth >= DATA_DEPTH || budget.nodes <= 0) {
    budget.bytes += ELIDED.length
    return ELIDED
  }
  if (Array.isArray(value)) {
    let out: Array<unknown> | undefined
    const n = Math.min(value.length, budget.nodes)
    for (let i = 0; i < n; i++) {
      budget.nodes--
      budget.bytes += SLOT_BYTES
      const v = boundData(value[i], max, budget, depth + 1)
      if (v !== value[i]) (out ??= value.slice(0, i)).push(v)
      else out?.push(v)
    }
    if (n < value.length) {
      budget.bytes += ELIDED.length
      return [...(out ?? value.slice(0, n)), ELIDED]
    }
    return out ?? value
  }
  const keys = Object.keys(value)
  const n = Math.min(keys.length, budget.nodes)
  let out: Record<string, unknown> | undefined
  for (let i = 0; i < n; i++) {
    budget.nodes--
    const key = keys[i]!
    const k = excerpt(key, max)
    budget.bytes += SLOT_BYTES + k.length
    const v = boundData(value[key], max, budget, depth + 1)
    if (out === undefined && (k !== key || v !== value[key])) {
      out = {}
      for (let j = 0; j < i; j++) define(out, keys[j]!, value[keys[j]!])
    }
    if (out !== undefined) define(out, k, v)
  }
  if (n < keys.length) {
    out ??= Object.fromEntries(keys.slice(0, n).map((k) => [k, value[k]]))
    define(out, ELIDED, `${keys.length - n} more keys`)
    budget.bytes += ELIDED.length + SLOT_BYTES
  }
  return out ?? value
}

/** An own data property, even for a key such as `__proto__`. */
const define = (target: Record<string, unknown>, key: string, value: unknown): void =>
  void Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })

/** The correlation with every string field cut to `max` characters; the same value when none is longer. */
const boundCorrelation = (correlation: CorrelationContext, max: number, budget: Budget): CorrelationContext => {
  let changed = false
  const fields: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(correlation)) {
    if (typeof value === "string") {
      const kept = excerpt(value, max)
      budget.bytes += SLOT_BYTES + kept.length
      changed ||= kept !== value
      fields[key] = kept
    } else fields[key] = value
  }
  return changed ? new CorrelationContext(fields as ConstructorParameters<typeof CorrelationContext>[0], true) : correlation
}

/**
 * The event as the log keeps it, with its approximate size: every string field
 * (of the event, of its correlation, inside a Custom event's data) longer than
 * `maxStringLength` cut to an excerpt, and the size counted as one byte per kept
 * character plus a fixed amount per field and per event. Bounded work whatever
 * the event holds: no serialization, and data walked at most 64 values deep.
 * The same instance comes back when nothing was cut.
 */
export const boundEvent = (event: Event, maxStringLength: number): { readonly event: Event; readonly bytes: number } => {
  const budget: Budget = { nodes: DATA_NODES, bytes: EVENT_BYTES }
  let fields: Record<string, unknown> | undefined
  const set = (key: string, original: unknown, kept: unknown) => {
    if (kept !== original) (fields ??= { ...event })[key] = kept
  }
  for (const [key, value] of Object.entries(event)) {
    if (key === "_tag") continue
    if (typeof value === "string") {
      const kept = excerpt(value, maxStringLength)
      budget.bytes += SLOT_BYTES + kept.length
      set(key, value, kept)
    } else if (key === "correlation" && value instanceof CorrelationContext) {
      set(key, value, boundCorrelation(value, maxStringLength, budget))
    } else if (key === "data") {
      set(key, value, boundData(value, maxStringLength, budget, 0))
    } else budget.bytes += SLOT_BYTES
  }
  if (fields === undefined) return { event, bytes: budget.bytes }
  const { _tag: _, ...props } = fields
  const Constructor = event.constructor as new (props: unknown, disableValidation: boolean) => Event
  return { event: new Constructor(props, true), bytes: budget.bytes }
}

/** The approximate size the log counts for an event (see `boundEvent`). */
export const approximateEventBytes = (event: Event, maxStringLength: number = eventLogDefaults.maxStringLength): number =>
  boundEvent(event, maxStringLength).bytes

/** An in-memory event log within `options`' bounds; `events` is a copy, oldest first. */
export const makeEventLogBounded = (options: EventLogOptions = {}): Effect.Effect<EventLogService> =>
  Effect.gen(function* () {
    const maxEvents = positive(options.maxEvents, eventLogDefaults.maxEvents)
    const maxBytes = positive(options.maxBytes, eventLogDefaults.maxBytes)
    const maxStringLength = positive(options.maxStringLength, eventLogDefaults.maxStringLength)
    const pushed = yield* PubSub.sliding<Event>(positive(options.subscriberBacklog, eventLogDefaults.subscriberBacklog))
    const ring = new Ring<{ readonly event: Event; readonly bytes: number }>(maxEvents)
    let bytes = 0
    // with no one subscribed, recording stays one synchronous step
    let subscribers = 0
    return {
      record: (event) =>
        Effect.suspend(() => {
          const entry = boundEvent(event, maxStringLength)
          bytes += entry.bytes - (ring.push(entry)?.bytes ?? 0)
          while (bytes > maxBytes && ring.size > 0) bytes -= ring.shift()!.bytes
          return subscribers === 0 ? Effect.void : PubSub.publish(pushed, entry.event)
        }),
      events: Effect.sync(() => ring.toArray().map((entry) => entry.event)),
      subscribe: Effect.acquireRelease(
        Effect.sync(() => subscribers++),
        () => Effect.sync(() => subscribers--)
      ).pipe(Effect.zipRight(PubSub.subscribe(pushed)))
    } satisfies EventLogService
  })

/** An in-memory event log with the default bounds (`eventLogDefaults`). */
export const makeEventLog: Effect.Effect<EventLogService> = makeEventLogBounded()

export const eventLogMemory: Layer.Layer<EventLog> = Layer.effect(EventLog, makeEventLog)

/** An in-memory event log within `options`' bounds. */
export const eventLogBounded = (options: EventLogOptions): Layer.Layer<EventLog> =>
  Layer.effect(EventLog, makeEventLogBounded(options))

export const eventLogNoop: Layer.Layer<EventLog> = Layer.succeed(EventLog, {
  enabled: false,
  record: () => Effect.void,
  events: Effect.succeed([])
})
