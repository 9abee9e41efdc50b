import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import * as InMemoryResponders from "../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../src/layers/LexicalReranker.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as Check from "../src/programs/query/Check.js"
import * as Notification from "../src/programs/query/Notification.js"
import * as Select from "../src/programs/query/Select.js"
import type { Responder } from "../src/services/ResponderRegistry.js"
import { ResponderRegistry, slaDefaults } from "../src/services/ResponderRegistry.js"

// The responder registry: matching, the hard filter, relevance, top-k, SLA defaults, the channel rule.

const engine = Effect.runSync(ScriptedEngine.make([])).engine
const HOUR = 3_600_000
const DAY = 24 * HOUR

const responders: ReadonlyArray<Responder> = [
  { id: "regex", kind: "pattern", capabilities: { summary: () => ({ summary: "…" }), classification: () => ({ category: "news" }) }, description: "fast regex classifier" },
  { id: "haiku", kind: "llm", model: "claude-haiku", engine, description: "cheap general model" },
  { id: "sonnet", kind: "llm", model: "claude-sonnet", engine, description: "strong model for legal contracts and code review", tags: ["legal"] },
  { id: "ocr", kind: "system", name: "ocr", capabilities: ["extract"], handle: () => Effect.succeed({ text: "" }) },
  {
    id: "alice",
    kind: "actor",
    did: "did:example:alice",
    description: "compliance officer for legal review",
    metadata: { team: "risk" },
    availability: { status: "available", hours: [{ from: "09:00", to: "17:00", days: [1, 2, 3, 4, 5] }], typicalResponseDelaySecs: 3_600 }
  },
  { id: "bob", kind: "actor", did: "did:example:bob", availability: { status: "away" } },
  { id: "carol", kind: "actor", did: "did:example:carol", availability: { lastSeenAt: 0 } }
]
const aliases = { sonnet: "claude-sonnet", haiku: "claude-haiku" }
const Registry = InMemoryResponders.layer({ responders, aliases })
const TestLayer = Layer.mergeAll(Registry, LexicalReranker.layer())

const predicates = (list: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) => {
  const checked = Check.check(
    { kind: "infer.query.v1", input: { inline: "q" }, responders: list, answer_shape: { kind: "core.text.v1" }, ...extra },
    { aliases }
  )
  if (Either.isLeft(checked)) throw new Error(checked.left.message)
  return checked.right.responders
}

/** Monday 2026-01-05 at 10:00 UTC. */
const mondayMorning = Date.UTC(2026, 0, 5, 10, 0)

describe("SLA defaults by kind", () => {
  it("the seed's table", () => {
    expect(slaDefaults).toEqual({
      pattern: { typicalDelaySecs: 0.1, maxLatencySecs: 10 },
      system: { typicalDelaySecs: 5, maxLatencySecs: 60 },
      llm: { typicalDelaySecs: 30, maxLatencySecs: 300 },
      actor: { typicalDelaySecs: 86_400, maxLatencySecs: 604_800 }
    })
    expect(Select.maxLatencyFor("actor", undefined)).toBe(604_800)
    expect(Select.maxLatencyFor("actor", 120)).toBe(120)
  })

  it("a kind's default delay passes its own default wait, and fails a shorter one", () => {
    const human: Responder = { id: "h", kind: "actor", did: "d" }
    expect(Select.hardFilter(human, 0, 604_800)).toBeUndefined()
    expect(Select.hardFilter(human, 0, 172_799)).toBe("its typical response delay 86400 s is more than half of max_latency_secs 172799 s")
    expect(Select.hardFilter(human, 0, 172_800)).toBeUndefined()
    const llm: Responder = { id: "l", kind: "llm", model: "m", engine }
    expect(Select.hardFilter(llm, 0, 60)).toBeUndefined()
    expect(Select.hardFilter(llm, 0, 59)).toContain("typical response delay 30 s")
  })
})

describe("the hard filter", () => {
  const table: ReadonlyArray<readonly [string, Responder, number, string | undefined]> = [
    ["available, in hours", responders[4]!, mondayMorning, undefined],
    ["outside its hours", responders[4]!, mondayMorning + 8 * HOUR, "it is outside its hours (09:00-17:00 UTC on days 1,2,3,4,5)"],
    ["not on its days", responders[4]!, mondayMorning - DAY, "it is outside its hours"],
    ["away", responders[5]!, mondayMorning, "its status is away"],
    ["last seen too long ago", responders[6]!, mondayMorning, "it was last seen"],
    ["an overnight window, past midnight", { id: "n", kind: "actor", did: "n", availability: { hours: [{ from: "22:00", to: "06:00", days: [0] }] } }, mondayMorning - 6 * HOUR, undefined]
  ]
  for (const [name, responder, now, reason] of table) {
    it(name, () => {
      const got = Select.hardFilter(responder, now, 604_800)
      if (reason === undefined) expect(got).toBeUndefined()
      else expect(got).toContain(reason)
    })
  }
})

describe("select", () => {
  it.effect("matches by kind and name (aliases resolved), ranks by relevance, keeps top-k", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(mondayMorning)
      const selection = yield* Select.select(
        predicates([{ kind: "llm", model: "~haiku" }, { kind: "llm", model: "~sonnet" }, { kind: "actor", did: "did:example:alice" }]),
        { query: "review this legal contract", topK: 2, maxLatencySecs: 604_800 }
      )
      // alice is registered after sonnet but her description fits better ("legal review")
      expect(selection.candidates.map((c) => c.responder.id)).toEqual(["alice", "sonnet"])
      expect(selection.candidates.map((c) => c.index)).toEqual([0, 1])
      expect(selection.candidates[0]!.score).toBeGreaterThan(0)
    }).pipe(Effect.provide(TestLayer)))

  it.effect("without query text, match order is kept", () =>
    Effect.gen(function* () {
      const selection = yield* Select.select(predicates([{ kind: "pattern", capability: "summary" }, { kind: "system", name: "ocr" }]), { query: "", topK: 5 })
      expect(selection.candidates.map((c) => [c.responder.id, c.maxLatencySecs])).toEqual([["regex", 10], ["ocr", 60]])
    }).pipe(Effect.provide(TestLayer)))

  it.effect("the CEL predicate filters on the candidate's metadata", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(mondayMorning)
      const none = yield* Effect.flip(
        Select.select(predicates([{ kind: "actor", did: "did:example:alice", expression: "responder.metadata.team == 'legal'" }]), { query: "", topK: 3 })
      )
      expect(none.message).toContain("alice (responders.0): responders.0.expression is false")
      const some = yield* Select.select(
        predicates([{ kind: "actor", did: "did:example:alice", expression: "responder.metadata.team == 'risk' && responder.availability.typical_response_delay_s < 7200.0" }]),
        { query: "", topK: 3 }
      )
      expect(some.candidates.map((c) => c.responder.id)).toEqual(["alice"])
    }).pipe(Effect.provide(TestLayer)))

  it.effect("no survivor: ORCHESTRATION_NO_CONSENSUS saying why each was dropped", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(mondayMorning + 8 * HOUR)
      const failure = yield* Effect.flip(
        Select.select(
          predicates([
            { kind: "actor", did: "did:example:alice" },
            { kind: "actor", did: "did:example:bob" },
            { kind: "actor", did: "did:example:carol" },
            { kind: "actor", did: "did:example:dave" }
          ]),
          { query: "x", topK: 3 }
        )
      )
      expect(failure._tag).toBe("OrchestrationFailure")
      expect(failure.code).toBe("ORCHESTRATION_NO_CONSENSUS")
      expect(failure.details.dropped).toEqual([
        { responder: "alice", predicate: "responders.0", reason: "it is outside its hours (09:00-17:00 UTC on days 1,2,3,4,5)" },
        { responder: "bob", predicate: "responders.1", reason: "its status is away" },
        { responder: "carol", predicate: "responders.2", reason: expect.stringContaining("it was last seen") }
      ])
      expect(failure.details.unmatched).toEqual(["responders.3"])
      expect(failure.message).toContain('responders.3: no registered responder fits actor "did:example:dave"')
    }).pipe(Effect.provide(TestLayer)))

  it.effect("typical delay against half of max_latency_secs", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(mondayMorning)
      const alice = predicates([{ kind: "actor", did: "did:example:alice" }])
      expect((yield* Select.select(alice, { query: "", topK: 1, maxLatencySecs: 7_200 })).candidates.length).toBe(1)
      const failure = yield* Effect.flip(Select.select(alice, { query: "", topK: 1, maxLatencySecs: 7_199 }))
      expect(failure.message).toContain("its typical response delay 3600 s is more than half of max_latency_secs 7199 s")
    }).pipe(Effect.provide(TestLayer)))

  it.effect("a responder matched twice is taken once", () =>
    Effect.gen(function* () {
      const selection = yield* Select.select(predicates([{ kind: "llm", model: "~sonnet" }, { kind: "llm", model: "claude-sonnet" }]), { query: "", topK: 5 })
      expect(selection.candidates.map((c) => c.responder.id)).toEqual(["sonnet"])
    }).pipe(Effect.provide(TestLayer)))
})

describe("the registry", () => {
  it.effect("refuses a taken id and malformed hours", () =>
    Effect.gen(function* () {
      const registry = yield* ResponderRegistry
      const taken = yield* Effect.flip(registry.register({ id: "alice", kind: "actor", did: "x" }))
      expect(taken.message).toBe('responder "alice" is already registered')
      const hours = yield* Effect.flip(registry.register({ id: "z", kind: "actor", did: "z", availability: { hours: [{ from: "9am", to: "17:00" }] } }))
      expect(hours.code).toBe("CONFIG_INVALID_REQUEST")
      expect(hours.message).toContain('hours must be "HH:MM"')
      yield* registry.register({ id: "z", kind: "actor", did: "z" })
      expect((yield* registry.responders).map((r) => r.id).at(-1)).toBe("z")
      expect(yield* registry.aliases).toEqual(aliases)
    }).pipe(Effect.provide(Registry)))
})

describe("checking a query against the registry", () => {
  it.effect("aliases come from the registry", () =>
    Effect.gen(function* () {
      const query = { kind: "infer.query.v1", input: { inline: "q" }, responders: [{ kind: "llm", model: "~sonnet" }], answer_shape: { kind: "core.text.v1" } }
      const checked = yield* Check.checkWithRegistry(query)
      expect(checked.responders[0]!.model).toBe("claude-sonnet")
      const failure = yield* Effect.flip(Check.checkWithRegistry({ ...query, responders: [{ kind: "llm", model: "~opus" }] }))
      expect(failure.message).toContain("unknown alias \"~opus\" (known: ~sonnet, ~haiku)")
    }).pipe(Effect.provide(Registry)))
})

describe("the notification channel", () => {
  const table: ReadonlyArray<readonly [string, Notification.Reach, Notification.Channel]> = [
    ["SSE when the page is open, whatever else", { sseConnected: true, pushChannels: ["slack"], maxLatencySecs: 604_800 }, { _tag: "Sse" }],
    ["push channels when it is not", { sseConnected: false, pushChannels: ["webhook", "sms"], maxLatencySecs: 60 }, { _tag: "Push", channels: ["webhook", "sms"] }],
    ["a digest past an hour with no push channel", { sseConnected: false, pushChannels: [], maxLatencySecs: 3_601 }, { _tag: "Digest" }],
    ["polling at an hour or less", { sseConnected: false, pushChannels: [], maxLatencySecs: 3_600 }, { _tag: "Polling" }]
  ]
  for (const [name, reach, channel] of table) {
    it(name, () => expect(Notification.selectChannel(reach)).toEqual(channel))
  }
})
