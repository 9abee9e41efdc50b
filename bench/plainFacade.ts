/**
 * A chat request served the way a competent Effect user would write it without
 * pagantic: the plain-Effect equivalent of `Facade.run` for the bench's request
 * (mode chat, one user message, no session id, no tools, no hints), the
 * baseline of the "Facade chat" row beside the bare `infer` + object row.
 *
 * What the caller of `Facade.run` gets for that request, and the line here that
 * gives it (nothing the facade does not do for this request; each in the
 * cheapest plain Effect):
 *
 * 1. A request id: the request's, else one drawn (facade/Run.ts `execute`:
 *    `env.nextId("req")`).
 * 2. The request is checked before it runs: a chat must end with a user message,
 *    else an error response, not a failure (facade/Check.ts). Here: the last
 *    message's role.
 * 3. A session: the request's session id, else a new one; the turn starts from the
 *    stored session, or from the history the request brings when the store has
 *    none, and the conversation is stored only when the turn answered
 *    (facade/Chat.ts, facade/Session.ts `staged`), the sessions bounded in number
 *    (services/ConversationStore.ts). Here: a Map, written after the answer.
 * 4. Cancellable by request id from another fiber while it runs (`Facade.cancel`,
 *    facade/Cancellations.ts): the turn runs in a fiber registered under its id.
 *    Here: `Effect.fork`, a Map of fibers, `Fiber.await` (a plain program needs the
 *    fiber to interrupt it; the facade starts its fiber on the caller's stack,
 *    facade/Run.ts `cancellable`).
 * 5. A timeout when the request's hints give one (none here, as in the facade's:
 *    `Effect.timeoutFail` only when hinted).
 * 6. The turn: the model on the history, the tool loop up to 20 rounds (the
 *    AgentLoop's cap; this request has no tools: one round), the answer's usage
 *    summed over the rounds (programs/AgentLoop.ts, run/Loop.ts).
 * 7. The response: request id, session id, content, tool calls made, token usage,
 *    stop reason; a failure becomes an error response with its code, category and
 *    message and what was spent so far, never a failure of the call
 *    (facade/Response.ts).
 *
 * Left out though the facade does them, so this baseline does less than the
 * facade: the lifecycle and its transitions (Execution.transitions), partial
 * output on a timeout or cancel (the facade streams the turn for it; Effect's
 * Stream here would cost some 640 operations per inference), the check of the
 * tools the request names, the system prompt of a PromptProvider, context
 * retrieval, the request's tool whitelist, hints forwarded to the engine.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Message from "../src/domain/Message.js"
import type { SystemRequest } from "../src/domain/System.js"
import * as TokenUsage from "../src/domain/TokenUsage.js"
import { Engine, InferenceRequest } from "../src/services/Engine.js"
import { inMemoryDefaults } from "../src/services/ConversationStore.js"

const maxSessions = inMemoryDefaults.maxSessions

/** What a plain chat endpoint answers. */
export interface PlainResponse {
  readonly requestId: string
  readonly sessionId: string
  readonly content: string
  readonly toolCallsMade: ReadonlyArray<unknown>
  readonly tokenUsage: TokenUsage.TokenUsage
  readonly stopReason?: string
  readonly error?: { readonly code: string; readonly category: string; readonly message: string }
}

interface Turn {
  readonly content: string
  readonly history: ReadonlyArray<Message.Message>
  readonly usage: TokenUsage.TokenUsage
  readonly stopReason: string
}

/** A chat endpoint over the Engine: `run` answers one request. */
export const make = Effect.map(Engine, (engine) => {
  const sessions = new Map<string, ReadonlyArray<Message.Message>>()
  const running = new Map<string, Fiber.RuntimeFiber<Turn, unknown>>()
  const written = new Map<string, number>()
  let writes = 0
  let order: Array<string> = []
  let stamps: Array<number> = []
  let head = 0

  /** The tool loop: the model until it answers without calls, at most 20 rounds (no tools in this request). */
  const turn = (start: ReadonlyArray<Message.Message>): Effect.Effect<Turn, unknown> =>
    Effect.gen(function* () {
      let history = start
      let usage = TokenUsage.empty
      for (let round = 0; round < 20; round++) {
        const reply = yield* engine.infer(new InferenceRequest({ messages: history, maxTokens: 2048 }, true))
        usage = TokenUsage.combine(usage, reply.usage)
        history = [...history, Message.assistant(reply.content, reply.toolCalls)]
        if (reply.toolCalls.length === 0) return { content: reply.content, history, usage, stopReason: "answered" }
        return yield* Effect.fail(new Error("this request has no tools"))
      }
      return { content: "", history, usage, stopReason: "max_iterations" }
    })

  const run = (request: SystemRequest): Effect.Effect<PlainResponse> =>
    Effect.gen(function* () {
      const requestId = request.requestId ?? `req-${crypto.randomUUID()}`
      const sessionId = request.sessionId ?? `session-${crypto.randomUUID()}`
      const last = request.messages.at(-1)
      if (last === undefined || last.role !== "user") {
        return {
          requestId,
          sessionId,
          content: "",
          toolCallsMade: [],
          tokenUsage: TokenUsage.empty,
          error: { code: "CONFIG_INVALID_REQUEST", category: "ConfigurationFailure", message: "a chat ends with a user message" }
        }
      }
      const stored = sessions.get(sessionId)
      const start = stored === undefined ? request.messages : [...stored, last]
      const timeout = request.hints.timeout
      const body = timeout === undefined ? turn(start) : Effect.timeoutFail(turn(start), { duration: timeout, onTimeout: () => new Error("timeout") })
      const fiber = yield* Effect.fork(body)
      running.set(requestId, fiber)
      const exit = yield* Fiber.await(fiber)
      running.delete(requestId)
      if (Exit.isSuccess(exit)) {
        sessions.delete(sessionId)
        sessions.set(sessionId, exit.value.history)
        // bounded, as the facade's own store is (the least recently written session dropped first); the oldest
        // found in a queue of writes, not by `sessions.keys().next()`, which V8 makes O(deleted entries)
        // (services/internal/Sessions.ts: about 8 us per write with 10,000 sessions)
        const write = ++writes
        written.set(sessionId, write)
        order.push(sessionId)
        stamps.push(write)
        while (sessions.size > maxSessions) {
          const oldest = order[head]!
          const stamp = stamps[head++]!
          // a session written again since is further back in the queue: this entry of it is stale
          if (written.get(oldest) === stamp) {
            sessions.delete(oldest)
            written.delete(oldest)
          }
        }
        if (order.length - head > 2 * sessions.size + 64) {
          // stale entries outnumber live ones (sessions written again): the queue again, in the sessions' order
          order = [...sessions.keys()]
          stamps = order.map((id) => written.get(id)!)
          head = 0
        } else if (head > 1024 && head > order.length - head) {
          order = order.slice(head)
          stamps = stamps.slice(head)
          head = 0
        }
        return {
          requestId,
          sessionId,
          content: exit.value.content,
          toolCallsMade: [],
          tokenUsage: exit.value.usage,
          stopReason: exit.value.stopReason
        }
      }
      return {
        requestId,
        sessionId,
        content: "",
        toolCallsMade: [],
        tokenUsage: TokenUsage.empty,
        error: { code: "ORCHESTRATION_DEFECT", category: "OrchestrationFailure", message: "the turn failed" }
      }
    })

  /** Cancels a running request by id. */
  const cancel = (requestId: string) =>
    Effect.suspend(() => {
      const fiber = running.get(requestId)
      return fiber === undefined ? Effect.succeed(false) : Effect.as(Fiber.interrupt(fiber), true)
    })

  return { run, cancel }
})
