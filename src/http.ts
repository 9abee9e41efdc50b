/**
 * `pagantic/http`: the HTTP API (`POST /v1/run`, OpenAI-compatible
 * `POST /v1/chat/completions`, `GET /health`) and the wiring it runs on.
 *
 * @example
 * import { Http, Live } from "pagantic/http"
 * NodeRuntime.runMain(Http.serve(Live.layer())) // 127.0.0.1:8080, PAGANTIC_* from the environment
 */
export * as Http from "./adapters/Http.js"
export * as App from "./adapters/App.js"
export * as Live from "./adapters/Live.js"
