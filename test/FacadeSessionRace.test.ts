/**
 * Requests on one chat session that run at the same time: each turn is kept.
 * The facade runs a session's turns one after another (the next request's turn
 * starts from the history the previous one committed), so no turn overwrites
 * another's; requests on other sessions do not wait for each other. (A request
 * that brings no session id gets a new one and takes no lock: test/HotPath's
 * operation count of such a request would show one.)
 */
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { ModelInfo } from "../src/domain/ModelInfo.js"
import { SystemRequest } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import * as Constraint from "../src/layers/JsonConstraint.js"
import * as Facade from "../src/programs/Facade.js"
import * as SessionLocks from "../src/programs/facade/SessionLocks.js"
import * as ConversationStore from "../src/services/ConversationStore.js"
import { Engine, InferenceResult, streamFrom, StreamPart } from "../src/services/Engine.js"
import type { InferenceRequest } from "../src/services/Engine.js"

const chat = (content: string, sessionId: string, requestId?: string) =>
  Schema.decodeUnknownSync(SystemRequest)({
    mode: "chat",
    messages: [{ role: "user", content }],
    sessionId,
    ...(requestId === undefined ? {} : { requestId })
  })

/** The messages (role:content, no system message) of each model call, in order. */
const seen: Array<Array<string>> = []

/** An engine that takes 10 ms (TestClock time) and answers with the last user message, echoed. */
const slowEcho = Layer.succeed(Engine, (() => {
  const answer = (request: InferenceRequest) =>
    Effect.zipRight(
      Effect.sync(() => seen.push(request.messages.filter((m) => m.role !== "system").map((m) => `${m.role}:${m.content}`))),
      Effect.as(
      Effect.sleep("10 millis"),
      new InferenceResult({
        content: `echo: ${request.messages.filter((m) => m.role === "user").at(-1)?.content ?? ""}`,
        toolCalls: [],
        usage: TokenUsage.make({ promptTokens: 1, outputTokens: 1 }),
        finishReason: "stop"
      })
    ))
  return {
    infer: answer,
    stream: (request: InferenceRequest) =>
      streamFrom((emit) =>
        Effect.flatMap(answer(request), (result) => Effect.zipRight(emit(StreamPart.textDelta(result.content)), emit(StreamPart.finish(result)))))
    ,
    modelInfo: Effect.succeed(new ModelInfo({ name: "slow", contextWindow: 4096, supportsGrammar: false, supportsTools: false }))
  }
})())

const services = Layer.mergeAll(slowEcho, Constraint.layer, Layer.effect(ConversationStore.ConversationStore, ConversationStore.makeInMemory()))

describe("Facade: concurrent requests on one session", () => {
  it.effect("two requests on one session at once: the second turn starts from the first, and both are kept in order", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const store = yield* ConversationStore.ConversationStore
      const first = yield* Effect.fork(system.run(chat("one", "s")))
      const second = yield* Effect.fork(system.run(chat("two", "s")))
      yield* TestClock.adjust("100 millis")
      const answers = yield* Effect.all([Fiber.join(first), Fiber.join(second)])
      expect(answers.map((a) => [a.error, a.content])).toEqual([[undefined, "echo: one"], [undefined, "echo: two"]])
      // the second request's model call saw the first turn
      expect(seen.at(-1)).toEqual(["user:one", "assistant:echo: one", "user:two"])
      const history = yield* store.load("s")
      expect(history.map((m) => `${m.role}:${m.content}`)).toEqual(["user:one", "assistant:echo: one", "user:two", "assistant:echo: two"])
    }).pipe(Effect.provide(services)))

  it.effect("a waiting request that is cancelled leaves the queue; the session's lock goes when nobody holds it", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const store = yield* ConversationStore.ConversationStore
      const first = yield* Effect.fork(system.run(chat("one", "c", "r-1")))
      const waiting = yield* Effect.fork(system.run(chat("two", "c", "r-2")))
      const third = yield* Effect.fork(system.run(chat("three", "c", "r-3")))
      yield* TestClock.adjust("1 millis")
      expect(yield* system.cancel("r-2")).toBe(true)
      yield* TestClock.adjust("100 millis")
      const [a, b, c] = yield* Effect.all([Fiber.join(first), Fiber.join(waiting), Fiber.join(third)])
      expect([a.content, b.error?.code, c.content]).toEqual(["echo: one", "CANCELLED_SIGNAL", "echo: three"])
      const history = yield* store.load("c")
      expect(history.map((m) => `${m.role}:${m.content}`)).toEqual(["user:one", "assistant:echo: one", "user:three", "assistant:echo: three"])
    }).pipe(Effect.provide(services)))

  it.effect("requests on two sessions run together: neither waits for the other", () =>
    Effect.gen(function* () {
      const system = yield* Facade.make()
      const a = yield* Effect.fork(system.run(chat("one", "a")))
      const b = yield* Effect.fork(system.run(chat("two", "b")))
      // one engine delay for both: they overlap
      yield* TestClock.adjust("10 millis")
      const answers = yield* Effect.all([Fiber.join(a), Fiber.join(b)])
      expect(answers.map((r) => r.content)).toEqual(["echo: one", "echo: two"])
    }).pipe(Effect.provide(services)))

})

describe("SessionLocks", () => {
  it.effect("one holder per session, first come first served; other sessions pass; a lock lives while it is held or awaited", () =>
    Effect.gen(function* () {
      const locks = SessionLocks.make()
      const order: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(locks.withSession("s", Effect.zipRight(Deferred.await(gate), Effect.sync(() => order.push("first")))))
      yield* Effect.yieldNow()
      const next = yield* Effect.fork(locks.withSession("s", Effect.sync(() => order.push("second"))))
      const quitter = yield* Effect.fork(locks.withSession("s", Effect.sync(() => order.push("never"))))
      // another session is not held up
      yield* locks.withSession("other", Effect.sync(() => order.push("other")))
      yield* Effect.yieldNow()
      expect(locks.unsafeSize()).toBe(1)
      yield* Fiber.interrupt(quitter)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(holder)
      yield* Fiber.join(next)
      expect(order).toEqual(["other", "first", "second"])
      expect(locks.unsafeSize()).toBe(0)
      // a failing holder lets go too
      const failed = yield* Effect.exit(locks.withSession("s", Effect.fail("boom")))
      expect(Exit.isFailure(failed)).toBe(true)
      yield* locks.withSession("s", Effect.sync(() => order.push("after")))
      expect(order.at(-1)).toBe("after")
      expect(locks.unsafeSize()).toBe(0)
    }))
})
