/**
 * The nested-query crash child: on a SQLite state file, starts query A (classify
 * a research document) and follows its trigger (summarise research), or resumes
 * and follows again. With `pause`, the first process SIGKILLs itself right after
 * A's KNOW (before B is started) or right after B is started. At the end it
 * prints the runs and B's thread as one JSON line.
 *
 *   node --import tsx test/support/patterns-nested-child.ts '<json Config>'
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as InMemoryResponders from "../../src/layers/InMemoryResponders.js"
import * as LexicalReranker from "../../src/layers/LexicalReranker.js"
import * as SqliteRuns from "../../src/layers/SqliteRuns.js"
import * as Orchestration from "../../src/programs/Orchestration.js"
import * as Runs from "../../src/services/Runs.js"
import { classify, documents, responders, summariseResearch } from "../../examples/patterns.js"

export interface Config {
  readonly db: string
  readonly mode: "start" | "resume"
  readonly pause?: "after-know" | "after-child-start" | undefined
}

const config = JSON.parse(process.argv[2]!) as Config
const say = (event: string, fields: Record<string, unknown> = {}) =>
  Effect.sync(() => process.stdout.write(`${JSON.stringify({ event, pid: process.pid, ...fields })}\n`))
const die = Effect.zipRight(Effect.sync(() => process.kill(process.pid, "SIGKILL")), Effect.never)

const main = (handle: Deferred.Deferred<Runs.Service>, queries: Orchestration.QueryDefinition) =>
  Effect.gen(function* () {
    const runs = yield* Runs.Runs
    yield* Deferred.succeed(handle, runs)
    const trigger = Either.getOrThrow(Orchestration.checkTrigger(summariseResearch))
    if (config.mode === "start") {
      yield* Orchestration.start(runs, queries, classify(documents[0]!), { id: "a" })
      yield* runs.await("a")
      if (config.pause === "after-know") yield* die
    }
    const children = yield* Orchestration.follow(runs, queries, "a", [trigger])
    if (config.mode === "start" && config.pause === "after-child-start") yield* die
    const child = yield* runs.await(children[0]!)
    yield* say("result", {
      children,
      status: child.status,
      runs: (yield* runs.list()).map((r) => r.id).sort(),
      thread: yield* Orchestration.thread(runs, children[0]!)
    })
  })

NodeRuntime.runMain(
  Effect.gen(function* () {
    const handle = yield* Deferred.make<Runs.Service>()
    const queries = Orchestration.definition({ name: "query", recordText: Orchestration.recordText(Deferred.await(handle)) })
    const layer = SqliteRuns.layer({ filename: config.db, definitions: [queries] }).pipe(
      Layer.provide(Layer.mergeAll(InMemoryResponders.layer({ responders }), LexicalReranker.layer()))
    )
    yield* main(handle, queries).pipe(Effect.provide(layer))
  }).pipe(
    Effect.catchAll((error) => say("failed", { code: error.code, message: error.message })),
    Effect.ensuring(Effect.sync(() => process.exit(0)))
  )
)
