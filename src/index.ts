/**
 * pagantic: deterministic control loops around probabilistic inference, the Effect way.
 *
 * Domain (layer 0): schemas and the failure taxonomy. Services: one Tag per layer
 * of the design. Layers: implementations to provide. Programs: the loops.
 */

// domain
export * as Event from "./domain/Event.js"
export * as Failure from "./domain/Failure.js"
export * as Issues from "./domain/Issues.js"
export * as JsonSchema from "./domain/JsonSchema.js"
export * as Lifecycle from "./domain/Lifecycle.js"
export * as Message from "./domain/Message.js"
export * as ModelInfo from "./domain/ModelInfo.js"
export * as Plan from "./domain/Plan.js"
export * as System from "./domain/System.js"
export * as TokenUsage from "./domain/TokenUsage.js"

// services
export * as ConstraintService from "./services/Constraint.js"
export * as EngineService from "./services/Engine.js"
export * as IdGenerator from "./services/IdGenerator.js"
export * as Memory from "./services/Memory.js"
export * as Observe from "./services/Observe.js"
export * as PlannerService from "./services/Planner.js"
export * as PromptProviderService from "./services/PromptProvider.js"
export * as RerankerService from "./services/Reranker.js"
export * as Retrieval from "./services/Context.js"
export * as Tool from "./services/ToolRegistry.js"
export * as ValidatorService from "./services/Validator.js"

// layers
export * as ConstraintLayer from "./layers/Constraint.js"
export * as ContextBuilder from "./layers/ContextBuilder.js"
export * as GrammarChecker from "./layers/GrammarChecker.js"
export * as LlamaEngine from "./layers/LlamaEngine.js"
export * as MemoryLayer from "./layers/Memory.js"
export * as ObserveLayer from "./layers/Observe.js"
export * as OpenAiEngine from "./layers/OpenAiEngine.js"
export * as PlannerLayer from "./layers/Planner.js"
export * as PromptProviderLayer from "./layers/PromptProvider.js"
export * as RerankerLayer from "./layers/Reranker.js"
export * as Retriever from "./layers/Retriever.js"
export * as ScriptedEngine from "./layers/ScriptedEngine.js"
export * as Telemetry from "./layers/Telemetry.js"
export * as ToolRegistryLayer from "./layers/ToolRegistry.js"
export * as Tools from "./layers/tools/index.js"
export * as ValidatorLayer from "./layers/Validator.js"

// programs
export * as AgentLoop from "./programs/AgentLoop.js"
export * as Facade from "./programs/Facade.js"
export * as LifecycleTracker from "./programs/Lifecycle.js"
export * as PlanExecutor from "./programs/PlanExecutor.js"
export * as RedundantLoop from "./programs/RedundantLoop.js"
export * as RetryPolicy from "./programs/RetryPolicy.js"
export * as SpecializedLoop from "./programs/SpecializedLoop.js"
export * as Structured from "./programs/Structured.js"
export * as Voting from "./programs/Voting.js"

// adapters
export * as Live from "./adapters/Live.js"
