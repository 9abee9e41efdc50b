/**
 * INIT: a request checked once, into a value that carries what each mode needs.
 *
 * A request runs only with an engine; structured and redundant requests need a
 * schema; every mode but plan (and task with a task list of its own) needs
 * messages ending with a user message (a chat may end with tool results that
 * answer its last assistant message's calls); every
 * tool the request names must be registered; a tool message must answer a call an
 * earlier assistant message made. A request that passes is a `Checked`, so the
 * mode runners read its parts without looking again.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type { Failure } from "../../domain/Failure.js"
import { ConfigurationFailure, ToolFailure } from "../../domain/Failure.js"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import * as Message from "../../domain/Message.js"
import type { SystemRequest } from "../../domain/System.js"
import type { TaskList } from "../../domain/Task.js"
import * as Text from "../../domain/Text.js"
import type * as Engine from "../../services/Engine.js"
import * as Ids from "../internal/Ids.js"
import type { Environment } from "./Environment.js"
import * as QueryMode from "./Query.js"

interface Common {
  readonly request: SystemRequest
  /** The engine the request runs on. */
  readonly engine: Engine.Service
}

/**
 * A chat turn: the user message it answers, the history the request brings, its
 * session. A request ending with tool messages continues a turn that stopped on
 * the caller's own tools: `toolResults` are those messages (answering the calls
 * of the assistant message before them), `user` the last user message (empty
 * when the request brings none: it continues a stored session).
 */
export interface Chat extends Common {
  readonly mode: "chat"
  readonly user: Message.UserMessage
  readonly toolResults: ReadonlyArray<Message.ToolMessage>
  readonly prior: ReadonlyArray<Message.Message>
  readonly sessionId: string
}

/** A structured or redundant request: the user message and the schema its answer must fit. */
export interface Extraction extends Common {
  readonly mode: "structured" | "redundant"
  readonly user: Message.UserMessage
  readonly schema: JsonSchema
}

/** A plan request: a plan in it, or one the Planner makes. */
export interface Plan extends Common {
  readonly mode: "plan"
}

/** A task request: the request to break into tasks (its user message), or a task list it brings. */
export interface Task extends Common {
  readonly mode: "task"
  readonly work: { readonly _tag: "Analyze"; readonly user: Message.UserMessage } | {
    readonly _tag: "Given"
    readonly tasks: TaskList
  }
}

/** A request that passed the INIT checks. */
export type Checked = Chat | Extraction | Plan | Task | QueryMode.Checked

/** Why a request was refused at INIT. */
export type CheckFailure = ConfigurationFailure | ToolFailure | Failure

/** A checked request, or why it was refused, with the session it runs in either way. */
export interface Admission {
  /** The request's session: its own, or a new one for a chat (a chat always has one). */
  readonly sessionId: string | undefined
  /** Raised inside the request (so its lifecycle, timeout and cancel apply as to any failure). */
  readonly checked: Either.Either<Checked, CheckFailure>
}

/** CONFIG_INVALID_REQUEST: the caller's input is malformed. */
export const invalid = (message: string, details: Record<string, unknown> = {}): ConfigurationFailure =>
  ConfigurationFailure.invalidRequest(message, { details })

/**
 * A tool message must answer a call an earlier assistant message made (engines
 * refuse a history where it does not).
 */
const checkToolMessages = (messages: ReadonlyArray<Message.Message>): Either.Either<void, CheckFailure> => {
  // made at the first call (most requests have none): a request is checked on every call
  let calls: Set<string> | undefined
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!
    if (Message.isAssistant(m)) for (const call of m.toolCalls) (calls ??= new Set()).add(call.id)
    else if (Message.isTool(m) && !(calls?.has(m.toolCallId) ?? false)) {
      return Either.left(invalid(
        `messages.${i}: the tool message answers call "${Text.excerpt(m.toolCallId)}", which no earlier assistant message made`
      ))
    }
  }
  return Either.void
}

/** A tool the request names but nobody registered would silently leave the model without it. */
const checkToolNames = (env: Environment, request: SystemRequest): Either.Either<void, CheckFailure> => {
  const { registry } = env
  if (request.tools.length === 0) return Either.void
  const unknown = request.tools.filter((name) => Option.isNone(registry) || !registry.value.has(name))
  const [first, ...rest] = unknown.slice(0, 8).map((name) => Text.excerpt(name))
  if (first === undefined) return Either.void
  const named = [first, ...rest]
  const available = Option.isNone(registry) ? [] : registry.value.definitions().map((d) => d.name)
  const more = unknown.length > named.length ? ` and ${unknown.length - named.length} more` : ""
  return Either.left(
    ToolFailure.notFound(
      first,
      `The request names tools that are not registered: ${named.join(", ")}${more} (registered: ${
        available.length === 0 ? "none" : available.join(", ")
      })`,
      { details: { unknownTools: named, available } }
    )
  )
}

/** Needed by every mode. */
const needEngine = (env: Environment): Either.Either<Engine.Service, CheckFailure> =>
  Either.fromOption(env.engine, () =>
    ConfigurationFailure.noEngine("No inference engine is configured: provide an Engine layer (e.g. LlamaEngine.layer)"))

/** Needed by structured and redundant requests. */
const needSchema = (request: SystemRequest): Either.Either<JsonSchema, CheckFailure> =>
  Either.fromNullable(request.output.schema, () =>
    ConfigurationFailure.schemaRequired(`Mode "${request.mode}" needs output.schema`, { details: { mode: request.mode } }))

/** Needed by every mode but plan: the message the request asks about. */
const needUser = (request: SystemRequest): Either.Either<Message.UserMessage, CheckFailure> => {
  const last = request.messages.at(-1)
  return last !== undefined && Message.isUser(last)
    ? Either.right(last)
    : Either.left(invalid(`Mode "${request.mode}" needs messages ending with a user message`))
}

/** Checked in every mode, after the mode's own checks. */
const checkToolsAndHistory = (env: Environment, request: SystemRequest): Either.Either<void, CheckFailure> =>
  Either.flatMap(checkToolNames(env, request), () => checkToolMessages(request.messages))

const noResults: ReadonlyArray<Message.ToolMessage> = []

/** The tool messages a chat request ends with, when they answer calls of the assistant message before them. */
const trailingToolResults = (request: SystemRequest): Either.Either<ReadonlyArray<Message.ToolMessage>, CheckFailure> => {
  const { messages } = request
  let at = messages.length
  while (at > 0 && Message.isTool(messages[at - 1]!)) at--
  const results = messages.slice(at) as ReadonlyArray<Message.ToolMessage>
  if (results.length === 0) return Either.right(noResults)
  const before = messages[at - 1]
  const calls = before !== undefined && Message.isAssistant(before) ? before.toolCalls.map((c) => c.id) : []
  const stray = results.findIndex((m) => !calls.includes(m.toolCallId))
  return stray === -1
    ? Either.right(results)
    : Either.left(invalid(
      `messages.${at + stray}: a conversation ending with tool messages continues the tool calls of the assistant message just before them; this one answers call "${
        Text.excerpt(results[stray]!.toolCallId)
      }", which that message did not make`
    ))
}

/**
 * A named toolChoice must be a tool the turn offers: a registered tool (of the
 * request's list) or a client tool; "required" needs some tool offered.
 */
const checkToolChoice = (env: Environment, request: SystemRequest): Either.Either<void, CheckFailure> => {
  const choice = request.toolChoice
  if (choice === "required") {
    const offered = request.clientTools.length > 0 ||
      (Option.isSome(env.registry) && env.registry.value.definitions(request.tools.length === 0 ? undefined : request.tools).length > 0)
    return offered
      ? Either.void
      : Either.left(invalid(`toolChoice: "required", but no tool is offered (no clientTools and no registered tool)`, {
        field: "toolChoice"
      }))
  }
  if (typeof choice !== "object") return Either.void
  const registered = Option.isSome(env.registry) && env.registry.value.has(choice.name) &&
    (request.tools.length === 0 || request.tools.includes(choice.name))
  return registered || request.clientTools.some((t) => t.name === choice.name)
    ? Either.void
    : Either.left(invalid(`toolChoice.name: "${Text.excerpt(choice.name)}" is neither a registered tool nor one of clientTools`, {
      field: "toolChoice.name"
    }))
}

const checkChat = (env: Environment, request: SystemRequest, sessionId: string): Either.Either<Checked, CheckFailure> => {
  // each check in turn, the first that fails decides (plain returns: a request is checked on every call)
  const engine = needEngine(env)
  if (Either.isLeft(engine)) return Either.left(engine.left)
  const toolResults = trailingToolResults(request)
  if (Either.isLeft(toolResults)) return Either.left(toolResults.left)
  let user: Message.UserMessage
  if (toolResults.right.length === 0) {
    const needed = needUser(request)
    if (Either.isLeft(needed)) return Either.left(needed.left)
    user = needed.right
  } else {
    user = request.messages.filter(Message.isUser).at(-1) ?? new Message.UserMessage({ role: "user", content: "" })
  }
  const tools = checkToolsAndHistory(env, request)
  if (Either.isLeft(tools)) return Either.left(tools.left)
  const choice = checkToolChoice(env, request)
  if (Either.isLeft(choice)) return Either.left(choice.left)
  const prior = request.messages.slice(0, request.messages.length - Math.max(1, toolResults.right.length))
  return Either.right({ mode: "chat", request, engine: engine.right, user, toolResults: toolResults.right, prior, sessionId })
}

/** The caller's own tools and the tool choice are a chat's: another mode would silently ignore them. */
const checkChatOnly = (request: SystemRequest): Either.Either<void, CheckFailure> =>
  request.mode === "chat" ||
    (request.clientTools.length === 0 && request.toolChoice === undefined && request.parallelToolCalls === undefined)
    ? Either.void
    : Either.left(invalid(`clientTools, toolChoice and parallelToolCalls are for mode "chat", not "${request.mode}"`, {
      field: request.clientTools.length > 0 ? "clientTools" : request.toolChoice !== undefined ? "toolChoice" : "parallelToolCalls"
    }))

const checkPlan = (env: Environment, request: SystemRequest): Either.Either<Checked, CheckFailure> =>
  Either.gen(() => checkPlanSteps(env, request))

/** The checks of a plan, one generator function for every request (a generator function made per call costs V8 new maps). */
function* checkPlanSteps(env: Environment, request: SystemRequest) {
  const engine = yield* needEngine(env)
  yield* checkToolsAndHistory(env, request)
  return { mode: "plan", request, engine } satisfies Plan
}

const checkExtraction = (
  env: Environment,
  request: SystemRequest,
  mode: Extraction["mode"]
): Either.Either<Checked, CheckFailure> =>
  Either.gen(() => checkExtractionSteps(env, request, mode))

/** The checks of an extraction, one generator function for every request (a generator function made per call costs V8 new maps). */
function* checkExtractionSteps(env: Environment, request: SystemRequest, mode: Extraction["mode"]) {
  const engine = yield* needEngine(env)
  const schema = yield* needSchema(request)
  const user = yield* needUser(request)
  yield* checkToolsAndHistory(env, request)
  return { mode, request, engine, user, schema } satisfies Extraction
}

const checkTask = (env: Environment, request: SystemRequest): Either.Either<Checked, CheckFailure> =>
  Either.gen(() => checkTaskSteps(env, request))

/** The checks of a task, one generator function for every request (a generator function made per call costs V8 new maps). */
function* checkTaskSteps(env: Environment, request: SystemRequest) {
  const engine = yield* needEngine(env)
  const given = request.task?.tasks
  const work = given === undefined
    ? { _tag: "Analyze" as const, user: yield* needUser(request) }
    : { _tag: "Given" as const, tasks: given }
  yield* checkToolsAndHistory(env, request)
  return { mode: "task", request, engine, work } satisfies Task
}

/**
 * Checks a request (INIT) and settles its session: a chat without a session id
 * gets a new one, so its response and events carry it even when a check fails.
 */
export const check = (env: Environment, request: SystemRequest): Effect.Effect<Admission> =>
  Effect.suspend(() => {
    const chatOnly = checkChatOnly(request)
    if (Either.isLeft(chatOnly)) return Effect.succeed({ sessionId: request.sessionId, checked: Either.left(chatOnly.left) })
    switch (request.mode) {
      case "chat": {
        // random whatever the IdGenerator (internal/Ids `unsafeSessionId`)
        const sessionId = request.sessionId ?? Ids.unsafeSessionId()
        return Effect.succeed({ sessionId, checked: checkChat(env, request, sessionId) })
      }
      case "plan":
        return Effect.succeed({ sessionId: request.sessionId, checked: checkPlan(env, request) })
      case "structured":
      case "redundant":
        return Effect.succeed({ sessionId: request.sessionId, checked: checkExtraction(env, request, request.mode) })
      case "task":
        return Effect.succeed({ sessionId: request.sessionId, checked: checkTask(env, request) })
      case "query":
        return Effect.map(QueryMode.check(env, request), (checked) => ({ sessionId: request.sessionId, checked }))
    }
  })
