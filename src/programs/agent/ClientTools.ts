/**
 * Client tools: tools the caller of a turn runs itself. They are offered to the
 * model beside the registered tools, but never run here: a reply that calls one
 * ends the turn (stop reason "tool_calls") with the calls pending, and the
 * caller's results continue the conversation in the next turn (`resume`). This
 * is the tool protocol of OpenAI-style clients, which send their tools' schemas
 * and run the tools themselves.
 *
 * - A client tool shadows a registered tool of the same name: the caller's
 *   definition is offered and a call of that name is the caller's.
 * - Registered tools the same reply calls still run here, before the turn ends,
 *   so the transcript holds their results and only the client calls wait.
 * - `toolChoice` narrows what is offered: "none" offers nothing, a name offers
 *   only that tool (and requires a call), "required" re-asks an answer given
 *   before any tool call. `parallelToolCalls: false` acts on the first call of a
 *   reply only.
 */
import * as Effect from "effect/Effect"
import * as Message from "../../domain/Message.js"
import type { ToolCallRecord } from "../../domain/System.js"
import type { Strategy, ToolUsePolicy } from "../run/Types.js"
import type { ToolChoice } from "./Types.js"

/** The index of the last assistant message, -1 when there is none. */
const lastAssistant = (messages: ReadonlyArray<Message.Message>): number => {
  for (let i = messages.length - 1; i >= 0; i--) if (Message.isAssistant(messages[i]!)) return i
  return -1
}

/** What the loop offers the model, and which names are the caller's. */
export interface Offer {
  readonly definitions: ReadonlyArray<Message.ToolDefinition>
  readonly clientNames: ReadonlySet<string>
  readonly policy: ToolUsePolicy
}

const noNames: ReadonlySet<string> = new Set()

/** The tools offered under `choice`: the registered ones not shadowed by a client tool, then the client tools. */
export const offer = (
  registered: ReadonlyArray<Message.ToolDefinition>,
  client: ReadonlyArray<Message.ToolDefinition>,
  choice: ToolChoice | undefined
): Offer => {
  // no client tool (most loops): the registered tools as they are, one empty set of names for all
  if (client.length === 0 && (choice === undefined || choice === "auto")) return { definitions: registered, clientNames: noNames, policy: "auto" }
  const clientNames = new Set(client.map((d) => d.name))
  const all = [...registered.filter((d) => !clientNames.has(d.name)), ...client]
  if (choice === "none") return { definitions: [], clientNames, policy: "none" }
  if (choice === undefined || choice === "auto") return { definitions: all, clientNames, policy: "auto" }
  if (choice === "required") return { definitions: all, clientNames, policy: "required" }
  return { definitions: all.filter((d) => d.name === choice.name), clientNames, policy: "required" }
}

/** Whether `choice` names a tool that is not offered (neither registered nor the caller's). */
export const unknownChoice = (
  registered: ReadonlyArray<Message.ToolDefinition>,
  client: ReadonlyArray<Message.ToolDefinition>,
  choice: ToolChoice | undefined
): string | undefined =>
  typeof choice === "object" && !registered.some((d) => d.name === choice.name) &&
    !client.some((d) => d.name === choice.name)
    ? choice.name
    : undefined

/**
 * `inner` with the client protocol: a reply calling a client tool ends the run
 * (the turn then runs that reply's registered calls itself), and with `parallel`
 * false only a reply's first call is acted on.
 */
export const strategy = (inner: Strategy<string>, clientNames: ReadonlySet<string>, parallel: boolean): Strategy<string> =>
  // no client tool and every call acted on: the protocol changes nothing
  clientNames.size === 0 && parallel ? inner : {
    ...inner,
    parseResponse: (response: Parameters<Strategy<string>["parseResponse"]>[0]) =>
      parallel
        ? inner.parseResponse(response)
        : Effect.map(inner.parseResponse(response), (action) =>
          action.toolCalls.length <= 1 ? action : { ...action, toolCalls: action.toolCalls.slice(0, 1) }),
    shouldContinue: (action: Parameters<Strategy<string>["shouldContinue"]>[0], iteration: number) =>
      action.toolCalls.some((call) => clientNames.has(call.name)) ? Effect.succeed(false) : inner.shouldContinue(action, iteration)
  }

/** A turn's transcript that ended on client calls, split into what stays and what waits. */
export interface Pending {
  /** The transcript up to and including the assistant message with the calls. */
  readonly transcript: ReadonlyArray<Message.Message>
  /** The calls of that message, in order. */
  readonly calls: ReadonlyArray<Message.ToolCall>
  readonly clientCalls: ReadonlyArray<Message.ToolCall>
}

/**
 * When the transcript's last assistant message calls a client tool: the
 * transcript without the placeholder answers the run loop gave its calls, and
 * the calls. None otherwise.
 */
export const pendingOf = (
  transcript: ReadonlyArray<Message.Message>,
  clientNames: ReadonlySet<string>
): Pending | undefined => {
  const at = lastAssistant(transcript)
  if (at === -1) return undefined
  const last = transcript[at] as Message.AssistantMessage
  const clientCalls = last.toolCalls.filter((call) => clientNames.has(call.name))
  if (clientCalls.length === 0) return undefined
  return { transcript: transcript.slice(0, at + 1), calls: last.toolCalls, clientCalls }
}

/** The tool message of a record. */
export const resultMessage = (record: ToolCallRecord): Message.Message =>
  Message.toolResult(
    new Message.ToolResult({ callId: record.id, name: record.name, content: record.result, isError: record.isError })
  )

/**
 * The tool messages that continue a conversation waiting on client calls: the
 * caller's results in the order of the calls, and "not executed" for a call the
 * caller did not answer (engines refuse a call without an answer). A result that
 * answers no waiting call is an error naming it.
 */
export const answers = (
  history: ReadonlyArray<Message.Message>,
  results: ReadonlyArray<Message.ToolResult>
): { readonly _tag: "Ok"; readonly messages: ReadonlyArray<Message.Message> } | {
  readonly _tag: "Unexpected"
  readonly callId: string
} => {
  const at = lastAssistant(history)
  const answered = new Set(history.slice(at + 1).filter(Message.isTool).map((m) => m.toolCallId))
  const waiting = at === -1 ? [] : (history[at] as Message.AssistantMessage).toolCalls.filter((c) => !answered.has(c.id))
  const byId = new Map(results.map((r) => [r.callId, r]))
  const stray = results.find((r) => !waiting.some((c) => c.id === r.callId))
  if (stray !== undefined) return { _tag: "Unexpected", callId: stray.callId }
  return {
    _tag: "Ok",
    messages: waiting.map((call) => {
      const result = byId.get(call.id)
      return Message.toolResult(
        result ?? new Message.ToolResult({
          callId: call.id,
          name: call.name,
          content: "Error: not executed: the caller sent no result for this call",
          isError: true
        })
      )
    })
  }
}
