/**
 * The CLI's entry point: `pagantic <command>` (bin/pagantic.js runs this file).
 * Wiring only: Node's file system and terminal for @effect/cli, stdio, and the
 * llama.cpp engine; a failed command exits with code 1.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Cli from "./Cli.js"

const MainLive = Layer.mergeAll(NodeContext.layer, Cli.nodeIo, Cli.llamaEngine)

Cli.run(process.argv).pipe(
  Effect.provide(MainLive),
  // every failure, defects included, is already printed by Cli.run as one line; the exit code says the rest
  NodeRuntime.runMain({ disableErrorReporting: true })
)
