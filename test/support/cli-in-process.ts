/**
 * One `pagantic` command line run in this process: its output captured, the
 * scripted engine answering `script`, and the definitions an embedding
 * application adds (`CliRuns`) when given.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Cli from "../../src/adapters/Cli.js"
import * as ScriptedEngine from "../../src/layers/ScriptedEngine.js"
import { Engine } from "../../src/services/Engine.js"
import type { AnyDefinition } from "../../src/services/Runs.js"

export interface Ran {
  readonly ok: boolean
  readonly out: string
  readonly err: ReadonlyArray<string>
  /** The failure's message (the pretty cause of a defect); undefined on success. */
  readonly failure: string | undefined
  /** How many inferences the scripted engine was asked. */
  readonly asked: number
}

export const runCli = (
  args: ReadonlyArray<string>,
  options: { readonly script?: ReadonlyArray<ScriptedEngine.Step>; readonly definitions?: ReadonlyArray<AnyDefinition> } = {}
): Effect.Effect<Ran> =>
  Effect.gen(function* () {
    const out = yield* Ref.make("")
    const err = yield* Ref.make<ReadonlyArray<string>>([])
    const { control, engine } = yield* ScriptedEngine.make(options.script ?? [])
    const command = Cli.run(["node", "pagantic", ...args]).pipe(
      Effect.provideService(Cli.CliIo, {
        write: (text) => Ref.update(out, (o) => o + text),
        error: (line) => Ref.update(err, (e) => [...e, line]),
        readLine: () => Effect.succeed(Option.none()),
        colors: false
      }),
      Effect.provideService(Cli.CliEngine, { make: () => Layer.succeed(Engine, engine) }),
      Effect.provide(NodeContext.layer)
    )
    const exit = yield* Effect.exit(
      options.definitions === undefined ? command : Effect.provideService(command, Cli.CliRuns, { definitions: options.definitions })
    )
    const failure = Exit.isFailure(exit)
      ? Option.match(Cause.failureOption(exit.cause), { onNone: () => Cause.pretty(exit.cause), onSome: (e) => String((e as { message?: unknown }).message) })
      : undefined
    return { ok: Exit.isSuccess(exit), out: yield* Ref.get(out), err: yield* Ref.get(err), failure, asked: (yield* control.requests).length }
  })
