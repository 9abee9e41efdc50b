/**
 * Layer 10: observability, what inference cost.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { TokenUsage } from "../domain/TokenUsage.js"

export interface Service {
  readonly recordUsage: (model: string, usage: TokenUsage) => Effect.Effect<void>
  readonly totalCost: Effect.Effect<number>
}

/** Tracks what inference cost. */
export class CostTracker extends Context.Tag("pagantic/CostTracker")<CostTracker, Service>() {}
