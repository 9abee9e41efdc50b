/**
 * A runner process on a Postgres state database, for the multi-runner tests:
 * PostgresRuns with the durable-run test definitions, driven by JSON lines on
 * stdin and reporting JSON lines on stdout. Steps report to a counter file shared
 * by all the runners of a case (one line per step start/end, with the pid); with
 * `pause`, the FIRST runner to reach that point (no "paused" line in the counter
 * yet) stops there for good, so the parent can SIGKILL the process owning the run
 * mid-step, and the runner that takes the run over goes through.
 *
 *   node --import tsx test/support/postgres-child.ts '<json Config>'
 *   stdin: {"cmd":"start","runId":"...","seed":1} (the reference run)
 *        | {"cmd":"approve","runId":"...","slaMillis":60000} (the approval run)
 *        | {"cmd":"await","runId":"..."} | {"cmd":"poll","runId":"..."} | {"cmd":"cancel","runId":"..."} | {"cmd":"respond","runId":"...","slot":"...","secret":"...","answer":{...}}
 *   stdout: ready | started | result | polled | cancelled | responded | failed (one JSON object a line)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as fs from "node:fs"
import * as readline from "node:readline"
import * as PostgresRuns from "../../src/layers/PostgresRuns.js"
import * as Runs from "../../src/services/Runs.js"
import { Approval, Charge, Probe, Reference, secretOf } from "./durable-runs.js"

export interface Config {
  readonly url: string
  readonly runnerPort: number
  readonly counter: string
  /** "mid:step-3" pauses inside step-3 (the first runner to get there only). */
  readonly pause?: string | undefined
  readonly shardLockExpirationMillis?: number | undefined
}

const config = JSON.parse(process.argv[2]!) as Config
const say = (event: string, fields: Record<string, unknown> = {}) =>
  Effect.sync(() => process.stdout.write(`${JSON.stringify({ event, at: Date.now(), pid: process.pid, ...fields })}\n`))
const count = (line: string) => Effect.sync(() => fs.appendFileSync(config.counter, `${line} ${process.pid}\n`))
const firstToPause = (where: string) =>
  Effect.sync(() => {
    const text = fs.existsSync(config.counter) ? fs.readFileSync(config.counter, "utf8") : ""
    return !text.includes(`paused ${where}`)
  })
const pauseHere = (where: string) =>
  config.pause === where
    ? Effect.flatMap(firstToPause(where), (first) => (first ? Effect.zipRight(count(`paused ${where}`), Effect.never) : Effect.void))
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

type Command =
  | { readonly cmd: "start"; readonly runId: string; readonly seed: number }
  | { readonly cmd: "approve"; readonly runId: string; readonly slaMillis: number }
  | { readonly cmd: "await"; readonly runId: string }
  | { readonly cmd: "poll"; readonly runId: string }
  | { readonly cmd: "cancel"; readonly runId: string }
  | { readonly cmd: "respond"; readonly runId: string; readonly slot: string; readonly secret: string; readonly answer: unknown }

const handle = (runs: Runs.Service, command: Command) =>
  Effect.gen(function* () {
    if (command.cmd === "start") {
      yield* runs.start(Reference, { seed: command.seed }, { id: command.runId })
      return yield* say("started", { runId: command.runId })
    }
    if (command.cmd === "approve") {
      yield* runs.start(Approval, { slaMillis: command.slaMillis }, { id: command.runId })
      return yield* say("started", { runId: command.runId })
    }
    if (command.cmd === "respond") {
      const result = yield* runs.respond(command.runId, command.slot, command.secret, command.answer)
      return yield* say("responded", { runId: command.runId, result })
    }
    if (command.cmd === "cancel") {
      yield* runs.cancel(command.runId)
      return yield* say("cancelled", { runId: command.runId })
    }
    if (command.cmd === "poll") {
      const polled = yield* runs.poll(command.runId)
      const stale = yield* runs.list({ status: "stale" })
      return yield* say("polled", { runId: command.runId, status: polled.status, stale: stale.map((r) => r.id) })
    }
    const info = yield* runs.await(command.runId)
    return yield* say("result", { runId: command.runId, status: info.status, result: info.result, error: info.error?.code })
  }).pipe(Effect.catchAll((error) => say("failed", { code: error.code, message: error.message })))

const main = Effect.gen(function* () {
  const runs = yield* Runs.Runs
  yield* say("ready")
  const lines = readline.createInterface({ input: process.stdin })
  yield* Effect.async<never>((resume) => {
    lines.on("line", (line) => {
      if (line.trim() === "") return
      Effect.runFork(handle(runs, JSON.parse(line) as Command))
    })
    lines.on("close", () => resume(Effect.never))
  })
})

const layer = PostgresRuns.layer({
  url: config.url,
  definitions: [Reference, Approval, Charge],
  runnerPort: config.runnerPort,
  ...(config.shardLockExpirationMillis === undefined
    ? {}
    : { shardLockExpiration: Duration.millis(config.shardLockExpirationMillis) })
}).pipe(Layer.provide(ProbeLive))

NodeRuntime.runMain(
  Effect.scoped(main).pipe(
    Effect.provide(layer),
    Effect.catchAll((error) => say("failed", { code: error.code, message: error.message })),
    Logger.withMinimumLogLevel(LogLevel.Warning),
    Effect.ensuring(Effect.sync(() => process.exit(0)))
  )
)
