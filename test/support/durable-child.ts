/**
 * The crash child: a process owning a SQLite state file that starts or resumes a
 * durable run, reporting on stdout (one JSON object a line) and to a counter file
 * (one line per step start/end, with its pid). With `pause`, it stops for good at
 * that point (inside a step, or between two) so that the parent can SIGKILL it
 * there. Answers come on stdin: one JSON `{ runId, slot, secret, answer }` a line
 * (with `standby`, after a first line "go").
 *
 *   node --import tsx test/support/durable-child.ts '<json Config>'
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Chunk from "effect/Chunk"
import * as fs from "node:fs"
import * as readline from "node:readline"
import * as SqliteRuns from "../../src/layers/SqliteRuns.js"
import * as Runs from "../../src/services/Runs.js"
import { Approval, Charge, Probe, Reference, secretOf } from "./durable-runs.js"

export interface Config {
  readonly db: string
  readonly counter: string
  readonly mode: "start" | "resume"
  readonly definition: "reference" | "approval" | "charge"
  readonly runId: string
  readonly payload: unknown
  /** "mid:step-3" pauses inside step-3; "after:3" between steps 3 and 4. */
  readonly pause?: string | undefined
  /**
   * Load everything, then wait for a "go" line on stdin before opening the state
   * file: a warm standby, so a restart's latency is the runs' and not the loader's.
   */
  readonly standby?: boolean | undefined
}

const config = JSON.parse(process.argv[2]!) as Config
const say = (event: string, fields: Record<string, unknown> = {}) =>
  Effect.sync(() => process.stdout.write(`${JSON.stringify({ event, at: Date.now(), pid: process.pid, ...fields })}\n`))
const count = (line: string) => Effect.sync(() => fs.appendFileSync(config.counter, `${line} ${process.pid}\n`))
const pauseHere = (where: string) =>
  config.mode === "start" && config.pause === where
    ? Effect.zipRight(count(`paused ${where}`), Effect.never)
    : Effect.void

const ProbeLive = Layer.succeed(Probe, {
  work: (step, value) =>
    Effect.gen(function* () {
      yield* count(`start ${step}`)
      yield* pauseHere(`mid:${step}`)
      yield* count(`end ${step}`)
      return value
    }),
  between: (index) => pauseHere(`after:${index}`),
  notify: (slot) =>
    Effect.sync(() =>
      fs.writeFileSync(
        `${config.counter}.secret`,
        JSON.stringify({ runId: slot.runId, key: slot.key, secret: secretOf(slot), deadline: slot.deadline.epochMillis })
      )
    )
})

const stdin = readline.createInterface({ input: process.stdin })
const received: Array<string> = []
let onLine: (() => void) | undefined
stdin.on("line", (line) => {
  received.push(line)
  onLine?.()
})
/** The next stdin line. */
const nextLine = Effect.async<string>((resume) => {
  const take = () => {
    const line = received.shift()
    if (line === undefined) return false
    onLine = undefined
    resume(Effect.succeed(line))
    return true
  }
  if (!take()) onLine = () => void take()
})

const answers = (runs: Runs.Service) =>
  Effect.forever(
    Effect.flatMap(nextLine, (line) => {
      const { answer, runId, secret, slot } = JSON.parse(line) as { runId: string; slot: string; secret: string; answer: unknown }
      return runs.respond(runId, slot, secret, answer).pipe(
        Effect.matchEffect({
          onFailure: (error) => say("respond", { ok: false, code: error.code, message: error.message }),
          onSuccess: (result) => say("respond", { ok: true, result })
        })
      )
    })
  )

const main = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  yield* say("ready")
  yield* Effect.forkScoped(answers(runs))
  if (config.mode === "start") {
    const definition = config.definition === "reference" ? Reference : config.definition === "charge" ? Charge : Approval
    yield* runs.start(definition as typeof Reference, config.payload as typeof Reference.payload.Type, { id: config.runId })
    yield* say("started")
  }
  const info = yield* runs.await(config.runId)
  const records = Chunk.toReadonlyArray(yield* Stream.runCollect(runs.events(config.runId)))
  const running = yield* runs.list({ status: "running" })
  const stale = yield* runs.list({ status: "stale" })
  yield* say("result", {
    status: info.status,
    result: info.result,
    error: info.error?.code,
    records: records.map((r) => ({ kind: r.kind, key: r.key, at: r.at.epochMillis, body: r.body })),
    running: running.map((r) => r.id),
    stale: stale.map((r) => r.id)
  })
})

const standby = config.standby === true
  ? Effect.zipRight(say("standby"), Effect.flatMap(nextLine, (line) => say("go", { line })))
  : Effect.void

NodeRuntime.runMain(
  Effect.zipRight(standby, Effect.scoped(main).pipe(
    Effect.provide(SqliteRuns.layer({ filename: config.db, definitions: [Reference, Approval, Charge] }).pipe(Layer.provide(ProbeLive))),
    Effect.catchAll((error) => say("failed", { code: error.code, message: error.message }))
  )).pipe(
    Effect.ensuring(Effect.sync(() => process.exit(0)))
  )
)
