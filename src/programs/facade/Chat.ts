/**
 * Mode chat: one AgentLoop turn in the request's session, streamed.
 *
 * The turn runs on a staged copy of its session (committed only when the turn is
 * answered), reports its text deltas, tool calls and tool results to the caller's
 * `onProgress`, and keeps the partial output: the text of the latest inference.
 *
 * Its context is retrieved once, before the turn runs, from the ContextProvider
 * (when one is provided). The answer's confidence is that context's relevance
 * ("retrieval": the best passage score, when the scores are on [0, 1], as a model
 * reranker's are). A chat has no vote and no validation of its own, so a turn
 * that retrieved nothing, or passages scored on another scale (BM25), reports no
 * confidence at all: the field is absent, never a guess.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as Message from "../../domain/Message.js"
import * as ContextProvider from "../../services/ContextProvider.js"
import * as ConversationStore from "../../services/ConversationStore.js"
import * as AgentLoop from "../AgentLoop.js"
import * as EphemeralContext from "../internal/EphemeralContext.js"
import type * as Lifecycle from "../Lifecycle.js"
import type * as Check from "./Check.js"
import * as Confidence from "./Confidence.js"
import type { Environment } from "./Environment.js"
import * as Hints from "./Hints.js"
import * as Prompts from "./Prompts.js"
import * as Session from "./Session.js"
import type { Outcome, Progress, RunOptions } from "./Types.js"

const silent = (_: Progress): Effect.Effect<void> => Effect.void

/** One turn of the request's session; text deltas, tool calls and results reported as they come. */
export const run = (
  env: Environment,
  chat: Check.Chat,
  partial: Ref.Ref<string>,
  tracker: Lifecycle.Tracker,
  runOptions: RunOptions
) =>
  Effect.gen(function* () {
    const { options, store } = env
    const { tools } = chat.request
    const hints = Hints.effective(chat.request.hints)
    const existing = yield* store.load(chat.sessionId)
    // the history the request brings seeds a session the store does not know yet
    const session = Session.staged(store, chat.sessionId, existing.length === 0 && chat.prior.length > 0 ? chat.prior : undefined)
    // a PromptProvider's system prompt (built by the loop each turn) is checked here, at PREPARE
    const provided = chat.prior.some(Message.isSystem) ? Option.none() : yield* Prompts.systemPrompt(chat.sessionId)
    const agent = yield* Effect.provideService(
      AgentLoop.make({
        sessionId: chat.sessionId,
        systemPrompt: chat.prior.length === 0 && Option.isNone(provided) ? options.defaultSystemPrompt : undefined,
        maxToolIterations: options.maxToolIterations,
        toolConcurrency: options.toolConcurrency,
        maxTokens: hints.maxTokens,
        temperature: hints.temperature,
        topP: hints.topP,
        allowTools: tools.length === 0 ? undefined : tools
      }),
      ConversationStore.ConversationStore,
      session.store
    )
    // the turn's context, retrieved here (PREPARE) so that its relevance is the answer's confidence
    const retrieved = yield* EphemeralContext.retrieveScored(
      yield* Effect.serviceOption(ContextProvider.ContextProvider),
      chat.user.content
    )
    yield* tracker.transition("EXECUTE", "chat turn")
    const report = runOptions.onProgress ?? silent
    const finished = yield* Ref.make<Option.Option<AgentLoop.TurnResult>>(Option.none())
    yield* Stream.runForEach(
      // the engine's request carries `options` only when the request has them
      agent.chatStream(chat.user.content, {
        context: retrieved.messages,
        ...(hints.options === undefined ? {} : { request: { options: hints.options } })
      }),
      (event) => {
        switch (event._tag) {
          case "TextDelta":
            return Effect.zipRight(Ref.update(partial, (p) => p + event.text), report({ _tag: "TextDelta", text: event.text }))
          case "ToolCallRequested":
            return report({ _tag: "ToolCallRequested", call: event.call })
          case "ToolResultReady":
            return report({ _tag: "ToolResultReady", record: event.record })
          case "InferenceFinished":
            // a new inference starts from scratch: partial output is the latest reply
            return event.result.toolCalls.length > 0 ? Ref.set(partial, "") : Effect.void
          case "TurnFinished":
            return Ref.set(finished, Option.some(event.result))
          default:
            return Effect.void
        }
      }
    )
    const turn = yield* Effect.flatMap(
      Ref.get(finished),
      Option.match({
        onNone: () => Effect.dieMessage("AgentLoop.chatStream ended without TurnFinished"),
        onSome: Effect.succeed
      })
    )
    yield* session.commit
    return {
      content: turn.content,
      toolCallsMade: turn.toolCalls,
      usage: turn.usage,
      stopReason: turn.stopReason,
      ...Confidence.retrieval(retrieved.scores)
    } satisfies Outcome
  })
