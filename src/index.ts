/**
 * pagantic: deterministic control loops around probabilistic inference, the Effect way.
 *
 * Domain (layer 0): schemas and the failure taxonomy. Services: one Tag per layer
 * of the design. Layers: implementations to provide. Programs: the loops.
 */

// domain
export * as Event from "./domain/Event.js"
export * as Failure from "./domain/Failure.js"
export * as JsonSchema from "./domain/JsonSchema.js"
export * as Lifecycle from "./domain/Lifecycle.js"
export * as Message from "./domain/Message.js"
export * as ModelInfo from "./domain/ModelInfo.js"
export * as System from "./domain/System.js"
export * as TokenUsage from "./domain/TokenUsage.js"

// services
export * as EngineService from "./services/Engine.js"
export * as IdGenerator from "./services/IdGenerator.js"
export * as Memory from "./services/Memory.js"
export * as Observe from "./services/Observe.js"
export * as Retrieval from "./services/Context.js"
export * as Tool from "./services/ToolRegistry.js"

// layers
export * as LlamaEngine from "./layers/LlamaEngine.js"
export * as MemoryLayer from "./layers/Memory.js"
export * as ObserveLayer from "./layers/Observe.js"
export * as ScriptedEngine from "./layers/ScriptedEngine.js"
export * as ToolRegistryLayer from "./layers/ToolRegistry.js"
export * as Tools from "./layers/tools/index.js"

// programs
export * as AgentLoop from "./programs/AgentLoop.js"
export * as RetryPolicy from "./programs/RetryPolicy.js"
