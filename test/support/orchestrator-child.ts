/**
 * The orchestrator crash child: a process owning a SQLite state file that starts
 * or resumes the orchestrated run (test/support/orchestrator-runs.ts), reporting
 * on stdout (one JSON object a line) and to a counter file (one line per
 * processor invocation, with its pid). With `pause` ("b1"), the processor stops
 * for good inside that task so that the parent can SIGKILL the process there.
 * Its engine answers the analyzer once (`mode: "start"`) or never (`"resume"`:
 * any request fails, and the requests are reported).
 *
 *   node --import tsx test/support/orchestrator-child.ts '<json Config>'
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as JsonConstraint from "../../src/layers/JsonConstraint.js"
import * as ScriptedEngine from "../../src/layers/ScriptedEngine.js"
import * as SqliteRuns from "../../src/layers/SqliteRuns.js"
import * as Runs from "../../src/services/Runs.js"
import { analyzerReply, Orchestrated, TaskProbe } from "./orchestrator-runs.js"

export interface Config {
  readonly db: string
  readonly counter: string
  readonly mode: "start" | "resume"
  readonly runId: string
  /** The task inside which the first process stops for good. */
  readonly pause?: string | undefined
}

const config = JSON.parse(process.argv[2]!) as Config
const say = (event: string, fields: Record<string, unknown> = {}) =>
  Effect.sync(() => process.stdout.write(`${JSON.stringify({ event, at: Date.now(), pid: process.pid, ...fields })}\n`))
const count = (line: string) => Effect.sync(() => fs.appendFileSync(config.counter, `${line} ${process.pid}\n`))

const ProbeLive = Layer.succeed(TaskProbe, {
  invoked: (task) =>
    Effect.gen(function* () {
      yield* count(`invoked ${task}`)
      if (config.mode === "start" && config.pause === task) {
        yield* count(`paused ${task}`)
        return yield* Effect.never
      }
    })
})

const services = Layer.mergeAll(
  ScriptedEngine.layer(config.mode === "start" ? [analyzerReply] : []),
  JsonConstraint.layer,
  ProbeLive
)

const main = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  yield* say("ready")
  if (config.mode === "start") {
    yield* runs.start(Orchestrated, { request: "compute the totals" }, { id: config.runId })
    yield* say("started")
  }
  const info = yield* runs.await(config.runId)
  yield* say("result", {
    status: info.status,
    result: info.result,
    error: info.error?.message,
    engineRequests: (yield* ScriptedEngine.requests).length
  })
})

NodeRuntime.runMain(
  Effect.scoped(main).pipe(
    Effect.provide(SqliteRuns.layer({ filename: config.db, definitions: [Orchestrated] }).pipe(Layer.provideMerge(services))),
    Effect.catchAll((error) => say("failed", { code: error.code, message: error.message })),
    Effect.ensuring(Effect.sync(() => process.exit(0)))
  )
)
