/**
 * Wiring: the system a command runs on. `CliEngine` builds the engine for the
 * `--model` / `--threads` choice (llama.cpp at the edge, a scripted engine in
 * tests); the facade (`Live.layer`) is composed around it with the tools the
 * command offers. The engine's outputs are recorded, so that `vote` and `demo`
 * can show every replica's answer (observation only: nothing is changed).
 */
import * as Context from "effect/Context"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { InferenceFailure } from "../../domain/Failure.js"
import type { SystemRequest } from "../../domain/System.js"
import * as LlamaEngine from "../../layers/LlamaEngine.js"
import * as Calculator from "../../layers/tools/Calculator.js"
import type * as Facade from "../../programs/Facade.js"
import { PaganticSystem } from "../../programs/Facade.js"
import * as EngineModule from "../../services/Engine.js"
import { Engine } from "../../services/Engine.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import type * as Tool from "../../services/ToolRegistry.js"
import * as Live from "../Live.js"
import { fromLayerFailure } from "./CliFailure.js"
import { type GlobalOptions, root } from "./Flags.js"
import * as Progress from "./Progress.js"

// ---------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------

/** The engine choice made on the command line. */
export interface EngineSettings {
  readonly model?: string | undefined
  readonly threads?: number | undefined
}

/** The engine for an `--model` / `--threads` choice. */
export interface Engines {
  readonly make: (settings: EngineSettings) => Layer.Layer<Engine, InferenceFailure | ConfigError.ConfigError>
}

/** Builds the engine a command runs on (llama.cpp at the edge, a scripted one in tests). */
export class CliEngine extends Context.Tag("pagantic/CliEngine")<CliEngine, Engines>() {}

/** The llama.cpp engine: `--model` / `--threads` override the environment's configuration. */
export const llamaEngine: Layer.Layer<CliEngine> = Layer.succeed(CliEngine, {
  make: (settings) =>
    LlamaEngine.layerConfig({
      ...(settings.model === undefined ? {} : { modelPath: settings.model }),
      ...(settings.threads === undefined ? {} : { threads: settings.threads })
    })
})

/** The engine settings: a subcommand's own `--model` / `--threads` win over the ones before it. */
export const settingsOf = (own: GlobalOptions) =>
  Effect.map(root, (global): EngineSettings => ({
    model: Option.getOrUndefined(Option.orElse(own.model, () => global.model)),
    threads: Option.getOrUndefined(Option.orElse(own.threads, () => global.threads))
  }))

/**
 * The raw output of every inference the engine finishes, in order. The response
 * carries a vote's winner and confidence but not the replicas' answers, so the CLI
 * watches the engine to show them.
 */
const recordingEngine = (outputs: SubscriptionRef.SubscriptionRef<ReadonlyArray<string>>) =>
  Layer.effect(
    Engine,
    Effect.map(Engine, (engine) => {
      const record = (result: InferenceResult) => SubscriptionRef.update(outputs, (all) => [...all, result.content])
      const sampleMany = engine.sampleMany
      return Engine.of({
        ...engine,
        infer: (request) => Effect.tap(engine.infer(request), record),
        stream: (request) =>
          EngineModule.tapParts(engine.stream(request), (part) => (part._tag === "Finish" ? record(part.result) : undefined)),
        // a vote's replicas drawn together (one prefix tree): each sample answered is an output too
        ...(sampleMany === undefined ? {} : {
          sampleMany: (request: InferenceRequest, n: number) =>
            Effect.tap(sampleMany(request, n), (samples) =>
              Effect.forEach(samples, (sample) => sample._tag === "Right" ? record(sample.right) : Effect.void, { discard: true }))
        })
      })
    })
  )

/**
 * Loads the engine for these settings (with its outputs recorded), runs `program`
 * with it, and disposes it. A model that does not load is a CliFailure.
 */
export const withEngine = <A, E, R>(
  own: GlobalOptions,
  program: (engine: Layer.Layer<Engine>, outputs: SubscriptionRef.SubscriptionRef<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const engines = yield* CliEngine
      const settings = yield* settingsOf(own)
      const outputs = yield* SubscriptionRef.make<ReadonlyArray<string>>([])
      const engine = yield* Layer.build(Layer.provide(recordingEngine(outputs), engines.make(settings))).pipe(
        Effect.mapError(fromLayerFailure)
      )
      return yield* program(Layer.succeedContext(engine), outputs)
    })
  )

/**
 * `withEngine` with a progress line on standard error counting the engine's
 * finished inferences (live on a terminal; off one, a plain line every 10): for
 * commands that run many inferences without printing (`task`, `query`, `plan`).
 */
export const withEngineTracked = <A, E, R>(
  own: GlobalOptions,
  label: string,
  program: (engine: Layer.Layer<Engine>, outputs: SubscriptionRef.SubscriptionRef<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) =>
  withEngine(own, (engine, outputs) =>
    Progress.track({ label, unit: "inferences", every: 10 }, (tracker) =>
      Effect.gen(function* () {
        const watching = yield* Effect.fork(
          Stream.runForEach(Stream.drop(outputs.changes, 1), (all) => tracker.set(all.length))
        )
        return yield* program(engine, outputs).pipe(Effect.ensuring(Fiber.interrupt(watching)))
      })))

// ---------------------------------------------------------------------------
// The facade
// ---------------------------------------------------------------------------

/**
 * Provides the facade (`Live.layer`) over a loaded engine, with the tools this
 * command offers: chat and plans get the calculator; extraction and votes get
 * none, since a structured request with tools first runs a tool phase.
 */
export const onSystem =
  (engine: Layer.Layer<Engine>, tools: ReadonlyArray<Tool.Tool<any, any>>) =>
  <A, E, R>(program: Effect.Effect<A, E, R>) =>
    // the engine is already built: composing the facade around it cannot fail
    Effect.provide(program, Layer.orDie(Live.layer({ engine, tools })))

export const toolsFor = {
  chat: [Calculator.calculator],
  plan: [Calculator.calculator],
  structured: []
} as const

/** `withSystem` with the progress line of `withEngineTracked`. */
export const withSystemTracked = <A, E, R>(
  own: GlobalOptions,
  label: string,
  tools: ReadonlyArray<Tool.Tool<any, any>>,
  program: (outputs: SubscriptionRef.SubscriptionRef<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) => withEngineTracked(own, label, (engine, outputs) => onSystem(engine, tools)(program(outputs)))

/** Runs `program` on the facade with `tools`, over the engine chosen by the options. */
export const withSystem = <A, E, R>(
  own: GlobalOptions,
  tools: ReadonlyArray<Tool.Tool<any, any>>,
  program: (outputs: SubscriptionRef.SubscriptionRef<ReadonlyArray<string>>) => Effect.Effect<A, E, R>
) => withEngine(own, (engine, outputs) => onSystem(engine, tools)(program(outputs)))

/** Runs a request on the facade in context. */
export const runRequest = (request: SystemRequest, options?: Facade.RunOptions) =>
  Effect.flatMap(PaganticSystem, (system) => system.run(request, options))
