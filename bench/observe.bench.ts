/**
 * Recording cost over a server's life: the in-memory event log, metrics and
 * conversation store that `serve` uses, each timed on 1,000 writes into a store
 * already holding a little versus a lot, side by side in one process (rounds
 * alternate which side runs first; the ratio is the median of per-round ratios,
 * the interquartile range beside it). O(1) writes give ~1.0. A reference row
 * times the copy-on-record log these replaced, to show what the ratio catches.
 *
 *   npm run bench                    (with the other benchmarks, bench/index.ts)
 *   npx tsx bench/observe.bench.ts   (alone)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import { fileURLToPath } from "node:url"
import * as Event from "../src/domain/Event.js"
import * as Message from "../src/domain/Message.js"
import { CorrelationContext } from "../src/domain/System.js"
import * as Observe from "../src/layers/InMemoryObserve.js"
import { makeInMemory as makeInMemoryConversationStore } from "../src/services/ConversationStore.js"
import type { Service as EventLogService } from "../src/services/EventLog.js"
import type { Row } from "./Table.js"
import { median, quantile } from "./Table.js"


const ROUNDS = Number(process.env.OBSERVE_BENCH_ROUNDS ?? 15)
const WRITES = 1_000
const SMALL = 10_000
const LARGE = 200_000
/** The copy-on-record log is quadratic: its large side stays small enough to finish. */
const REFERENCE_LARGE = 30_000
const GOAL = 1.5


const event = new Event.ToolEnd({
  timestamp: 0,
  layer: "tool",
  correlation: new CorrelationContext({ requestId: "r1", sessionId: "s1" }),
  toolName: "calculator",
  toolCallId: "c1",
  durationMs: 1,
  success: true
})

const turn = [Message.user("What is 2 + 2?"), Message.assistant("4")]

/** The log these benchmarks replaced: an array copied on every record. */
const copyOnRecordLog: Effect.Effect<EventLogService> = Effect.map(Ref.make<ReadonlyArray<Event.Event>>([]), (ref) => ({
  record: (e) => Ref.update(ref, (events) => [...events, e]),
  events: Effect.map(Ref.get(ref), (events) => events.slice())
}))

const timeMs = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const start = yield* Effect.sync(() => performance.now())
    yield* effect
    return (yield* Effect.sync(() => performance.now())) - start
  })

const repeat = (n: number, write: (i: number) => Effect.Effect<void>) =>
  Effect.forEach(Array.from({ length: n }, (_, i) => i), write, { discard: true })

/**
 * `WRITES` writes timed on the small side against the large side, `rounds` times
 * (alternating which runs first); the large side's time over the small's.
 */
const sideBySide = (
  name: string,
  small: { readonly label: string; readonly write: (i: number) => Effect.Effect<void> },
  large: { readonly label: string; readonly write: (i: number) => Effect.Effect<void> },
  goal: "ratio" | "reference",
  rounds: number = ROUNDS
) =>
  Effect.gen(function*() {
    const ratios: Array<number> = []
    const smallMs: Array<number> = []
    const largeMs: Array<number> = []
    for (let round = 0; round < rounds; round++) {
      const first = round % 2 === 0
      const x = yield* timeMs(repeat(WRITES, first ? small.write : large.write))
      const y = yield* timeMs(repeat(WRITES, first ? large.write : small.write))
      const [s, l] = first ? [x, y] : [y, x]
      smallMs.push(s)
      largeMs.push(l)
      ratios.push(l / s)
    }
    const ratio = median(ratios)
    return {
      name,
      ours: `${median(largeMs).toFixed(2)} ms at ${large.label}`,
      baseline: `${median(smallMs).toFixed(2)} ms at ${small.label}`,
      ratio,
      spread: `${quantile(ratios, 0.25).toFixed(2)}-${quantile(ratios, 0.75).toFixed(2)}`,
      goal: goal === "reference" ? "(reference)" : `<= ${GOAL}`,
      met: goal === "reference" || ratio <= GOAL
    } satisfies Row
  })

/** `sideBySide` on a target prepared with `small` writes against one prepared with `large`. */
const compare = <T>(
  name: string,
  make: Effect.Effect<T>,
  write: (target: T, i: number) => Effect.Effect<void>,
  small: number,
  large: number,
  goal: "ratio" | "reference",
  rounds: number = ROUNDS
) =>
  Effect.gen(function*() {
    const a = yield* make
    const b = yield* make
    yield* repeat(small, (i) => write(a, i))
    yield* repeat(large, (i) => write(b, i))
    return yield* sideBySide(
      name,
      { label: small.toLocaleString("en-US"), write: (i) => write(a, i) },
      { label: large.toLocaleString("en-US"), write: (i) => write(b, i) },
      goal,
      rounds
    )
  })

/**
 * New sessions into full stores: each write drops the least recently written
 * session. WRITES new sessions timed on a store full at the default 10,000
 * sessions that has dropped FULL_DROPS already, against one full at 1,000: the
 * write must not grow with the sessions kept or dropped (a Map's oldest entry
 * found by `keys().next()` did: services/internal/Sessions).
 */
const FULL_DROPS = 30_000
const fullStores = Effect.gen(function*() {
  const large = yield* makeInMemoryConversationStore()
  const small = yield* makeInMemoryConversationStore({ maxSessions: 1_000 })
  let next = 0
  const fresh = (store: typeof large) => () => store.save(`new${next++}`, turn)
  yield* repeat(10_000 + FULL_DROPS, fresh(large))
  yield* repeat(1_000 + FULL_DROPS, fresh(small))
  return yield* sideBySide(
    `conversation store: ${WRITES.toLocaleString("en-US")} new sessions into a full store, 10,000 sessions vs 1,000 (each after ${FULL_DROPS.toLocaleString("en-US")} dropped)`,
    { label: "1,000", write: fresh(small) },
    { label: "10,000", write: fresh(large) },
    "ratio"
  )
})

export const run: Effect.Effect<ReadonlyArray<Row>> = Effect.all([
  compare(
    `event log: ${WRITES.toLocaleString("en-US")} records, log holding 200k vs 10k`,
    Observe.makeEventLogBounded({ maxEvents: LARGE + (ROUNDS + 1) * WRITES, maxBytes: Number.MAX_SAFE_INTEGER }),
    (log, _) => log.record(event),
    SMALL,
    LARGE,
    "ratio"
  ),
  compare(
    `event log, default bounds: ${WRITES.toLocaleString("en-US")} records after 200k vs 10k`,
    Observe.makeEventLog,
    (log, _) => log.record(event),
    SMALL,
    LARGE,
    "ratio"
  ),
  compare(
    `copy-on-record log (replaced): ${WRITES.toLocaleString("en-US")} records, holding 30k vs 10k`,
    copyOnRecordLog,
    (log, _) => log.record(event),
    SMALL,
    REFERENCE_LARGE,
    "reference",
    3
  ),
  compare(
    `metrics: ${WRITES.toLocaleString("en-US")} latencies after 200k vs 10k`,
    Observe.makeMetrics,
    (metrics, i) => Effect.zipRight(metrics.recordLatency("inference", i), metrics.increment("requests")),
    SMALL,
    LARGE,
    "ratio"
  ),
  compare(
    `conversation store: ${WRITES.toLocaleString("en-US")} turns, holding 10,000 sessions vs 1,000`,
    makeInMemoryConversationStore(),
    (store, i) => store.append(`s${i}`, turn),
    WRITES,
    10_000,
    "ratio"
  ),
  fullStores
])

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  NodeRuntime.runMain(
    Effect.flatMap(run, (rows) =>
      Effect.forEach(rows, (r) =>
        Console.log(`${r.name}: ${r.ours} / ${r.baseline} = ${r.ratio.toFixed(3)} (IQR ${r.spread}, goal ${r.goal}${r.met ? "" : ", NOT MET"})`)
      )
    )
  )
}
