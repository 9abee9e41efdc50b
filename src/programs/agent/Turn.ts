/**
 * One turn of an AgentLoop on the run loop: what the turn adds to the history (a
 * user message, or the caller's answers to the client tool calls its session
 * waits on), the ephemeral context and the PromptProvider's system prompt placed
 * in every request, the native-tools strategy run to an answer, the registered
 * tools a reply called beside client tools run, and the turn committed to the
 * loop's store (all of it, or compact) only when it completes, inside the loop's
 * turn scope (./TurnScope).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Message from "../../domain/Message.js"
import * as EphemeralContext from "../internal/EphemeralContext.js"
import * as Observed from "../internal/Observed.js"
import * as Prompt from "../internal/Prompt.js"
import * as Run from "../run/Loop.js"
import * as RunMessage from "../run/Message.js"
import * as Tools from "../run/Tools.js"
import type { LoopEvent, RequestDefaults } from "../run/Types.js"
import * as ClientTools from "./ClientTools.js"
import type { Emit, Loop } from "./Loop.js"
import { noEmit, turnSettings } from "./Loop.js"
import { withTurnScope } from "./TurnScope.js"
import type { StopReason, TurnOptions, TurnResult } from "./Types.js"

/** What a turn adds to the history before the model is asked: a user message, or the caller's tool results. */
export type TurnInput =
  | { readonly _tag: "User"; readonly text: string }
  | { readonly _tag: "ToolResults"; readonly results: ReadonlyArray<Message.ToolResult> }

/** A user message as a turn's input. */
export const userInput = (text: string): TurnInput => ({ _tag: "User", text })

/**
 * The PromptProvider's system message for a history without one, built with the
 * session state as it is now (see `Options.systemPrompt`); none when the loop has
 * its own system prompt or no provider.
 */
export const promptSystem = (loop: Loop, history: ReadonlyArray<Message.Message>): Effect.Effect<ReadonlyArray<Message.Message>> =>
  loop.options.systemPrompt !== undefined || Option.isNone(loop.prompts) || history.some(Message.isSystem)
    ? Effect.succeed([])
    : Effect.flatMap(loop.state.snapshot(loop.sessionId), (state) =>
      Prompt.defaultSystem(loop.prompts, Prompt.variablesOf(state, loop.options.promptVariables)))

/** The calls a turn that answered waits on: none (one array for every turn: nobody writes to it). */
const noCalls: ReadonlyArray<Message.ToolCall> = Object.freeze([])

/** A turn, committed to the history only when it completes. */
export const turnEffect = (loop: Loop, input: TurnInput, turn: TurnOptions, emit: Emit, streaming: boolean) =>
  withTurnScope(loop, runTurn(loop, input, turn, emit, streaming), (result) => commit(loop, result))

const commit = (loop: Loop, result: TurnResult) =>
  Effect.flatMap(loop.store.load(loop.sessionId), (base) => loop.store.save(loop.sessionId, [...base, ...joined(loop, result)]))

/** What of a turn joins the history: all of it, or (compact) the user message and the final answer. */
const joined = (loop: Loop, result: TurnResult): ReadonlyArray<Message.Message> => {
  // calls waiting on the caller stay whole: the next turn answers them
  if (loop.options.history !== "compact" || result.pendingToolCalls.length > 0) return result.transcript
  const user = result.transcript.find(Message.isUser)
  return [...(user === undefined ? [] : [user]), Message.assistant(result.content)]
}

/** The turn on the run loop: the native-tools strategy over the history and the user message. */
const runTurn = (loop: Loop, input: TurnInput, turn: TurnOptions, emit: Emit, streaming: boolean) =>
  Effect.gen(() => runTurnSteps(loop, input, turn, emit, streaming))

/** The steps of `runTurn`, one generator function for every call (a generator function made per call costs V8 new maps). */
function* runTurnSteps(loop: Loop, input: TurnInput, turn: TurnOptions, emit: Emit, streaming: boolean) {
  const base = yield* loop.store.load(loop.sessionId)
  const added = yield* turnMessages(base, input)
  // a resumed turn retrieves context for the question it is still answering
  const query = input._tag === "User" ? input.text : (base.filter(Message.isUser).at(-1)?.content ?? "")
  const contextMessages = turn.context ?? (yield* EphemeralContext.retrieve(loop.contextProvider, query))
  const context = contextMessages.length === 0 ? [] : yield* Effect.forEach(contextMessages, (m) => RunMessage.fromDomain(m))
  const prompted = yield* promptSystem(loop, base)
  const system = prompted.length === 0 ? [] : yield* Effect.forEach(prompted, (m) => RunMessage.fromDomain(m))
  const placement = Prompt.placementOf(loop.prompts)
  const settings = turnSettings(
    loop,
    requestDefaults(loop, turn),
    // the provider's system prompt and the ephemeral context are in every request, never stored
    context.length === 0 && system.length === 0
      ? Option.none()
      : Option.some((messages) => Prompt.placeRun(placement, [...system, ...messages], context)),
    eventsOf(loop, emit)
  )
  const result = yield* Run.execute(loop.runtime, settings, [...base, ...added], streaming).pipe(
    Effect.orDieWith((f) => f) // the input is the store's own messages: a malformed one is a bug
  )
  if (result.stopReason === "error" && Option.isSome(result.error)) {
    const failure = result.error.value
    return yield* failure._tag === "InferenceFailure" || failure._tag === "ToolFailure" ? Effect.fail(failure) : Effect.die(failure)
  }
  const transcript = RunMessage.toEngine(result.messages.slice(base.length))
  const pending = ClientTools.pendingOf(transcript, loop.clientNames)
  if (pending === undefined) {
    return {
      content: result.content,
      stopReason: result.stopReason as StopReason,
      toolCalls: result.toolCalls,
      pendingToolCalls: noCalls,
      usage: result.usage,
      inferences: result.iterations,
      transcript
    }
  }
  // the registered tools the same reply called run now; the client calls wait for the caller
  const served = yield* runServerCalls(loop, pending.calls.filter((call) => !loop.clientNames.has(call.name)), emit)
  return {
    content: result.content,
    stopReason: "tool_calls",
    toolCalls: [...result.toolCalls, ...served],
    pendingToolCalls: pending.clientCalls,
    usage: result.usage,
    inferences: result.iterations,
    transcript: [...pending.transcript, ...served.map(ClientTools.resultMessage)]
  } satisfies TurnResult
}

/** The turn's new messages: the user message, or the caller's answers to the calls waiting in `base`. */
const turnMessages = (base: ReadonlyArray<Message.Message>, input: TurnInput): Effect.Effect<ReadonlyArray<Message.Message>> => {
  if (input._tag === "User") return Effect.succeed([Message.user(input.text)])
  const answers = ClientTools.answers(base, input.results)
  return answers._tag === "Ok"
    ? Effect.succeed(answers.messages)
    : Effect.dieMessage(
      `AgentLoop.resume: the result for call "${answers.callId}" answers no call the session's last assistant message is waiting on`
    )
}

/** Registered tools called in the reply that also called client tools, run as the loop runs tools. */
const runServerCalls = (loop: Loop, calls: ReadonlyArray<Message.ToolCall>, emit: Emit) =>
  Effect.forEach(
    calls,
    (call) =>
      Effect.flatMap(
        Tools.run(
          {
            registry: loop.runtime.registry,
            allowTools: loop.settings.allowTools,
            toolTimeout: loop.settings.toolTimeout,
            toolRetry: loop.settings.toolRetry
          },
          call,
          "",
          Option.none()
        ),
        ({ record }) => {
          const handed = loop.options.onToolResult
          const emitted = emit({ _tag: "ToolResultReady", record })
          return Effect.as(handed === undefined ? emitted : Effect.zipRight(emitted, handed(record)), record)
        }
      ),
    { concurrency: loop.settings.toolConcurrency }
  ).pipe(Observed.within(loop.observe))

const requestDefaults = (loop: Loop, turn: TurnOptions): RequestDefaults => {
  const { options } = loop
  const request = turn.request ?? {}
  return {
    maxTokens: request.maxTokens ?? loop.maxTokens,
    sessionKey: loop.sessionId,
    temperature: request.temperature ?? options.temperature,
    topP: request.topP ?? options.topP,
    seed: request.seed,
    options: request.options,
    schema: request.schema,
    grammar: request.grammar
  }
}

/** The run's events as the turn's, and each tool result handed to `onToolResult`. */
const eventsOf = (loop: Loop, emit: Emit): Option.Option<(event: LoopEvent<string>) => Effect.Effect<void>> => {
  const onToolResult = loop.options.onToolResult
  if (emit === noEmit && onToolResult === undefined) return Option.none()
  return Option.some((event) => {
    switch (event._tag) {
      case "TextDelta":
        return emit({ _tag: "TextDelta", text: event.text, inference: event.iteration })
      case "ModelResponded":
        return emit({ _tag: "InferenceFinished", result: event.result, inference: event.iteration })
      case "ToolCallRequested":
        return emit({ _tag: "ToolCallRequested", call: event.call, inference: event.iteration })
      case "ToolResultReady": {
        const emitted = emit({ _tag: "ToolResultReady", record: event.record })
        return onToolResult === undefined ? emitted : Effect.zipRight(emitted, onToolResult(event.record))
      }
      default:
        return Effect.void
    }
  })
}

