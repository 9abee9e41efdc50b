/**
 * RunLoop in a durable run (issue #15, durable mode), in memory: each model call
 * and tool call is a journaled step. A completed run's thread imported into an
 * empty store re-drives to the same result without an engine request or a tool
 * call; a thread cut after a non-idempotent tool's intent (a crash during the
 * call) does not call the tool again and the model reads "outcome unknown"; an
 * idempotent tool runs again. Seeds are derived from the run and the step; the
 * tool handler sees the call's idempotency key.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Message from "../src/domain/Message.js"
import * as InMemoryRuns from "../src/layers/InMemoryRuns.js"
import * as Registry from "../src/layers/InProcessToolRegistry.js"
import * as ScriptedEngine from "../src/layers/ScriptedEngine.js"
import * as RunLoop from "../src/programs/RunLoop.js"
import * as Runs from "../src/services/Runs.js"
import * as Tool from "../src/services/ToolRegistry.js"

/** What the tool handlers saw, across layers (the test's own counter). */
const seen: { calls: number; keys: Array<Option.Option<string>> } = { calls: 0, keys: [] }

const charge = (idempotent: boolean) =>
  Tool.make({
    name: "charge",
    description: "Charges an amount",
    parameters: Schema.Struct({ amount: Schema.Number }),
    idempotent,
    handler: ({ amount }) =>
      Effect.gen(function* () {
        seen.calls++
        seen.keys.push(yield* Tool.IdempotencyKey)
        return `charged ${amount}`
      })
  })

const Result = Schema.Struct({
  output: Schema.String,
  stopReason: Schema.String,
  iterations: Schema.Number,
  transcript: Schema.Array(Schema.String)
})

const Agent = Runs.define({
  name: "agent",
  payload: Schema.Struct({ prompt: Schema.String }),
  success: Result,
  program: ({ prompt }) =>
    Effect.map(
      RunLoop.runDurable([Message.user(prompt)], { durable: { key: "agent" } }),
      (result) => ({
        output: Option.getOrElse(result.output, () => ""),
        stopReason: result.stopReason,
        iterations: result.iterations,
        transcript: result.messages.map((m) => `${m.role}: ${m.content}`)
      })
    ).pipe(Effect.catchTag("ConfigurationFailure", Effect.die))
})

/** The same agent, streamed: the tags of its events and the final output. */
const StreamedAgent = Runs.define({
  name: "agent-stream",
  payload: Schema.Struct({ prompt: Schema.String }),
  success: Schema.Struct({ tags: Schema.Array(Schema.String), output: Schema.String }),
  program: ({ prompt }) =>
    Effect.map(
      Stream.runCollect(RunLoop.runDurableStream([Message.user(prompt)], { durable: { key: "agent" } })),
      (events) => {
        const all = Array.from(events)
        const last = all[all.length - 1]
        return {
          tags: all.map((e) => e._tag),
          output: last?._tag === "LoopFinished" ? Option.getOrElse(last.result.output, () => "") : ""
        }
      }
    ).pipe(Effect.catchTag("ConfigurationFailure", Effect.die))
})

const script = [
  ScriptedEngine.toolCalls([{ name: "charge", arguments: { amount: 5 } }]),
  ScriptedEngine.reply("charged")
]

const services = (steps: ReadonlyArray<ScriptedEngine.Step>, idempotent = false) =>
  Layer.merge(ScriptedEngine.layer(steps), Registry.layer([charge(idempotent)]))

const withRuns = <A, E>(
  layer: Layer.Layer<any, never, never>,
  body: Effect.Effect<A, E, Runs.Runs | ScriptedEngine.ScriptedEngineControl>
) => Effect.scoped(Effect.provide(body, InMemoryRuns.layer({ definitions: [Agent, StreamedAgent] }).pipe(Layer.provideMerge(layer))))

/** The first run: completed, its thread and the requests its engine received. */
const firstRun = (idempotent = false) =>
  withRuns(
    services(script, idempotent),
    Effect.gen(function* () {
      const runs = yield* Runs.Runs
      const id = yield* runs.start(Agent, { prompt: "charge 5" }, { id: "agent-run" })
      const info = yield* runs.await(id)
      return { info, thread: yield* runs.exportThread(id), requests: yield* ScriptedEngine.requests }
    })
  )

/** The thread as a crash would have left it: records up to (and without) the DO of `key`. */
const cutBefore = (thread: Runs.Thread, key: string): Runs.Thread => {
  const at = thread.records.findIndex((r) => r.kind === "DO" && r.key === key)
  return new Runs.Thread({ ...thread, records: thread.records.slice(0, at) })
}

describe("RunLoop durable mode", () => {
  it.live("a completed run imported into an empty store replays from the journal: no engine request, no tool call", () =>
    Effect.gen(function* () {
      seen.calls = 0
      seen.keys = []
      const first = yield* firstRun()
      expect(first.info.status).toBe("completed")
      expect(first.info.result).toMatchObject({ output: "charged", stopReason: "finish", iterations: 2 })
      expect(seen.calls).toBe(1)
      // the handler saw the call's idempotency key; the engine a seed per call, derived from run and step
      expect(Option.getOrElse(seen.keys[0]!, () => "")).toMatch(/^[0-9a-f]{64}$/)
      const seeds = first.requests.map((r) => r.seed)
      expect(seeds.every((s) => typeof s === "number")).toBe(true)
      expect(new Set(seeds).size).toBe(2)
      expect(first.thread.records.filter((r) => r.kind === "DO").map((r) => r.key)).toEqual([
        "agent/model/0.0",
        "agent/tool/0.0",
        "agent/model/1.0"
      ])

      const replay = yield* withRuns(
        services([]),
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const info = yield* runs.await(yield* runs.importThread(first.thread))
          return { info, requests: yield* ScriptedEngine.requests }
        })
      )
      expect(replay.info.status).toBe("completed")
      expect(replay.info.result).toEqual(first.info.result)
      expect(replay.requests).toHaveLength(0)
      expect(seen.calls).toBe(1)
    }), { timeout: 20_000 })

  it.live("a non-idempotent tool in flight at a crash is not called again: the model reads that its outcome is unknown", () =>
    Effect.gen(function* () {
      seen.calls = 0
      const first = yield* firstRun()
      const crashed = cutBefore(first.thread, "agent/tool/0.0")
      expect(crashed.records.some((r) => r.kind === "CALL" && r.key === "agent/tool/0.0")).toBe(true)
      const resumed = yield* withRuns(
        services([ScriptedEngine.reply("could not confirm the charge")]),
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const info = yield* runs.await(yield* runs.importThread(crashed))
          return { info, requests: yield* ScriptedEngine.requests }
        })
      )
      expect(seen.calls).toBe(1)
      expect(resumed.info.status).toBe("completed")
      const result = resumed.info.result as typeof Result.Type
      expect(result.output).toBe("could not confirm the charge")
      expect(result.transcript[2]).toContain("outcome is unknown")
      // only the model call after the tool was asked again, with the seed of the first run's same step
      expect(resumed.requests).toHaveLength(1)
      expect(resumed.requests[0]!.seed).toBe(first.requests[1]!.seed)
    }), { timeout: 20_000 })

  it.live("an idempotent tool in flight at a crash runs again", () =>
    Effect.gen(function* () {
      seen.calls = 0
      seen.keys = []
      const first = yield* firstRun(true)
      expect(first.thread.records.some((r) => r.kind === "CALL" && r.key === "agent/tool/0.0")).toBe(false)
      const crashed = cutBefore(first.thread, "agent/tool/0.0")
      const resumed = yield* withRuns(
        services([ScriptedEngine.reply("charged")], true),
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          return yield* runs.await(yield* runs.importThread(crashed))
        })
      )
      expect(resumed.result).toEqual(first.info.result)
      expect(seen.calls).toBe(2)
      // the same key both times: the service behind the tool can deduplicate
      expect(seen.keys[1]).toEqual(seen.keys[0])
    }), { timeout: 20_000 })

  it.live("runDurableStream: the streamed run is journaled; re-driven from its thread it emits the loop's events again and the same result, with no engine request or tool call", () =>
    Effect.gen(function* () {
      seen.calls = 0
      const first = yield* withRuns(
        services(script),
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const id = yield* runs.start(StreamedAgent, { prompt: "charge 5" }, { id: "agent-stream-run" })
          const info = yield* runs.await(id)
          return { info, thread: yield* runs.exportThread(id), requests: yield* ScriptedEngine.requests }
        })
      )
      expect(first.info.status).toBe("completed")
      const result = first.info.result as { tags: ReadonlyArray<string>; output: string }
      expect(result.output).toBe("charged")
      expect(result.tags.filter((t) => t !== "TextDelta")).toEqual([
        "IterationStarted",
        "ModelResponded",
        "ToolCallRequested",
        "ToolResultReady",
        "IterationStarted",
        "ModelResponded",
        "LoopFinished"
      ])
      expect(first.requests).toHaveLength(2)
      expect(seen.calls).toBe(1)
      expect(first.thread.records.filter((r) => r.kind === "DO").map((r) => r.key)).toEqual([
        "agent/model/0.0",
        "agent/tool/0.0",
        "agent/model/1.0"
      ])
      const replay = yield* withRuns(
        services([]),
        Effect.gen(function* () {
          const runs = yield* Runs.Runs
          const info = yield* runs.await(yield* runs.importThread(first.thread))
          return { info, requests: yield* ScriptedEngine.requests }
        })
      )
      expect(replay.info.status).toBe("completed")
      const again = replay.info.result as { tags: ReadonlyArray<string>; output: string }
      expect(again.output).toBe("charged")
      expect(again.tags.filter((t) => t !== "TextDelta")).toEqual(result.tags.filter((t) => t !== "TextDelta"))
      expect(replay.requests).toHaveLength(0)
      expect(seen.calls).toBe(1)
    }), { timeout: 20_000 })
})
