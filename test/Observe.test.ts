import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Event from "../src/domain/Event.js"
import { CorrelationContext } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/Observe.js"
import { CostTracker, EventLog, Metrics, recordEvent, withCorrelation } from "../src/services/Observe.js"

const custom = (action: string) =>
  recordEvent((base) => new Event.Custom({ ...base, layer: "test", action, data: { n: action } }))

describe("Observe layers", () => {
  it.effect("records events in order with the current correlation; reads are copies", () =>
    Effect.gen(function* () {
      yield* custom("a").pipe(withCorrelation({ requestId: "r1", sessionId: "s1" }))
      yield* custom("b").pipe(withCorrelation({ requestId: "r2" }))
      const log = yield* EventLog
      const events = yield* log.events
      expect(events.map((e) => [e.correlation.requestId, e._tag === "Custom" && e.action])).toEqual([
        ["r1", "a"],
        ["r2", "b"]
      ])
      expect(events[0]!.correlation.sessionId).toBe("s1")
      ;(events as Array<Event.Event>).length = 0
      expect(yield* log.events).toHaveLength(2)
    }).pipe(Effect.provide(Observe.eventLogMemory))
  )

  it.effect("keeps every event under concurrent writers", () =>
    Effect.gen(function* () {
      yield* Effect.forEach(Array.from({ length: 200 }, (_, i) => i), (i) => custom(String(i)), { concurrency: 16 })
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      expect(events).toHaveLength(200)
      expect(new Set(events.map((e) => (e as Event.Custom).action)).size).toBe(200)
    }).pipe(Effect.provide(Observe.eventLogMemory))
  )

  it.effect("records nothing and fails nothing without an EventLog", () =>
    Effect.gen(function* () {
      yield* custom("x")
    })
  )

  it.effect("events decode back from JSON (the Schema union)", () =>
    Effect.gen(function* () {
      yield* custom("a").pipe(withCorrelation({ requestId: "r1" }))
      const [event] = yield* Effect.flatMap(EventLog, (l) => l.events)
      const { Schema } = yield* Effect.promise(() => import("effect"))
      const json = JSON.parse(JSON.stringify(Schema.encodeSync(Event.Event)(event!)))
      const back = Schema.decodeUnknownSync(Event.Event)(json)
      expect(back.correlation).toEqual(new CorrelationContext({ requestId: "r1" }))
    }).pipe(Effect.provide(Observe.eventLogMemory))
  )

  it.effect("the no-op layer keeps nothing", () =>
    Effect.gen(function* () {
      yield* custom("a")
      expect(yield* Effect.flatMap(EventLog, (l) => l.events)).toEqual([])
    }).pipe(Effect.provide(Observe.eventLogNoop))
  )

  it.effect("metrics count latencies, tokens and counters; cost follows the price table", () =>
    Effect.gen(function* () {
      const metrics = yield* Metrics
      yield* metrics.recordLatency("inference", 12)
      yield* metrics.recordLatency("inference", 8)
      yield* metrics.recordTokens(TokenUsage.make({ promptTokens: 100, outputTokens: 10 }))
      yield* metrics.increment("tool_calls")
      yield* metrics.increment("tool_calls", 2)
      const snap = yield* metrics.snapshot
      expect(snap.latencies.inference).toEqual([12, 8])
      expect(snap.counters.tool_calls).toBe(3)
      expect(snap.promptTokens).toBe(100)
      const cost = yield* CostTracker
      yield* cost.recordUsage("gpt-x", TokenUsage.make({ promptTokens: 1_000_000, outputTokens: 500_000 }))
      yield* cost.recordUsage("unpriced", TokenUsage.make({ promptTokens: 1_000_000 }))
      expect(yield* cost.totalCost).toBeCloseTo(2 + 0.5 * 8)
    }).pipe(Effect.provide(Observe.layerMemory({ "gpt-x": { promptPerMillion: 2, outputPerMillion: 8 } })))
  )
})
