/**
 * `tsx src/adapters/serve.ts`: the HTTP adapter on the bundled model.
 *
 * Wiring only: the facade on the llama.cpp engine configured from the
 * environment (`Live.layer()`: PAGANTIC_MODEL_PATH, PAGANTIC_THREADS, ...), served
 * on 127.0.0.1:PAGANTIC_PORT (default 8080; see `Http.layerConfig` for the rest).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Http from "./Http.js"
import * as Live from "./Live.js"

NodeRuntime.runMain(Http.serve(Live.layer()))
