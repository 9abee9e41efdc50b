/**
 * `pagantic/llama`: local inference on llama.cpp (node-llama-cpp), apart from the
 * main entry so that importing `pagantic` never loads the native binding.
 *
 * @example
 * import { LlamaEngine } from "pagantic/llama"
 * // the bundled model on one thread; PAGANTIC_MODEL_PATH etc. with layerConfig()
 * const engine = LlamaEngine.layer({ threads: 1 })
 */
export * as BundledTasks from "./adapters/BundledTasks.js"
export * as LlamaEngine from "./layers/LlamaEngine.js"
export * as LlamaGrammarChecker from "./layers/LlamaGrammarChecker.js"
