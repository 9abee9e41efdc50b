/**
 * A checked request routed by mode: plan and task go to PLAN; the other modes go through
 * PREPARE (reading `output.grammarFile` into `output.grammar`) to their runner.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type { Failure } from "../../domain/Failure.js"
import { ConfigurationFailure } from "../../domain/Failure.js"
import * as Gbnf from "../../domain/Gbnf.js"
import type { SystemRequest } from "../../domain/System.js"
import { OutputContract, SystemRequest as SystemRequestClass } from "../../domain/System.js"
import type { Constraint } from "../../services/Constraint.js"
import * as Engine from "../../services/Engine.js"
import * as Lifecycle from "../Lifecycle.js"
import type * as Partial from "./Partial.js"
import * as Chat from "./Chat.js"
import type * as Check from "./Check.js"
import type { Environment } from "./Environment.js"
import * as Extraction from "./Extraction.js"
import * as Plan from "./Plan.js"
import * as QueryMode from "./Query.js"
import * as TaskMode from "./Task.js"
import type { Outcome, RunOptions } from "./Types.js"

/**
 * Reads `output.grammarFile` into `output.grammar` (PREPARE): a regular file of
 * bounded size only, so /dev/zero or a 64 MiB file is never read whole.
 */
const resolveGrammar = (env: Environment, request: SystemRequest): Effect.Effect<SystemRequest, ConfigurationFailure> => {
  const file = request.output.grammarFile
  if (file === undefined) return Effect.succeed(request)
  const notFound = (reason: string) =>
    ConfigurationFailure.grammarNotFound(`The grammar file ${file} cannot be read: ${reason}`, {
      details: { grammarFile: file }
    })
  if (Option.isNone(env.fileSystem)) return Effect.fail(notFound("no FileSystem is provided"))
  const fs = env.fileSystem.value
  return fs.stat(file).pipe(
    Effect.mapError((e) => notFound(e.message)),
    Effect.filterOrFail(
      (info) => info.type === "File",
      (info) => notFound(`it is not a regular file (${info.type})`)
    ),
    Effect.filterOrFail(
      (info) => Number(info.size) <= Gbnf.defaultLimits.maxBytes,
      (info) => notFound(`it is ${Number(info.size)} bytes, more than the ${Gbnf.defaultLimits.maxBytes} a grammar may have`)
    ),
    Effect.zipRight(Effect.mapError(fs.readFileString(file), (e) => notFound(e.message))),
    Effect.map((grammar) => new SystemRequestClass({ ...request, output: new OutputContract({ ...request.output, grammar }) }))
  )
}

const runMode = (
  env: Environment,
  checked: Exclude<Check.Checked, QueryMode.Checked>,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
): Effect.Effect<Outcome, Failure, Engine.Engine | Constraint> => {
  if (checked.mode === "plan") return Plan.run(env, checked, partial, tracker)
  if (checked.mode === "task") return TaskMode.run(env, checked, tracker)
  const prepared = (request: SystemRequest): Effect.Effect<Outcome, Failure, Engine.Engine | Constraint> => {
    // the checked request itself unless a grammar file was read into it
    switch (checked.mode) {
      case "chat":
        return Effect.withFiberRuntime((fiber) =>
          Chat.runFrom(fiber, env, request === checked.request ? checked : { ...checked, request }, partial, tracker, runOptions))
      case "structured":
        return Extraction.structured(env, request === checked.request ? checked : { ...checked, request }, tracker)
      case "redundant":
        return Extraction.redundant(env, request === checked.request ? checked : { ...checked, request }, tracker)
    }
  }
  const reason = `mode ${checked.mode}`
  // a step of its own only for a grammar file to read
  if (checked.request.output.grammarFile !== undefined) {
    return Lifecycle.moveThen(tracker, "PREPARE", reason, Effect.flatMap(resolveGrammar(env, checked.request), prepared))
  }
  // a chat goes on in the step that moves to PREPARE (./Chat runFrom)
  if (checked.mode === "chat") {
    return Lifecycle.moveThenIn(tracker, "PREPARE", reason, (fiber) => Chat.runFrom(fiber, env, checked, partial, tracker, runOptions))
  }
  return Lifecycle.moveThen(tracker, "PREPARE", reason, prepared(checked.request))
}

/**
 * The request's checks raised, then its mode run on the engine the check found, which the caller's context holds
 * (facade/Run starts the request's fiber with it: no region to provide it).
 */
export const route = (
  env: Environment,
  admitted: Either.Either<Check.Checked, Check.CheckFailure>,
  partial: Partial.Partial,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
): Effect.Effect<Outcome, Failure, Constraint | Engine.Engine> =>
  Either.isLeft(admitted)
    ? Effect.fail(admitted.left)
    : admitted.right.mode === "query"
    ? QueryMode.run(env, admitted.right, tracker, runOptions)
    : runMode(env, admitted.right, partial, tracker, runOptions)
