/**
 * `pagantic/openai`: an Engine for any OpenAI-compatible server (typed failures,
 * retries that honour Retry-After).
 *
 * @example
 * import { OpenAiEngine } from "pagantic/openai"
 * const engine = OpenAiEngine.layerConfig() // PAGANTIC_OPENAI_BASE_URL, _MODEL, _API_KEY
 */
export * as OpenAiEngine from "./layers/OpenAiEngine.js"
