import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Event from "../src/domain/Event.js"
import { CorrelationContext } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import { CostTracker } from "../src/services/CostTracker.js"
import { EventLog, recordEvent, withCorrelation } from "../src/services/EventLog.js"
import { Metrics } from "../src/services/Metrics.js"

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

  it.effect("records nothing and fails nothing without an EventLog: the event is not even built", () =>
    Effect.gen(function* () {
      let built = 0
      const exit = yield* Effect.exit(
        recordEvent((base) => {
          built++
          return new Event.Custom({ ...base, layer: "test", action: "x", data: {} })
        })
      )
      expect(exit._tag).toBe("Success")
      expect(built).toBe(0)
      // with a log the same call builds and records it
      yield* recordEvent((base) => {
        built++
        return new Event.Custom({ ...base, layer: "test", action: "x", data: {} })
      }).pipe(Effect.provide(Observe.eventLogMemory))
      expect(built).toBe(1)
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

  it.effect("metrics keep the last maxSamples latencies per layer, oldest first", () =>
    Effect.gen(function* () {
      const metrics = yield* Metrics
      for (let i = 0; i < 5_000; i++) yield* metrics.recordLatency("inference", i)
      const samples = (yield* metrics.snapshot).latencies.inference!
      expect(samples).toHaveLength(1_024)
      expect(samples[0]).toBe(5_000 - 1_024)
      expect(samples.at(-1)).toBe(4_999)
    }).pipe(Effect.provide(Observe.metricsMemory))
  )

  it.effect("metrics keep at most maxNames distinct names; the rest count under otherName", () =>
    Effect.gen(function* () {
      const metrics = yield* Metrics
      for (let i = 0; i < 10; i++) {
        yield* metrics.increment(`c${i}`)
        yield* metrics.recordLatency(`l${i}`, i)
      }
      yield* metrics.increment("c0", 5)
      const snap = yield* metrics.snapshot
      expect(snap.counters).toEqual({ c0: 6, c1: 1, c2: 1, [Observe.otherName]: 7 })
      expect(Object.keys(snap.latencies)).toEqual(["l0", "l1", "l2", Observe.otherName])
      expect(snap.latencies[Observe.otherName]).toEqual([3, 4, 5, 6, 7, 8, 9])
    }).pipe(Effect.provide(Observe.metricsBounded({ maxNames: 3 })))
  )
})

describe("Observe bounds", () => {
  const correlation = new CorrelationContext({ requestId: "r" })
  /** Built without validation: 50,000 of them are recorded below. */
  const event = (i: number, text = "") =>
    new Event.Custom({ timestamp: i, layer: "test", action: text === "" ? String(i) : text, correlation, data: {} }, true)
  const recordAll = (count: number, make: (i: number) => Event.Event) =>
    Effect.flatMap(EventLog, (log) => Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) => log.record(make(i)), { discard: true }))

  it("defaults: 10,000 events, 16 MiB, strings cut at 2,048 characters; 1,024 samples and 256 names", () => {
    expect(Observe.eventLogDefaults).toEqual({ maxEvents: 10_000, maxBytes: 16 * 1024 * 1024, maxStringLength: 2_048, subscriberBacklog: 1_024 })
    expect(Observe.metricsDefaults).toEqual({ maxSamples: 1_024, maxNames: 256 })
  })

  it.effect("the default log keeps the last 10,000 of 50,000 events, in order", () =>
    Effect.gen(function* () {
      yield* recordAll(50_000, (i) => event(i))
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      expect(events).toHaveLength(10_000)
      expect(events.map((e) => e.timestamp)).toEqual(Array.from({ length: 10_000 }, (_, i) => 40_000 + i))
    }).pipe(Effect.provide(Observe.eventLogMemory))
  )

  it.effect("maxEvents: the oldest go first", () =>
    Effect.gen(function* () {
      yield* recordAll(50_000, (i) => event(i))
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      expect(events.map((e) => e.timestamp)).toEqual([49_997, 49_998, 49_999])
    }).pipe(Effect.provide(Observe.eventLogBounded({ maxEvents: 3 })))
  )

  it.effect("maxBytes: events of ~1 KB in a 100 KB log, the newest kept in order", () =>
    Effect.gen(function* () {
      yield* recordAll(1_000, (i) => event(i, `${i}:`.padEnd(1_000, "x")))
      const events = yield* Effect.flatMap(EventLog, (l) => l.events)
      expect(events.length).toBeGreaterThanOrEqual(75)
      expect(events.length).toBeLessThan(100)
      expect(events.map((e) => e.timestamp)).toEqual(Array.from({ length: events.length }, (_, i) => 1_000 - events.length + i))
      const kept = events.reduce((sum, e) => sum + Observe.approximateEventBytes(e), 0)
      expect(kept).toBeLessThanOrEqual(100_000)
    }).pipe(Effect.provide(Observe.eventLogBounded({ maxEvents: 1_000, maxBytes: 100_000 })))
  )

  it.effect("a 900 KB string anywhere in an event is kept as a 2 KB excerpt", () =>
    Effect.gen(function* () {
      const huge = "t".repeat(900_000)
      const correlation = new CorrelationContext({ requestId: huge, sessionId: "s" })
      yield* Effect.flatMap(EventLog, (log) =>
        Effect.all([
          log.record(new Event.ToolEnd({ timestamp: 1, layer: "tool", correlation, toolName: huge, toolCallId: "c", durationMs: 0, success: false, error: huge })),
          log.record(
            new Event.Custom({
              timestamp: 2,
              layer: "test",
              action: "a",
              correlation,
              data: { step: "s", big: huge, nested: { list: [1, huge] }, [huge]: 1 }
            })
          )
        ])
      )
      const [tool, custom] = yield* Effect.flatMap(EventLog, (l) => l.events)
      const json = JSON.stringify(Schema.encodeSync(Schema.Array(Event.Event))([tool!, custom!]))
      expect(json.length).toBeLessThan(30_000)
      expect(Observe.approximateEventBytes(tool!)).toBeLessThan(10_000)
      expect(Observe.approximateEventBytes(custom!)).toBeLessThan(15_000)
      const toolEnd = tool as Event.ToolEnd
      expect(toolEnd.toolName.startsWith("t".repeat(2_048))).toBe(true)
      expect(toolEnd.toolName).toMatch(/… \[897952 more characters\]$/)
      expect(toolEnd.correlation.requestId.length).toBeLessThan(2_100)
      expect(toolEnd.correlation.sessionId).toBe("s")
      const data = (custom as Event.Custom).data
      expect(data.step).toBe("s")
      expect((data.big as string).length).toBeLessThan(2_100)
      expect(((data.nested as { list: Array<string> }).list[1]!).length).toBeLessThan(2_100)
      expect(Schema.is(Event.Event)(custom)).toBe(true)
    }).pipe(Effect.provide(Observe.eventLogMemory))
  )

  it("a Custom event's data is walked at most 64 values deep; the rest is marked", () => {
    const data = { list: Array.from({ length: 1_000 }, (_, i) => i) }
    const { event: kept, bytes } = Observe.boundEvent(
      new Event.Custom({ timestamp: 0, layer: "t", action: "a", correlation: new CorrelationContext({ requestId: "r" }), data }),
      2_048
    )
    const list = (kept as Event.Custom).data.list as Array<unknown>
    expect(list.length).toBeLessThan(65)
    expect(list.at(-1)).toBe("…")
    expect(list.slice(0, 3)).toEqual([0, 1, 2])
    expect(bytes).toBeLessThan(2_000)
    expect(data.list).toHaveLength(1_000)
  })

  it("a data key named __proto__ stays an own key when its value is cut", () => {
    const data = JSON.parse(`{"__proto__": "${"p".repeat(5_000)}", "a": 1}`) as Record<string, unknown>
    const { event: kept } = Observe.boundEvent(
      new Event.Custom({ timestamp: 0, layer: "t", action: "a", correlation: new CorrelationContext({ requestId: "r" }), data }, true),
      2_048
    )
    const out = (kept as Event.Custom).data
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype)
    expect(Object.keys(out)).toEqual(["__proto__", "a"])
    expect((out["__proto__"] as string).length).toBeLessThan(2_100)
  })

  it("an event within bounds is kept as it was recorded", () => {
    const small = event(1, "small")
    expect(Observe.boundEvent(small, 2_048).event).toBe(small)
  })
})
