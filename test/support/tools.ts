/** Tools shared by tests. */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import { type CorrelationContext } from "../../src/domain/System.js"
import { currentCorrelation } from "../../src/services/EventLog.js"
import * as Tool from "../../src/services/ToolRegistry.js"

export const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})

/** A tool that takes `seconds` of Clock time, and counts how many run at once. */
export const slow = (running: Ref.Ref<number>, peak: Ref.Ref<number>) =>
  Tool.make({
    name: "slow",
    description: "Waits",
    parameters: Schema.Struct({ seconds: Schema.Number }),
    handler: ({ seconds }) =>
      Effect.gen(function* () {
        const now = yield* Ref.updateAndGet(running, (n) => n + 1)
        yield* Ref.update(peak, (p) => Math.max(p, now))
        yield* Effect.sleep(`${seconds} seconds`)
        yield* Ref.update(running, (n) => n - 1)
        return "done"
      })
  })

export const failing = Tool.make({
  name: "failing",
  description: "Always fails",
  parameters: Schema.Struct({}),
  handler: () => Effect.fail("the disk is full")
})

export const throwing = Tool.make({
  name: "throwing",
  description: "Throws",
  parameters: Schema.Struct({}),
  handler: () =>
    Effect.sync(() => {
      throw new Error("boom")
    })
})

export const hanging = Tool.make({
  name: "hanging",
  description: "Never returns",
  parameters: Schema.Struct({}),
  timeout: "5 seconds",
  handler: () => Effect.never
})

/** A tool named "probe" that adds what `read` takes from the correlation it runs under to `seen`. */
export const correlationProbe = (seen: Ref.Ref<ReadonlyArray<string>>, read: (c: CorrelationContext) => string) =>
  Tool.make({
    name: "probe",
    description: "reads the correlation",
    parameters: Schema.Struct({}),
    handler: () => Effect.flatMap(currentCorrelation, (c) => Ref.update(seen, (s) => [...s, read(c)]))
  })
