/**
 * DurableState: the durable runs a command opens, on a SQLite state file. This
 * module loads the workflow engine, the cluster runner and the SQLite driver, so
 * the commands import it only when they use it (`RunsState.ts` does, with a
 * dynamic `import()`): `pagantic chat` never pays for them.
 *
 * The CLI's own run definition is the demo's (`demoRun`: a calculator step and a
 * model step, each journaled); an application embedding the CLI adds its own
 * through `CliRuns`.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Schema from "effect/Schema"
import { ConfigurationFailure, type OrchestrationFailure } from "../../domain/Failure.js"
import { SystemMessage, UserMessage } from "../../domain/Message.js"
import * as SqliteRuns from "../../layers/SqliteRuns.js"
import * as Calculator from "../../layers/tools/Calculator.js"
import { Durable } from "../../services/Durable.js"
import { Engine, InferenceRequest } from "../../services/Engine.js"
import type { AnyDefinition, Runs } from "../../services/Runs.js"
import * as RunsModule from "../../services/Runs.js"
import { BUNDLED_SENTIMENT_SCHEMA } from "../../layers/llama/PaganticChatWrapper.js"
import { DEMO_REVIEW, SENTIMENT_SYSTEM } from "./commands/DemoData.js"

export const defaultFilename = SqliteRuns.defaultFilename

const Labelled = Schema.parseJson(Schema.Struct({ sentiment: Schema.String }))

/** The label of a sentiment reply (`{"sentiment": "positive"}`), or the reply itself when it has none. */
const labelOf = (content: string): string =>
  Either.match(Schema.decodeUnknownEither(Labelled)(content), { onLeft: () => content, onRight: (r) => r.sentiment })

/**
 * The demo's durable run: the calculator sums, then the model classifies a
 * review; each step is journaled, so a run re-driven after a crash does not ask
 * the model again for a step it answered.
 */
export const demoRun = RunsModule.define({
  name: "pagantic.demo",
  payload: Schema.Struct({ expression: Schema.String, review: Schema.String }),
  success: Schema.Struct({ sum: Schema.String, sentiment: Schema.String }),
  program: ({ expression, review }) =>
    Effect.gen(function* () {
      const durable = yield* Durable
      const engine = yield* Engine
      const sum = yield* durable.step(
        "sum",
        Schema.String,
        Effect.map(Calculator.evaluate(expression), Calculator.format).pipe(
          Effect.mapError((error) => ConfigurationFailure.invalidRequest(`expression: ${error.message}`))
        )
      )
      const sentiment = yield* durable.step(
        "classify",
        Schema.String,
        Effect.map(
          engine.infer(
            new InferenceRequest({
              messages: [new SystemMessage({ role: "system", content: SENTIMENT_SYSTEM }), new UserMessage({ role: "user", content: review })],
              schema: BUNDLED_SENTIMENT_SCHEMA,
              temperature: 0
            })
          ),
          (result) => labelOf(result.content)
        )
      )
      return { sum, sentiment }
    })
})

/** The demo run's input. */
export const demoPayload = { expression: "12 + 7", review: DEMO_REVIEW }

/**
 * Durable runs on `filename` for `definitions`, the engine the ones that infer
 * need taken from the context. The runner's notes about runs of definitions it
 * does not have are not printed: a command that only lists runs has none of them.
 */
export const layerWith = (
  filename: string,
  definitions: ReadonlyArray<AnyDefinition>
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Engine> =>
  SqliteRuns.layer({ filename, definitions: definitions as ReadonlyArray<RunsModule.Definition<any, any, any, any, Engine>> }).pipe(
    Layer.provide(Logger.minimumLogLevel(LogLevel.Error))
  )

/**
 * As `layerWith`, for a server: its logs are not turned down (the level a layer
 * sets reaches the layers built after it, and a server's "Listening on" and
 * every 5xx must be logged).
 */
export const serverLayer = (
  filename: string,
  definitions: ReadonlyArray<AnyDefinition>
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure, Engine> =>
  SqliteRuns.layer({ filename, definitions: definitions as ReadonlyArray<RunsModule.Definition<any, any, any, any, Engine>> })

/** As `layerWith`, on `engine`. */
export const layer = (
  filename: string,
  definitions: ReadonlyArray<AnyDefinition>,
  engine: Layer.Layer<Engine>
): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure> =>
  layerWith(filename, definitions).pipe(Layer.provide(engine))

/** The runs on `filename` with no definitions: its tables created, the runs recorded left as they are. */
export const bare = (filename: string): Layer.Layer<Runs, OrchestrationFailure | ConfigurationFailure> =>
  SqliteRuns.layer({ filename, definitions: [] }).pipe(Layer.provide(Logger.minimumLogLevel(LogLevel.Error)))
