/**
 * The built-in strategies of a run loop.
 *
 * - `nativeTools`: the engine's own tool calling. Tool definitions go on the
 *   request; a reply with tool calls is acted on, a reply without is the answer.
 * - `react`: reason-and-act as one JSON action per reply, either
 *   `{"thought", "tool", "arguments"}` or `{"thought", "finish"}`. The request
 *   carries a GBNF grammar of exactly that union (engines that decode by grammar
 *   cannot answer anything else) and its JSON schema (for engines that only take
 *   schemas); tools are described in a system message, and tool results go back
 *   as observations, so any engine can run it, with or without native tools.
 * - `structured(schema)`: one answer decoded into the schema's type through the
 *   Constraint service (repair, enum normalization, validation).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { ConstraintFailure } from "../../domain/Failure.js"
import type { JsonSchema } from "../../domain/JsonSchema.js"
import * as Message from "../../domain/Message.js"
import type { OutputSchema } from "../../services/Constraint.js"
import { Constraint } from "../../services/Constraint.js"
import type { InferenceRequest, InferenceResult } from "../../services/Engine.js"
import { IdGenerator } from "../../services/IdGenerator.js"
import * as Request from "../internal/Request.js"
import type { LoopAction, LoopEnv, RequestDefaults, Strategy, ToolUsePolicy } from "./Types.js"

/** Output tokens per model call when the request defaults say nothing. */
export const defaultMaxTokens = 2048

/** A request from the defaults, with what the strategy adds. */
export const requestOf = (
  messages: ReadonlyArray<Message.Message>,
  tools: ReadonlyArray<Message.ToolDefinition>,
  defaults: RequestDefaults,
  extra: { readonly schema?: JsonSchema | undefined; readonly grammar?: string | undefined } = {}
): InferenceRequest => {
  const schema = extra.schema ?? defaults.schema
  const grammar = extra.grammar ?? defaults.grammar
  const settings = {
    maxTokens: defaults.maxTokens ?? defaultMaxTokens,
    ...(defaults.temperature === undefined ? {} : { temperature: defaults.temperature }),
    ...(defaults.topP === undefined ? {} : { topP: defaults.topP }),
    ...(defaults.seed === undefined ? {} : { seed: defaults.seed }),
    ...(defaults.sessionKey === undefined ? {} : { sessionKey: defaults.sessionKey }),
    ...(defaults.options === undefined ? {} : { options: defaults.options }),
    ...(schema === undefined ? {} : { schema }),
    ...(grammar === undefined ? {} : { grammar })
  }
  return Request.make(messages, tools, settings)
}

const callOnce = (env: LoopEnv, request: InferenceRequest) => env.infer(request)
const actOnTools = <Out>(action: LoopAction<Out>) => Effect.succeed(action.toolCalls.length > 0)

// ---------------------------------------------------------------------------
// Native tools
// ---------------------------------------------------------------------------

export interface NativeToolsOptions {
  /** Default "auto". "none" offers no tools; "required" re-asks an answer given before any tool ran. */
  readonly toolUsePolicy?: ToolUsePolicy | undefined
}

/** The engine's own tool calling; the answer is the reply's text. */
export const nativeTools = (options: NativeToolsOptions = {}): Strategy<string> => ({
  name: "native-tools",
  toolUsePolicy: options.toolUsePolicy ?? "auto",
  prepareRequest: ({ defaults, messages, tools }) => Effect.succeed(requestOf(messages, tools, defaults)),
  callModel: callOnce,
  parseResponse: (response) =>
    Effect.succeed({
      toolCalls: response.toolCalls,
      thought: "",
      result: response.toolCalls.length === 0 ? Option.some(response.content) : Option.none(),
      stopReason: response.toolCalls.length === 0 && response.finishReason === "length" ? "length" : undefined
    }),
  shouldContinue: actOnTools
})

// ---------------------------------------------------------------------------
// ReAct
// ---------------------------------------------------------------------------

/** The action a ReAct reply must be. */
export const ReactAction = Schema.Union(
  Schema.Struct({
    thought: Schema.String,
    tool: Schema.String,
    arguments: Schema.Record({ key: Schema.String, value: Schema.Unknown })
  }),
  Schema.Struct({ thought: Schema.String, finish: Schema.String })
)
export type ReactAction = typeof ReactAction.Type

const decodeAction = Schema.decodeUnknownEither(Schema.parseJson(ReactAction))

const finishAction: JsonSchema = {
  type: "object",
  properties: { thought: { type: "string" }, finish: { type: "string" } },
  required: ["thought", "finish"]
}

/**
 * The JSON schema of a ReAct action over these tools: a tool call or an answer
 * (`anyOf` of the two; only the answer without tools). The request also carries
 * `reactGrammar`, whose sentences are exactly these actions.
 */
export const reactSchema = (toolNames: ReadonlyArray<string>): JsonSchema => {
  const description = 'Either {"thought", "tool", "arguments"} to call a tool, or {"thought", "finish"} to answer.'
  if (toolNames.length === 0) return { ...finishAction, description }
  const call: JsonSchema = {
    type: "object",
    properties: { thought: { type: "string" }, tool: { type: "string", enum: toolNames }, arguments: { type: "object" } },
    required: ["thought", "tool", "arguments"]
  }
  return { anyOf: [call, finishAction], description }
}

const jsonRules = [
  `value ::= object | array | string | number | "true" | "false" | "null"`,
  `object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"`,
  `array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"`,
  `string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""`,
  `number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,3} )?`,
  `ws ::= [ \\t\\n]{0,4}`
]

/** A GBNF grammar whose sentences are exactly the ReAct actions over these tools. */
export const reactGrammar = (toolNames: ReadonlyArray<string>): string =>
  [
    `root ::= "{" ws "\\"thought\\"" ws ":" ws string ws "," ws action ws "}"`,
    toolNames.length === 0
      ? `action ::= finish`
      : `action ::= call | finish`,
    ...(toolNames.length === 0
      ? []
      : [
          `call ::= "\\"tool\\"" ws ":" ws tool ws "," ws "\\"arguments\\"" ws ":" ws object`,
          `tool ::= ${toolNames.map((n) => `"\\"${n}\\""`).join(" | ")}`
        ]),
    `finish ::= "\\"finish\\"" ws ":" ws string`,
    ...jsonRules
  ].join("\n")

/** The system message that tells the model the format and the tools. */
export const reactInstructions = (tools: ReadonlyArray<Message.ToolDefinition>): string =>
  [
    "Answer with one JSON object per reply and nothing else.",
    'To use a tool: {"thought": "<why>", "tool": "<tool name>", "arguments": {<the tool\'s arguments>}}.',
    'To give the final answer: {"thought": "<why>", "finish": "<the answer>"}.',
    "After a tool call you receive its result as an observation.",
    ...(tools.length === 0
      ? ["No tools are available: answer with finish."]
      : [
          "Tools:",
          ...tools.map((t) => `- ${t.name}: ${t.description} Arguments (JSON schema): ${JSON.stringify(t.parameters)}`)
        ])
  ].join("\n")

/** The transcript as a ReAct model reads it: actions as plain text, tool results as observations. */
const reactMessages = (messages: ReadonlyArray<Message.Message>, instructions: string): ReadonlyArray<Message.Message> => {
  // the instructions join the caller's system prompt, or open the conversation
  const first = messages[0]
  const out: Array<Message.Message> = [
    first !== undefined && Message.isSystem(first) ? Message.system(`${first.content}\n\n${instructions}`) : Message.system(instructions)
  ]
  for (const m of first !== undefined && Message.isSystem(first) ? messages.slice(1) : messages) {
    switch (m._tag) {
      case "AssistantMessage":
        out.push(Message.assistant(m.content))
        break
      case "ToolMessage":
        out.push(Message.user(`Observation from ${m.name}${m.isError ? " (error)" : ""}: ${m.content}`))
        break
      default:
        out.push(m)
    }
  }
  return out
}

/** Reason and act through one grammar-constrained JSON action per reply; the answer is `finish`. */
export const react = (): Strategy<string> => ({
  name: "react",
  toolUsePolicy: "auto",
  prepareRequest: ({ defaults, messages, tools }) => {
    const names = tools.map((t) => t.name)
    return Effect.succeed(
      requestOf(reactMessages(messages, reactInstructions(tools)), [], defaults, {
        schema: reactSchema(names),
        grammar: reactGrammar(names)
      })
    )
  },
  callModel: callOnce,
  parseResponse: (response) => parseReact(response),
  shouldContinue: actOnTools
})

const parseReact = (response: InferenceResult): Effect.Effect<LoopAction<string>, ConstraintFailure> =>
  Effect.gen(() => parseReactSteps(response))

/** The steps of `parseReact`, one generator function for every call (a generator function made per call costs V8 new maps). */
function* parseReactSteps(response: InferenceResult) {
  const decoded = decodeAction(response.content.trim())
  if (decoded._tag === "Left") {
    return yield* ConstraintFailure.schemaInvalid(
      'The reply is not a ReAct action: {"thought", "tool", "arguments"} or {"thought", "finish"}',
      { raw: response.content, violations: [decoded.left.message] }
    )
  }
  const action = decoded.right
  if ("finish" in action) {
    return { toolCalls: [], thought: action.thought, result: Option.some(action.finish) }
  }
  const id = yield* Effect.flatMap(IdGenerator, (ids) => ids.next("call"))
  return {
    toolCalls: [new Message.ToolCall({ id, name: action.tool, arguments: action.arguments })],
    thought: action.thought,
    result: Option.none()
  }
}

// ---------------------------------------------------------------------------
// Structured
// ---------------------------------------------------------------------------

/**
 * One answer of the schema's type: the request carries its JSON schema (and a
 * grammar when given); the reply goes through the Constraint pipeline. A rejected
 * reply is a retryable ConstraintFailure, which the loop answers with a correction
 * while iterations remain. No tools are offered.
 */
export const structured = <A>(
  schema: OutputSchema<A>,
  options: { readonly grammar?: string | undefined; readonly repairAllowed?: boolean | undefined } = {}
): Effect.Effect<Strategy<A>, never, Constraint> =>
  Effect.map(Constraint, (constraint) => {
    const target = constraint.target(schema)
    const constraints = constraint.requestConstraints(target, options.grammar)
    return {
      name: "structured",
      toolUsePolicy: "none",
      prepareRequest: ({ defaults, messages }) =>
        Effect.succeed(requestOf(messages, [], defaults, { schema: constraints.schema, grammar: constraints.grammar })),
      callModel: callOnce,
      parseResponse: (response) =>
        Effect.map(
          constraint.enforce(response.content, target, { repairAllowed: options.repairAllowed ?? true }),
          (enforced): LoopAction<A> => ({ toolCalls: [], thought: "", result: Option.some(enforced.value) })
        ),
      shouldContinue: () => Effect.succeed(false)
    } satisfies Strategy<A>
  })
