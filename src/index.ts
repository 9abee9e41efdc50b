/**
 * pagantic: deterministic control loops around probabilistic inference, the Effect way.
 *
 * This entry holds what needs no native code and no exporter: the domain (schemas
 * and the failure taxonomy), one module per service concept (`Engine.Engine` is the
 * Tag, `Engine.Service` its shape), the loops, and the layers that are pure
 * TypeScript. Engines and adapters with heavy dependencies have their own entries:
 * `pagantic/llama` (llama.cpp), `pagantic/openai`, `pagantic/http`,
 * `pagantic/cli`, `pagantic/telemetry` (OpenTelemetry).
 *
 * @example
 * import { AgentLoop, InProcessToolRegistry, ScriptedEngine } from "pagantic"
 *
 * const program = Effect.gen(function* () {
 *   const agent = yield* AgentLoop.make()
 *   return yield* agent.chat("What is 2 + 3?")
 * }).pipe(Effect.provide(Layer.mergeAll(ScriptedEngine.layer([...]), InProcessToolRegistry.layer([...]))))
 */

// -- domain ---------------------------------------------------------------------
export * as AnswerShape from "./domain/AnswerShape.js"
export * as Event from "./domain/Event.js"
export * as Failure from "./domain/Failure.js"
export * as Gbnf from "./domain/Gbnf.js"
export * as JsonSchema from "./domain/JsonSchema.js"
export * as Lifecycle from "./domain/Lifecycle.js"
export * as Message from "./domain/Message.js"
export * as ModelInfo from "./domain/ModelInfo.js"
export * as Passage from "./domain/Passage.js"
export * as Plan from "./domain/Plan.js"
export * as Query from "./domain/Query.js"
export * as Records from "./domain/Records.js"
export * as Sampling from "./domain/Sampling.js"
export * as System from "./domain/System.js"
export * as Task from "./domain/Task.js"
export * as TokenUsage from "./domain/TokenUsage.js"

// -- services: one concept each --------------------------------------------------
export * as Constraint from "./services/Constraint.js"
export * as ContextProvider from "./services/ContextProvider.js"
export * as ConversationStore from "./services/ConversationStore.js"
export * as CostTracker from "./services/CostTracker.js"
export * as Durable from "./services/Durable.js"
export * as Engine from "./services/Engine.js"
export * as EventLog from "./services/EventLog.js"
export * as GrammarChecker from "./services/GrammarChecker.js"
export * as IdGenerator from "./services/IdGenerator.js"
export * as Notifications from "./services/Notifications.js"
export * as Metrics from "./services/Metrics.js"
export * as Planner from "./services/Planner.js"
export * as PromptProvider from "./services/PromptProvider.js"
export * as Reranker from "./services/Reranker.js"
export * as ResponderRegistry from "./services/ResponderRegistry.js"
export * as Retriever from "./services/Retriever.js"
export * as Runs from "./services/Runs.js"
export * as SessionState from "./services/SessionState.js"
export * as ToolRegistry from "./services/ToolRegistry.js"
export * as Validator from "./services/Validator.js"

// -- layers: implementations in plain TypeScript ------------------------------------
export * as Calculator from "./layers/tools/Calculator.js"
export * as InMemoryMemory from "./layers/InMemoryMemory.js"
export * as InMemoryObserve from "./layers/InMemoryObserve.js"
export * as InMemoryResponders from "./layers/InMemoryResponders.js"
export * as InProcessToolRegistry from "./layers/InProcessToolRegistry.js"
export * as JsonConstraint from "./layers/JsonConstraint.js"
export * as MiniSearchRetriever from "./layers/MiniSearchRetriever.js"
export * as ModelPlanner from "./layers/ModelPlanner.js"
export * as StaticPlanner from "./layers/StaticPlanner.js"
export * as LexicalReranker from "./layers/LexicalReranker.js"
export * as NotificationChannels from "./layers/NotificationChannels.js"
export * as ModelReranker from "./layers/ModelReranker.js"
export * as RetrieverContextProvider from "./layers/RetrieverContextProvider.js"
export * as RuleValidator from "./layers/RuleValidator.js"
export * as ScriptedEngine from "./layers/ScriptedEngine.js"
export * as TemplatePromptProvider from "./layers/TemplatePromptProvider.js"

// -- programs: the loops ------------------------------------------------------------
export * as Agent from "./programs/orchestrator/Agent.js"
export * as AgentLoop from "./programs/AgentLoop.js"
export * as Cel from "./programs/Cel.js"
export * as Facade from "./programs/Facade.js"
export * as Folds from "./programs/Folds.js"
export * as Notification from "./programs/query/Notification.js"
export * as Orchestration from "./programs/Orchestration.js"
export * as Orchestrator from "./programs/Orchestrator.js"
export * as PlanCreator from "./programs/orchestrator/PlanCreator.js"
export * as PlanExecutor from "./programs/PlanExecutor.js"
export * as QueryCheck from "./programs/query/Check.js"
export * as RedundantLoop from "./programs/RedundantLoop.js"
export * as RequestRun from "./programs/facade/RequestRun.js"
export * as ResponderSelection from "./programs/query/Select.js"
export * as RetryPolicy from "./services/RetryPolicy.js"
export * as RunLoop from "./programs/RunLoop.js"
export * as SingleShot from "./programs/query/SingleShot.js"
export * as SpecializedLoop from "./programs/SpecializedLoop.js"
export * as Structured from "./programs/Structured.js"
export * as TaskParser from "./programs/orchestrator/TaskParser.js"
export * as TaskProcessor from "./programs/orchestrator/TaskProcessor.js"
export * as Voting from "./programs/Voting.js"
export * as XmlTaskParser from "./programs/orchestrator/XmlTaskParser.js"
