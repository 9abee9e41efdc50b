/**
 * Wiring for the adapters: one place that composes the facade with the layers it
 * runs on. An adapter (CLI, HTTP) chooses an engine, tools and observability and
 * gets a `PaganticSystem` to call; it never reaches the loops directly.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { InferenceFailure } from "../domain/Failure.js"
import * as Constraint from "../layers/JsonConstraint.js"
import * as GrammarChecker from "../layers/LlamaGrammarChecker.js"
import { isBundledModelName } from "../layers/llama/PaganticChatWrapper.js"
import * as LlamaEngine from "../layers/LlamaEngine.js"
import * as Memory from "../layers/InMemoryMemory.js"
import * as Observe from "../layers/InMemoryObserve.js"
import * as ToolRegistry from "../layers/InProcessToolRegistry.js"
import * as Calculator from "../layers/tools/Calculator.js"
import * as Facade from "../programs/Facade.js"
import * as App from "./App.js"
import * as BundledTasks from "./BundledTasks.js"
import type { Constraint as ConstraintTag } from "../services/Constraint.js"
import type { Engine } from "../services/Engine.js"
import { Engine as EngineTag } from "../services/Engine.js"
import type { Reranker } from "../services/Reranker.js"
import type { Runs } from "../services/Runs.js"
import type { ResponderRegistry } from "../services/ResponderRegistry.js"
import type { ConversationStore } from "../services/ConversationStore.js"
import type { SessionState } from "../services/SessionState.js"
import type { EventLog } from "../services/EventLog.js"
import type { Metrics } from "../services/Metrics.js"
import type * as Tool from "../services/ToolRegistry.js"
import type { ToolRegistry as ToolRegistryTag } from "../services/ToolRegistry.js"

export interface Options<E, ER = never> {
  /** The engine; default: the llama.cpp engine configured from the environment. */
  readonly engine?: Layer.Layer<Engine, E>
  /** Tools every request may use (narrowed per request by `SystemRequest.tools`). Default: the calculator. */
  readonly tools?: ReadonlyArray<Tool.Tool<any, any>>
  readonly facade?: Facade.Options
  /** Observability; default: events and metrics in memory. */
  readonly observe?: Layer.Layer<EventLog | Metrics>
  /**
   * Who answers mode query (and `POST /v1/queries`). Default: the engine as one
   * llm responder, model "model" (also `~model`), ranked by the LexicalReranker.
   */
  readonly responders?: Layer.Layer<ResponderRegistry | Reranker, ER, Engine>
  /**
   * Durable runs the facade runs queries on (with `facade.queries.definition`
   * registered among their definitions); they get the engine and the responders,
   * and are provided beside the facade. Default: none (queries run in memory).
   */
  readonly runs?: Layer.Layer<Runs, ER, Engine | ResponderRegistry | Reranker>
  /**
   * On the bundled model, mode task runs with the processors and the analyzer it
   * was taught (BundledTasks: sentiment and calculator), as `pagantic task` does;
   * on any other model, and when `facade.taskProcessors` is given, the facade's
   * own. The model is recognised by its name when the layer is built (a model
   * that does not tell its name within 5 s is taken for another). Default false.
   */
  readonly bundledTasks?: boolean
}

/** The facade, with BundledTasks' task mode on the bundled model (see `Options.bundledTasks`). */
const facadeOn = (options: Facade.Options, bundledTasks: boolean) =>
  !bundledTasks || options.taskProcessors !== undefined
    ? Facade.layer(options)
    : Layer.unwrapEffect(
      Effect.gen(function* () {
        const engine = yield* EngineTag
        const info = yield* engine.modelInfo.pipe(Effect.timeout("5 seconds"), Effect.option)
        if (Option.isNone(info) || !isBundledModelName(info.value.name)) return Facade.layer(options)
        return Facade.layer({
          ...options,
          taskProcessors: BundledTasks.processors(Layer.succeed(EngineTag, engine)),
          taskAnalyzer: options.taskAnalyzer ?? BundledTasks.analyzer
        })
      })
    )

/** The `~aliases` of `engineResponder` (for a query definition run outside the facade's check). */
export const engineResponderAliases: Readonly<Record<string, string>> = App.engineAliases

/** The engine as the one llm responder of queries: model "model", alias `~model`. */
export const engineResponder: Layer.Layer<ResponderRegistry | Reranker, never, Engine> =
  // one well-formed responder: registering it cannot fail
  Layer.orDie(App.responders(App.none))

/** What `layer` provides: the facade and the services it runs on, shared with the caller. */
export type Provided = Facade.PaganticSystem | Engine | EventLog | Metrics | ConversationStore | SessionState | ToolRegistryTag | ConstraintTag

/**
 * The facade with its services: engine, tools, constraint, memory, observability;
 * with `runs`, the durable runs too (the Runs service is provided beside the facade).
 */
export function layer<E = never, ER = never>(
  options: Options<E, ER> & { readonly runs: NonNullable<Options<E, ER>["runs"]> }
): Layer.Layer<Provided | Runs, E | ER | InferenceFailure | ConfigError.ConfigError>
export function layer<E = never, ER = never>(
  options?: Options<E, ER>
): Layer.Layer<Provided, E | ER | InferenceFailure | ConfigError.ConfigError>
export function layer<E = never, ER = never>(
  options: Options<E, ER> = {}
):
  | Layer.Layer<Provided, E | ER | InferenceFailure | ConfigError.ConfigError>
  | Layer.Layer<Provided | Runs, E | ER | InferenceFailure | ConfigError.ConfigError>
{
  // Each layer is one value, so the facade and the caller share one engine and one log.
  const engine: Layer.Layer<Engine, E | InferenceFailure | ConfigError.ConfigError> =
    options.engine ?? LlamaEngine.layerConfig()
  const observe = options.observe ?? Layer.merge(Observe.eventLogMemory, Observe.metricsMemory)
  const services = Layer.mergeAll(
    NodeFileSystem.layer,
    Constraint.layer,
    GrammarChecker.layer,
    Memory.layerMemory,
    ToolRegistry.layer(options.tools ?? [Calculator.calculator]),
    observe,
    engine
  )
  const responders = options.responders ?? engineResponder
  const facade = facadeOn(options.facade ?? {}, options.bundledTasks === true)
  if (options.runs === undefined) {
    return facade.pipe(Layer.provide(responders), Layer.provideMerge(services))
  }
  const runs = options.runs.pipe(Layer.provide(responders))
  return facade.pipe(
    Layer.provide(responders),
    Layer.provideMerge(runs),
    Layer.provideMerge(services)
  )
}
