/**
 * The patterns' crash child: a process owning a SQLite state file that starts or
 * resumes a query run. It counts each responder call start in the counter file
 * (`start <responder> <pid>`) and each record it sees (`record <key> <pid>`). With
 * `pause`, the first process stops for good inside a responder (`mid:<name>`: the
 * parent SIGKILLs it there) or SIGKILLs itself as soon as a record whose key ends
 * with the given suffix is journaled (`record:<suffix>`). At the end it prints the
 * run's status, result and thread as one JSON line. With `standby`, it loads
 * everything and waits for a line on stdin before opening the state file.
 *
 *   node --import tsx test/support/patterns-child.ts '<json Config>'
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import * as readline from "node:readline"
import * as SqliteRuns from "../../src/layers/SqliteRuns.js"
import * as Orchestration from "../../src/programs/Orchestration.js"
import * as Runs from "../../src/services/Runs.js"
import { layer as respondersLayer, Queries, queries } from "./patterns-crash.js"
import type { CrashPattern } from "./patterns-crash.js"

export interface Config {
  readonly db: string
  readonly counter: string
  readonly mode: "start" | "resume"
  readonly pattern: CrashPattern
  readonly runId: string
  readonly pause?: string | undefined
  /** Load everything, then wait for a line on stdin before opening the state file (a warm standby). */
  readonly standby?: boolean | undefined
}

const config = JSON.parse(process.argv[2]!) as Config
const pause = config.mode === "start" ? config.pause : undefined
const say = (event: string, fields: Record<string, unknown> = {}) =>
  Effect.sync(() => process.stdout.write(`${JSON.stringify({ event, at: Date.now(), pid: process.pid, ...fields })}\n`))
const count = (line: string) => Effect.sync(() => fs.appendFileSync(config.counter, `${line} ${process.pid}\n`))

const hook = (responder: string) =>
  Effect.gen(function* () {
    yield* count(`start ${responder}`)
    if (pause === `mid:${responder}`) {
      yield* count(`paused ${pause}`)
      return yield* Effect.never
    }
    // a responder takes a moment, so a kill at a record lands before the next one
    yield* Effect.sleep("100 millis")
  })

/** Counts every journaled record; SIGKILLs this process at the `record:` pause. */
const watch = (runs: Runs.Service) =>
  Stream.runForEach(runs.events(config.runId), (record) =>
    Effect.gen(function* () {
      yield* count(`record ${record.kind}:${record.key}`)
      if (pause?.startsWith("record:") === true && record.kind === "DO" && record.key.endsWith(pause.slice("record:".length))) {
        yield* Effect.sync(() => process.kill(process.pid, "SIGKILL"))
        yield* Effect.never
      }
    })).pipe(Effect.ignore)

const main = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  yield* say("ready")
  if (config.mode === "start") {
    yield* Orchestration.start(runs, Queries, queries[config.pattern], { id: config.runId })
    yield* say("started")
  }
  yield* Effect.forkScoped(watch(runs))
  const info = yield* runs.await(config.runId)
  const thread = yield* Orchestration.thread(runs, config.runId)
  const running = yield* runs.list({ status: "running" })
  const stale = yield* runs.list({ status: "stale" })
  yield* say("result", {
    status: info.status,
    result: info.result,
    error: info.error?.code,
    thread,
    running: running.map((r) => r.id),
    stale: stale.map((r) => r.id)
  })
})

/** The first line on stdin. */
const go = Effect.async<void>((resume) => {
  const lines = readline.createInterface({ input: process.stdin })
  lines.once("line", () => {
    lines.close()
    resume(Effect.void)
  })
})

const standby = config.standby === true ? Effect.zipRight(say("standby"), go) : Effect.void

NodeRuntime.runMain(
  Effect.zipRight(
    standby,
    Effect.scoped(main).pipe(
      Effect.provide(SqliteRuns.layer({ filename: config.db, definitions: [Queries] }).pipe(Layer.provide(respondersLayer(hook)))),
      Effect.catchAll((error) => say("failed", { code: error.code, message: error.message }))
    )
  ).pipe(Effect.ensuring(Effect.sync(() => process.exit(0))))
)
