/**
 * The crash child of the async-request test: `pagantic serve`'s wiring with a
 * store (Live.layer on SqliteRuns, the request definition registered and bound)
 * on a scripted engine that appends "engine <pid>" to a counter file each time it
 * is asked and then answers, or with `pause` never answers (so that the parent
 * can SIGKILL it mid-request). Prints `{"event":"listening","url":...}`.
 *
 *   node --import tsx test/support/async-child.ts '<json Config>'
 */
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as Http from "../../src/adapters/Http.js"
import * as Live from "../../src/adapters/Live.js"
import * as TokenUsage from "../../src/domain/TokenUsage.js"
import * as SqliteRuns from "../../src/layers/SqliteRuns.js"
import * as ScriptedEngine from "../../src/layers/ScriptedEngine.js"
import * as RequestRun from "../../src/programs/facade/RequestRun.js"
import { InferenceResult } from "../../src/services/Engine.js"

export interface Config {
  readonly db: string
  readonly counter: string
  readonly pause: boolean
}

const config = JSON.parse(process.argv[2]!) as Config

const answer = Effect.gen(function* () {
  yield* Effect.sync(() => fs.appendFileSync(config.counter, `engine ${process.pid}\n`))
  if (config.pause) yield* Effect.never
  return new InferenceResult({ content: "answered after the crash", toolCalls: [], usage: TokenUsage.empty, finishReason: "stop" })
})

const main = Effect.gen(function* () {
  const requests = yield* RequestRun.make
  const engine = ScriptedEngine.layer([ScriptedEngine.respond(() => answer)], { whenExhausted: "repeat-last" })
  const runs = SqliteRuns.layer({ filename: config.db, definitions: [requests.definition] })
  const system = requests.layer.pipe(Layer.provideMerge(Live.layer({ engine, tools: [], runs })))
  const server = Http.layer({ port: 0 }).pipe(Layer.provideMerge(system))
  yield* Layer.launch(
    Layer.effectDiscard(
      Effect.flatMap(HttpServer.HttpServer, (s) =>
        Effect.sync(() => {
          const address = s.address
          const url = address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "unknown"
          process.stdout.write(`${JSON.stringify({ event: "listening", url, pid: process.pid })}\n`)
        }))
    ).pipe(Layer.provideMerge(server))
  )
})

NodeRuntime.runMain(main)
