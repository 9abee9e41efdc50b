import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Message from "../src/domain/Message.js"
import * as Memory from "../src/layers/InMemoryMemory.js"
import { approximateBytes } from "../src/domain/Size.js"
import { ConversationStore, inMemoryDefaults } from "../src/services/ConversationStore.js"
import { SessionState } from "../src/services/SessionState.js"

describe("Memory layers", () => {
  it.effect("keeps histories per session; loads are copies", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      yield* store.append("a", [Message.user("1")])
      yield* store.append("a", [Message.assistant("2")])
      yield* store.append("b", [Message.user("x")])
      const a = yield* store.load("a")
      expect(a.map((m) => m.content)).toEqual(["1", "2"])
      ;(a as Array<Message.Message>).push(Message.user("mutation"))
      expect(yield* store.load("a")).toHaveLength(2)
      yield* store.save("a", [Message.system("reset")])
      expect((yield* store.load("a")).map((m) => m.content)).toEqual(["reset"])
      yield* store.clear("b")
      expect(yield* store.load("b")).toEqual([])
      expect(yield* store.sessions).toEqual(["a"])
    }).pipe(Effect.provide(Memory.layerMemory))
  )

  it.effect("concurrent appends to one session are all kept", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      yield* Effect.forEach(Array.from({ length: 100 }, (_, i) => i), (i) => store.append("s", [Message.user(String(i))]), {
        concurrency: 10
      })
      expect(yield* store.load("s")).toHaveLength(100)
    }).pipe(Effect.provide(Memory.layerMemory))
  )

  it.effect("a bounded store drops the least recently written session", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      yield* store.append("a", [Message.user("1")])
      yield* store.append("b", [Message.user("2")])
      yield* store.load("a")
      yield* store.append("a", [Message.user("3")])
      yield* store.append("c", [Message.user("4")])
      expect([...(yield* store.sessions)].sort()).toEqual(["a", "c"])
      expect((yield* store.load("a")).map((m) => m.content)).toEqual(["1", "3"])
    }).pipe(Effect.provide(Memory.conversationStoreBounded({ maxSessions: 2 })))
  )

  it.effect("session state is key-value per session", () =>
    Effect.gen(function* () {
      const state = yield* SessionState
      yield* state.set("s", "lang", "fr")
      yield* state.set("s", "unit", "metric")
      yield* state.set("t", "lang", "de")
      expect(yield* state.get("s", "lang")).toEqual(Option.some("fr"))
      expect(yield* state.get("s", "missing")).toEqual(Option.none())
      yield* state.delete("s", "unit")
      expect(yield* state.snapshot("s")).toEqual({ lang: "fr" })
      expect(yield* state.snapshot("t")).toEqual({ lang: "de" })
    }).pipe(Effect.provide(Memory.layerMemory))
  )

  it.effect("session state: setting a key again replaces it; delete of an unknown key is a no-op", () =>
    Effect.gen(function* () {
      const state = yield* SessionState
      yield* state.set("s", "k", 1)
      yield* state.set("s", "k", 2)
      yield* state.delete("s", "missing")
      yield* state.delete("unknown", "k")
      expect(yield* state.snapshot("s")).toEqual({ k: 2 })
      expect(yield* state.snapshot("unknown")).toEqual({})
    }).pipe(Effect.provide(Memory.layerMemory))
  )
})

describe("Memory bounds", () => {
  const kb = (tag: string) => tag.padEnd(1_000, ".")

  it("defaults: 10,000 sessions and 64 MiB", () => {
    expect(inMemoryDefaults).toEqual({ maxSessions: 10_000, maxBytes: 64 * 1024 * 1024 })
  })

  it("approximateBytes counts strings by length and stays bounded on huge or cyclic values", () => {
    expect(approximateBytes("x".repeat(900_000))).toBe(900_000)
    expect(approximateBytes({ a: "x".repeat(1_000), b: [1, 2] })).toBeGreaterThanOrEqual(1_000)
    expect(approximateBytes(Array.from({ length: 100_000 }, (_, i) => i))).toBeGreaterThanOrEqual(800_000)
    const cyclic: Record<string, unknown> = { name: "c" }
    cyclic.self = cyclic
    expect(approximateBytes(cyclic)).toBeGreaterThan(0)
  })

  it.effect("the store drops the least recently written sessions past maxBytes", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      for (const id of ["a", "b", "c"]) yield* store.append(id, [Message.user(kb(id))])
      expect(yield* store.sessions).toEqual(["a", "b", "c"])
      yield* store.append("d", [Message.user(kb("d"))])
      expect(yield* store.sessions).toEqual(["b", "c", "d"])
      yield* store.append("b", [Message.user("1")])
      yield* store.append("e", [Message.user(kb("e"))])
      expect(yield* store.sessions).toEqual(["d", "b", "e"])
      expect((yield* store.load("b")).map((m) => m.content.length)).toEqual([1_000, 1])
      expect(yield* store.load("a")).toEqual([])
    }).pipe(Effect.provide(Memory.conversationStoreBounded({ maxBytes: 3_500 })))
  )

  it.effect("the store counts tool-call arguments", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      const call = new Message.ToolCall({ id: "c1", name: "t", arguments: { text: "x".repeat(4_000) } })
      yield* store.save("a", [Message.user("q")])
      yield* store.save("b", [Message.assistant("", [call])])
      expect(yield* store.sessions).toEqual(["b"])
    }).pipe(Effect.provide(Memory.conversationStoreBounded({ maxBytes: 4_100 })))
  )

  it.effect("a history larger than maxBytes on its own is not stored; the others stay", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      yield* store.append("small", [Message.user("hi")])
      yield* store.append("big", [Message.user("x".repeat(900_000))])
      expect(yield* store.load("big")).toEqual([])
      yield* store.append("grow", [Message.user(kb("g"))])
      yield* store.append("grow", [Message.user("y".repeat(99_500))])
      expect(yield* store.load("grow")).toEqual([])
      expect(yield* store.sessions).toEqual(["small"])
    }).pipe(Effect.provide(Memory.conversationStoreBounded({ maxBytes: 100_000 })))
  )

  it.effect("a 1 MiB message per request keeps the default store under 64 MiB", () =>
    Effect.gen(function* () {
      const store = yield* ConversationStore
      const body = "x".repeat(1024 * 1024)
      for (let i = 0; i < 200; i++) yield* store.save(`s${i}`, [Message.user(body)])
      const sessions = yield* store.sessions
      expect(sessions.length).toBeLessThan(64)
      expect(sessions.at(-1)).toBe("s199")
    }).pipe(Effect.provide(Memory.conversationStoreMemory))
  )

  it.effect("session state is bounded by sessions and bytes, the least recently written dropped", () =>
    Effect.gen(function* () {
      const state = yield* SessionState
      yield* state.set("a", "k", kb("a"))
      yield* state.set("b", "k", kb("b"))
      yield* state.set("a", "n", 1)
      yield* state.set("c", "k", kb("c"))
      expect(yield* state.snapshot("b")).toEqual({})
      expect(Object.keys(yield* state.snapshot("a"))).toEqual(["k", "n"])
      yield* state.set("d", "k", { nested: ["x".repeat(5_000)] })
      expect(yield* state.snapshot("d")).toEqual({})
      expect(yield* state.get("c", "k")).toEqual(Option.some(kb("c")))
    }).pipe(Effect.provide(Memory.sessionStateBounded({ maxBytes: 2_500 })))
  )

  it.effect("session state keeps at most maxSessions sessions", () =>
    Effect.gen(function* () {
      const state = yield* SessionState
      for (let i = 0; i < 10; i++) yield* state.set(`s${i}`, "k", i)
      const kept = []
      for (let i = 0; i < 10; i++) if (Option.isSome(yield* state.get(`s${i}`, "k"))) kept.push(i)
      expect(kept).toEqual([7, 8, 9])
    }).pipe(Effect.provide(Memory.sessionStateBounded({ maxSessions: 3 })))
  )
})
