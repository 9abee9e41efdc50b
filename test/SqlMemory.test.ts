/**
 * Memory on SQL (SqlMemory) against the in-memory layer: the same behaviour
 * (histories per session, key-value state with list and clear), and on SQL the
 * sessions survive closing the layer and opening the file again.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as fs from "node:fs"
import * as Message from "../src/domain/Message.js"
import * as InMemoryMemory from "../src/layers/InMemoryMemory.js"
import * as SqlMemory from "../src/layers/SqlMemory.js"
import { ConversationStore } from "../src/services/ConversationStore.js"
import { SessionState } from "../src/services/SessionState.js"
import { tempCase } from "./support/durable-spawn.js"

const behaviour = Effect.gen(function* () {
  const store = yield* ConversationStore
  yield* store.append("a", [Message.user("1")])
  yield* store.append("a", [Message.assistant("2")])
  yield* store.append("b", [Message.user("x")])
  expect((yield* store.load("a")).map((m) => m.content)).toEqual(["1", "2"])
  expect((yield* store.load("a"))[1]!._tag).toBe("AssistantMessage")
  yield* store.save("a", [Message.system("reset")])
  expect((yield* store.load("a")).map((m) => m.content)).toEqual(["reset"])
  yield* store.clear("b")
  expect(yield* store.load("b")).toEqual([])
  expect(yield* store.sessions).toEqual(["a"])

  const state = yield* SessionState
  yield* state.set("s", "lang", "fr")
  yield* state.set("s", "unit", { system: "metric" })
  yield* state.set("s", "lang", "de")
  yield* state.set("t", "lang", "en")
  expect(yield* state.get("s", "lang")).toEqual(Option.some("de"))
  expect(yield* state.get("s", "missing")).toEqual(Option.none())
  expect(yield* state.list("s")).toEqual(["lang", "unit"])
  expect(yield* state.snapshot("s")).toEqual({ lang: "de", unit: { system: "metric" } })
  yield* state.delete("s", "lang")
  expect(yield* state.list("s")).toEqual(["unit"])
  yield* state.clear("s")
  expect(yield* state.list("s")).toEqual([])
  expect(yield* state.snapshot("s")).toEqual({})
  expect(yield* state.list("t")).toEqual(["lang"])
  expect(yield* state.list("unknown")).toEqual([])
})

const suite = (name: string, layer: () => Layer.Layer<ConversationStore | SessionState, unknown>) =>
  it.effect(`${name}: histories per session, state with store, retrieve, delete, list, clear`, () =>
    Effect.provide(behaviour, layer()).pipe(Effect.orDie), 30_000)

describe("Memory on SQL and in memory", () => {
  suite("in memory", () => InMemoryMemory.layerMemory)
  const { db, dir } = tempCase("sql-memory")
  suite("SQL", () => SqlMemory.layerSqlite({ filename: db }))

  it.live("on SQL, sessions survive closing the layer and opening the file again", () => {
    const { db: file, dir: folder } = tempCase("sql-memory-restart")
    const open = () => SqlMemory.layerSqlite({ filename: file })
    return Effect.gen(function* () {
      yield* Effect.provide(
        Effect.gen(function* () {
          yield* (yield* ConversationStore).append("chat", [Message.user("remember me"), Message.assistant("I will")])
          yield* (yield* SessionState).set("chat", "name", "Ada")
        }),
        open()
      )
      yield* Effect.provide(
        Effect.gen(function* () {
          expect((yield* (yield* ConversationStore).load("chat")).map((m) => m.content)).toEqual(["remember me", "I will"])
          expect(yield* (yield* SessionState).get("chat", "name")).toEqual(Option.some("Ada"))
          expect(fs.statSync(file).mode & 0o777).toBe(0o600)
        }),
        open()
      )
    }).pipe(
      Effect.ensuring(Effect.sync(() => {
        fs.rmSync(folder, { recursive: true, force: true })
        fs.rmSync(dir, { recursive: true, force: true })
      })),
      Effect.timeout("30 seconds")
    )
  }, 60_000)

  const json = tempCase("sql-memory-json")
  it.effect("a value that is not JSON is a defect naming the key", () =>
    Effect.gen(function* () {
      const state = yield* SessionState
      const exit = yield* Effect.exit(state.set("s", "big", 1n))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "").toContain('key "big"')
    }).pipe(
      Effect.provide(SqlMemory.layerSqlite({ filename: json.db })),
      Effect.orDie,
      Effect.ensuring(Effect.sync(() => fs.rmSync(json.dir, { recursive: true, force: true })))
    ), 30_000)
})
