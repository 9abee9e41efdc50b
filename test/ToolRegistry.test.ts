import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import { ToolFailure } from "../src/domain/Failure.js"
import { ToolCall } from "../src/domain/Message.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as Tool from "../src/services/ToolRegistry.js"
import { ToolRegistry } from "../src/services/ToolRegistry.js"
import { add, failing, hanging, throwing } from "./support/tools.js"

const call = (name: string, args: Record<string, unknown> = {}) => new ToolCall({ id: "c1", name, arguments: args })
const exec = (c: ToolCall, options?: Tool.ExecuteOptions) => Effect.flatMap(ToolRegistry, (r) => r.execute(c, options))

class Greeting extends Context.Tag("test/Greeting")<Greeting, string>() {}

describe("ToolRegistry", () => {
  const registry = Registry.layer([add, failing, throwing, hanging])

  it.effect("decodes arguments and runs the handler", () =>
    Effect.gen(function* () {
      const out = yield* exec(call("add", { a: 1, b: 2 }))
      expect(out.content).toBe("3")
    }).pipe(Effect.provide(registry))
  )

  it.effect("maps each way a call goes wrong to a ToolFailure code", () =>
    Effect.gen(function* () {
      const notFound = yield* Effect.flip(exec(call("missing")))
      expect(notFound).toBeInstanceOf(ToolFailure)
      expect(notFound).toMatchObject({ code: "TOOL_NOT_FOUND", tool: "missing", toolCallId: "c1", retryable: false })
      const badArgs = yield* Effect.flip(exec(call("add", { a: "x" })))
      expect(badArgs.code).toBe("TOOL_EXECUTION_FAILED")
      expect(badArgs.message).toContain("Invalid arguments")
      expect(badArgs.message).toContain('a: expected number, got "x"')
      const failed = yield* Effect.flip(exec(call("failing")))
      expect(failed).toMatchObject({ code: "TOOL_EXECUTION_FAILED", retryable: false })
      const crashed = yield* Effect.flip(exec(call("throwing")))
      expect(crashed.message).toContain("boom")
      const notAllowed = yield* Effect.flip(exec(call("add", { a: 1, b: 1 }), { allow: ["failing"] }))
      expect(notAllowed.code).toBe("TOOL_NOT_FOUND")
    }).pipe(Effect.provide(registry))
  )

  it.effect("times out a hanging tool on the Clock", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(exec(call("hanging"))))
      yield* TestClock.adjust("5 seconds")
      const error = yield* Fiber.join(fiber)
      expect(error.code).toBe("TOOL_TIMEOUT")
      expect(error.message).toContain("5s")
    }).pipe(Effect.provide(registry))
  )

  it.effect("a per-call timeout overrides the tool's own", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(Effect.flip(exec(call("hanging"), { timeout: "1 second" })))
      yield* TestClock.adjust("1 second")
      expect((yield* Fiber.join(fiber)).code).toBe("TOOL_TIMEOUT")
    }).pipe(Effect.provide(registry))
  )

  it.effect("marks failures of idempotent tools retryable and reports unavailability", () =>
    Effect.gen(function* () {
      const down = Tool.make({
        name: "down",
        description: "dependency down",
        parameters: Schema.Struct({}),
        idempotent: true,
        available: Effect.succeed(false),
        handler: () => Effect.succeed("never")
      })
      const flaky = Tool.make({
        name: "flaky",
        description: "fails",
        parameters: Schema.Struct({}),
        idempotent: true,
        handler: () => Effect.fail(new Error("503"))
      })
      const error = yield* Effect.flip(exec(call("down")).pipe(Effect.provide(Registry.layer([down, flaky]))))
      expect(error).toMatchObject({ code: "TOOL_UNAVAILABLE", retryable: true })
      const flakyError = yield* Effect.flip(exec(call("flaky")).pipe(Effect.provide(Registry.layer([down, flaky]))))
      expect(flakyError).toMatchObject({ code: "TOOL_EXECUTION_FAILED", retryable: true })
      expect(flakyError.message).toContain("503")
    })
  )

  it.effect("provides what handlers need from the layer's context; non-string results become JSON", () =>
    Effect.gen(function* () {
      const greet = Tool.make({
        name: "greet",
        description: "greets",
        parameters: Schema.Struct({ name: Schema.String }),
        handler: ({ name }) => Effect.map(Greeting, (g) => ({ text: `${g}, ${name}` }))
      })
      const layer = Registry.layer([greet]).pipe(Layer.provide(Layer.succeed(Greeting, "Hello")))
      const out = yield* exec(call("greet", { name: "Ada" })).pipe(Effect.provide(layer))
      expect(out.content).toBe('{"text":"Hello, Ada"}')
      expect(out.value).toEqual({ text: "Hello, Ada" })
    })
  )

  it.effect("lists definitions with JSON-schema parameters, narrowed by a whitelist", () =>
    Effect.gen(function* () {
      const r = yield* ToolRegistry
      expect(r.definitions().map((d) => d.name)).toEqual(["add", "failing", "throwing", "hanging"])
      expect(r.definitions(["add"]).map((d) => d.name)).toEqual(["add"])
      expect(r.has("add", ["failing"])).toBe(false)
    }).pipe(Effect.provide(registry))
  )

  it.effect("rejects duplicate tool names when the layer is built", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(Effect.provide(ToolRegistry, Registry.layer([add, add])))
      expect(exit._tag).toBe("Failure")
    })
  )
})
