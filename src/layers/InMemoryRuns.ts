/**
 * Durable runs in memory: the same runs, steps, slots and records as on SQLite,
 * on the workflow engine's in-memory layer with the runs' tables in an in-memory
 * SQLite database. NOT durable: everything is gone when the layer closes. For
 * tests and for programs that want the Durable API without a state file.
 */
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as WorkflowEngine from "@effect/workflow/WorkflowEngine"
import * as Layer from "effect/Layer"
import type { ConfigurationFailure } from "../domain/Failure.js"
import { OrchestrationFailure } from "../domain/Failure.js"
import type { AnyDefinition, Requirements } from "../services/Runs.js"
import { Runs } from "../services/Runs.js"
import * as Engine from "./durable/Engine.js"
import * as Tables from "./durable/Tables.js"

/** Runs of `definitions`, in memory. */
export const layer = <Defs extends AnyDefinition>(options: {
  readonly definitions: ReadonlyArray<Defs>
}): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Requirements<Defs>> => {
  const client = SqliteClient.layer({ filename: ":memory:", disableWAL: true }).pipe(
    Layer.mapError((error) => OrchestrationFailure.stateUnavailable(`cannot open an in-memory database: ${error.message}`))
  )
  const store = Layer.effectDiscard(Tables.migrate).pipe(Layer.provideMerge(client))
  return Layer.scoped(Runs, Engine.make(options.definitions, { owner: "memory" })).pipe(
    Layer.provide(Layer.merge(WorkflowEngine.layerMemory, store))
  )
}
