// Transitional: the concepts moved to EventLog.ts, Metrics.ts and CostTracker.ts (removed once no importer is left).
export { currentCorrelation, EventLog, recordEvent, withCorrelation } from "./EventLog.js"
export type { EventBase, Service as EventLogService } from "./EventLog.js"
export { Metrics, withMetrics } from "./Metrics.js"
export type { Service as MetricsService, Snapshot as MetricsSnapshot } from "./Metrics.js"
export { CostTracker } from "./CostTracker.js"
export type { Service as CostTrackerService } from "./CostTracker.js"
