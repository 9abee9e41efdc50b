/**
 * Requests the loops build: an InferenceRequest whose messages and tool
 * definitions are the loop's own values (typed, built by the library) is made
 * without re-validating them on every model call; its settings (maxTokens,
 * temperature, topP, seed, schema, grammar...), which come from options, are
 * still checked against InferenceRequest's own fields, field by field, a value
 * that passed not checked again (an object while it is the last one that passed
 * for its field): a run sends the same settings on every call.
 */
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import type * as Message from "../../domain/Message.js"
import { InferenceRequest } from "../../services/Engine.js"
import * as Construct from "../../domain/Construct.js"

/** InferenceRequest's fields but its messages and tools. */
export type Settings = Omit<ConstructorParameters<typeof InferenceRequest>[0], "messages" | "tools">

const { messages: _messages, tools: _tools, ...settingFields } = InferenceRequest.fields

/** One check per field: a struct of that field alone, so a failure names it. */
const fieldChecks: Readonly<Record<string, (input: unknown) => unknown>> = Object.fromEntries(
  Object.entries(settingFields).map(([key, field]) => [key, Schema.validateSync(Schema.Struct({ [key]: field }))])
)

/**
 * Fields whose type is a plain string or boolean (or undefined): a `typeof` says
 * whether a value passes (a session key differs per session, and would fill the
 * cache below with one check each).
 */
const plainTypes: Readonly<Record<string, "string" | "boolean">> = Object.fromEntries(
  Object.entries(settingFields).flatMap(([key, field]): Array<readonly [string, "string" | "boolean"]> => {
    const ast = Schema.isPropertySignature(field)
      ? field.ast._tag === "PropertySignatureDeclaration" ? field.ast.type : field.ast.to.type
      : (field as Schema.Schema.Any).ast
    const types = (AST.isUnion(ast) ? ast.types : [ast]).filter((t) => !AST.isUndefinedKeyword(t))
    const only = types.length === 1 ? types[0]! : undefined
    return only !== undefined && AST.isStringKeyword(only)
      ? [[key, "string"]]
      : only !== undefined && AST.isBooleanKeyword(only)
      ? [[key, "boolean"]]
      : []
  })
)

/**
 * Values that passed, per field: primitives by value (bounded), and the last
 * object that passed, by identity (a run sends the same settings object on every
 * model call). Not a WeakMap of every object that passed: V8's young collector
 * keeps a WeakMap's keys alive through a scavenge, and a server decodes new
 * settings objects per request.
 */
const passedPrimitives = new Map<string, Set<unknown>>()
let primitivesKept = 0
const lastPassedObject = new Map<string, object>()
const MAX_PRIMITIVES = 4096

const checkField = (key: string, value: unknown): void => {
  const check = fieldChecks[key]
  if (check === undefined) return // not a setting: InferenceRequest ignores it, as the whole-struct check did
  const plain = plainTypes[key]
  if (plain !== undefined && (value === undefined || typeof value === plain)) return
  if (typeof value === "object" && value !== null) {
    if (lastPassedObject.get(key) === value) return
    check({ [key]: value })
    lastPassedObject.set(key, value)
    return
  }
  // by value (SameValueZero: 1 and "1" are different values, as they were different checks)
  const passed = passedPrimitives.get(key)
  if (passed?.has(value)) return
  check({ [key]: value })
  if (primitivesKept >= MAX_PRIMITIVES) {
    passedPrimitives.clear()
    primitivesKept = 0
  }
  const kept = passedPrimitives.get(key)
  if (kept === undefined) passedPrimitives.set(key, new Set([value]))
  else kept.add(value)
  primitivesKept++
}

/**
 * Checks the settings against InferenceRequest's fields (a value that passed
 * is not checked again: see `checkField`); throws a ParseError naming the field otherwise.
 */
export const checkSettings = (settings: Settings): Settings => {
  for (const key in settings) checkField(key, (settings as Record<string, unknown>)[key])
  return settings
}

/** A request of the loop's own messages and tools, its settings checked. */
export const make = (
  messages: ReadonlyArray<Message.Message>,
  tools: ReadonlyArray<Message.ToolDefinition>,
  settings: Settings
): InferenceRequest => Construct.unchecked(InferenceRequest, { messages, tools, ...checkSettings(settings) })
