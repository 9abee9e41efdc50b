/**
 * An application `pagantic serve --app FILE` hosts: its own tools, query
 * responders (humans among them) and durable definitions, served beside the
 * bundled ones with no server code.
 *
 * The module's default export (or its export named `app`) is an `App`, made with
 * `make` so that its parts are checked by type:
 *
 * @example
 * // app.mjs (an ES module: .mjs, or .js in a package of "type": "module")
 * import * as Effect from "effect/Effect"
 * import * as Schema from "effect/Schema"
 * import { App } from "pagantic/http"
 * import { ToolRegistry } from "pagantic"
 *
 * export default App.make({
 *   tools: [ToolRegistry.make({
 *     name: "stock",
 *     description: "units in stock of a product",
 *     parameters: Schema.Struct({ sku: Schema.String }),
 *     handler: ({ sku }) => Effect.succeed(sku === "A-1" ? 12 : 0)
 *   })],
 *   responders: [{ id: "reviewer", kind: "actor", did: "did:example:reviewer", description: "reviews refunds" }]
 * })
 *
 * Tools are offered beside the calculator (a tool of the same name replaces it).
 * Responders answer mode query and `POST /v1/queries` beside the served engine
 * (model "model"); a human (`kind: "actor"`) is notified in its inbox
 * (`GET /v1/responders/{id}/inbox`) and answers with its key at
 * `POST /v1/runs/{id}/slots/{slot}`. Definitions are durable runs of the server's
 * store (with `--state` or `--state-url`); their requirements are the engine's.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { ConfigurationFailure } from "../domain/Failure.js"
import * as Json from "../domain/Json.js"
import * as Text from "../domain/Text.js"
import * as InMemoryResponders from "../layers/InMemoryResponders.js"
import * as LexicalReranker from "../layers/LexicalReranker.js"
import * as Calculator from "../layers/tools/Calculator.js"
import type { Durable } from "../services/Durable.js"
import { Engine } from "../services/Engine.js"
import type { Reranker } from "../services/Reranker.js"
import type { Responder, ResponderRegistry } from "../services/ResponderRegistry.js"
import type * as Runs from "../services/Runs.js"
import type * as Tool from "../services/ToolRegistry.js"

/** What an application adds to a server. Every part is optional. */
export interface App {
  /** Tools every request may use, beside the calculator. */
  readonly tools?: ReadonlyArray<Tool.Tool<any, any>> | undefined
  /** Query responders beside the served engine: humans, systems, patterns, other llm engines. */
  readonly responders?: ReadonlyArray<Responder> | undefined
  /** Durable definitions served with a store; what they need beyond a Durable is the engine. */
  readonly definitions?: ReadonlyArray<Runs.Definition<any, any, any, any, Durable | Engine>> | undefined
}

/** An application, checked by type. */
export const make = (app: App): App => app

/** The empty application: `pagantic serve` without `--app`. */
export const none: App = {}

const invalid = (file: string, problem: string) =>
  ConfigurationFailure.invalidRequest(`--app ${Text.excerpt(file, 200)}: ${problem}`, { details: { field: "--app" } })

/** What the module exported, checked to be an App (its parts' shapes; the registry checks each responder). */
const appOf = (file: string, exports: Record<string, unknown>): Effect.Effect<App, ConfigurationFailure> => {
  const app = exports["default"] ?? exports["app"]
  if (!Json.isObject(app)) return Effect.fail(invalid(file, "the module exports no App (a default export, or an export named app, made with App.make)"))
  for (const key of Object.keys(app)) {
    if (key !== "tools" && key !== "responders" && key !== "definitions") {
      return Effect.fail(invalid(file, `unknown part ${JSON.stringify(Text.excerpt(key, 60))} (an App has tools, responders and definitions)`))
    }
  }
  for (const part of ["tools", "responders", "definitions"] as const) {
    if (app[part] !== undefined && !Array.isArray(app[part])) return Effect.fail(invalid(file, `${part} is not an array`))
  }
  const tools = (app["tools"] ?? []) as ReadonlyArray<unknown>
  const names = new Set<string>()
  for (const [i, tool] of tools.entries()) {
    if (!Json.isObject(tool) || typeof tool["name"] !== "string" || typeof tool["handler"] !== "function" || !Schema.isSchema(tool["parameters"])) {
      return Effect.fail(invalid(file, `tools[${i}] is not a tool (name, description, parameters as a Schema, handler: see ToolRegistry.make)`))
    }
    if (names.has(tool["name"])) return Effect.fail(invalid(file, `two tools are named ${JSON.stringify(Text.excerpt(tool["name"], 60))}`))
    names.add(tool["name"])
  }
  const definitions = (app["definitions"] ?? []) as ReadonlyArray<unknown>
  for (const [i, definition] of definitions.entries()) {
    if (!Json.isObject(definition) || typeof definition["name"] !== "string") {
      return Effect.fail(invalid(file, `definitions[${i}] is not a run definition (see Runs.define)`))
    }
  }
  return Effect.succeed(app as App)
}

/**
 * Imports the application module `file` (a path, relative to the working
 * directory). A module that cannot be loaded, or does not export an App, is a
 * CONFIG_INVALID_REQUEST naming `--app` and the file.
 */
export const load = (file: string): Effect.Effect<App, ConfigurationFailure> =>
  Effect.tryPromise({
    try: () => import(pathToFileURL(path.resolve(file)).href) as Promise<Record<string, unknown>>,
    catch: (error) => {
      const message = error instanceof Error ? error.message : String(error)
      // node reads a .js file outside a "type": "module" package as CommonJS
      const hint = /import statement outside a module|require\(\) ES Module/i.test(message)
        ? " (an App is an ES module: name it .mjs, or set \"type\": \"module\" in its package.json)"
        : ""
      return invalid(file, `cannot load it: ${Text.excerpt(message, 300)}${hint}`)
    }
  }).pipe(Effect.flatMap((exports) => appOf(file, exports)))

/** The tools a server offers with `app`: the calculator, unless the app has a tool of its name, and the app's. */
export const toolsOf = (app: App): ReadonlyArray<Tool.Tool<any, any>> => {
  const own = app.tools ?? []
  return [...(own.some((tool) => tool.name === Calculator.calculator.name) ? [] : [Calculator.calculator]), ...own]
}

/** The `~aliases` of the served engine as a responder. */
export const engineAliases: Readonly<Record<string, string>> = { model: "model" }

/**
 * The responders of a server with `app`: the served engine as the llm responder
 * "model" (`~model`), then the app's; ranked by the LexicalReranker. An app's
 * responder that the registry refuses (a duplicate id, a malformed descriptor) is
 * a ConfigurationFailure when the server starts.
 */
export const responders = (app: App): Layer.Layer<ResponderRegistry | Reranker, ConfigurationFailure, Engine> =>
  Layer.merge(
    Layer.unwrapEffect(
      Effect.map(Engine, (engine) =>
        InMemoryResponders.layer({
          responders: [
            { id: "model", kind: "llm", model: "model", engine, description: "the served model" },
            ...(app.responders ?? [])
          ],
          aliases: engineAliases
        }))
    ),
    LexicalReranker.layer()
  )
