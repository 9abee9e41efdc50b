/**
 * The in-memory cost tracker: usage priced by a per-model table, summed; and the
 * cost formula every tracker uses (`costOf`).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import type { TokenUsage } from "../../domain/TokenUsage.js"
import type { Service as CostTrackerService } from "../../services/CostTracker.js"
import { CostTracker } from "../../services/CostTracker.js"

/** Price per million tokens, per model. A model missing from the table costs nothing. */
export interface Price {
  readonly promptPerMillion: number
  readonly outputPerMillion: number
}

/** What `usage` on `model` costs by `prices` (0 for a model missing from the table). */
export const costOf = (prices: Readonly<Record<string, Price>>, model: string, usage: TokenUsage): number => {
  const price = prices[model]
  return price === undefined
    ? 0
    : (usage.promptTokens * price.promptPerMillion + usage.outputTokens * price.outputPerMillion) / 1_000_000
}

export const makeCostTracker = (prices: Readonly<Record<string, Price>>): Effect.Effect<CostTrackerService> =>
  Effect.map(Ref.make(0), (total) => ({
    recordUsage: (model, usage) => {
      const cost = costOf(prices, model, usage)
      return cost === 0 ? Effect.void : Ref.update(total, (t) => t + cost)
    },
    totalCost: Ref.get(total)
  }))

export const costTrackerMemory = (prices: Readonly<Record<string, Price>> = {}): Layer.Layer<CostTracker> =>
  Layer.effect(CostTracker, makeCostTracker(prices))

export const costTrackerNoop: Layer.Layer<CostTracker> = Layer.succeed(CostTracker, {
  recordUsage: () => Effect.void,
  totalCost: Effect.succeed(0)
})
