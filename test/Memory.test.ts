import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Message from "../src/domain/Message.js"
import * as Memory from "../src/layers/Memory.js"
import { ConversationStore, SessionState } from "../src/services/Memory.js"

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
    }).pipe(Effect.provide(Memory.conversationStoreBounded(2)))
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
})
