/**
 * Observe layers: in-memory (for tests, development and a long-running server)
 * and no-op implementations of EventLog, Metrics and CostTracker.
 *
 * The in-memory event log and metrics are bounded, because a server records on
 * every request for its whole life: the log is a ring of at most `maxEvents`
 * events and `maxBytes` approximate bytes (the oldest dropped first), and a
 * string longer than `maxStringLength` in an event (a tool name, an error, an id,
 * a value of a Custom event's data) is kept as a short excerpt, so one hostile
 * request cannot pin a megabyte. Metrics keep the last `maxSamples` latencies per
 * layer and at most `maxNames` distinct layers and counters. Recording is O(1);
 * each write is one synchronous step, so it is atomic between fibers, and reads
 * are copies, so no caller can alias another's view.
 *
 * This module is the public face; the parts are in observe/: the ring (Ring),
 * the event log and how it bounds an event (EventLog), the metrics (Metrics)
 * and the cost tracker (CostTracker).
 */
import * as Layer from "effect/Layer"
import type { CostTracker } from "../services/CostTracker.js"
import type { EventLog } from "../services/EventLog.js"
import type { Metrics } from "../services/Metrics.js"
import type { Price } from "./observe/CostTracker.js"
import { costTrackerMemory, costTrackerNoop } from "./observe/CostTracker.js"
import { eventLogMemory, eventLogNoop } from "./observe/EventLog.js"
import { metricsMemory, metricsNoop } from "./observe/Metrics.js"

export { costOf, costTrackerMemory, costTrackerNoop, makeCostTracker, type Price } from "./observe/CostTracker.js"
export {
  approximateEventBytes,
  boundEvent,
  eventLogBounded,
  eventLogDefaults,
  eventLogMemory,
  eventLogNoop,
  type EventLogOptions,
  excerpt,
  makeEventLog,
  makeEventLogBounded
} from "./observe/EventLog.js"
export {
  type LatencySamples,
  makeLatencySamples,
  makeMetrics,
  makeMetricsBounded,
  makeNameSlots,
  metricsBounded,
  metricsDefaults,
  metricsMemory,
  metricsNoop,
  type MetricsOptions,
  otherName
} from "./observe/Metrics.js"

/** All three in memory. */
export const layerMemory = (prices: Readonly<Record<string, Price>> = {}): Layer.Layer<EventLog | Metrics | CostTracker> =>
  Layer.mergeAll(eventLogMemory, metricsMemory, costTrackerMemory(prices))

/** All three as no-ops. */
export const layerNoop: Layer.Layer<EventLog | Metrics | CostTracker> = Layer.mergeAll(
  eventLogNoop,
  metricsNoop,
  costTrackerNoop
)
