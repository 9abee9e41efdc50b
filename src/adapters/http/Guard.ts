/**
 * The edge's own checks on what a client sends, before any decoding, inference or
 * native code sees it: how deep and how large a body may be, how large a schema,
 * an enum, a plan or a grammar may be, and which fields are server settings that a
 * client never sets (a file path is one: `output.grammarFile` names a server file).
 *
 * Every check is iterative and linear in the body, so a hostile body cannot
 * overflow a stack (JSON nested 5,000 levels deep) or hold the event loop (an enum
 * of 60,000 values, a plan of 9,000 steps). A problem names the field the client
 * sent, in plain words, quoting at most a short excerpt.
 */
import * as Either from "effect/Either"
import * as Gbnf from "../../domain/Gbnf.js"
import * as Json from "../../domain/Json.js"
import * as Text from "../../domain/Text.js"

/** Bounds on a request body. Each is configurable (`Http.Options.limits`). */
export interface Limits {
  /** Deepest nesting of objects and arrays in a body. Default 64. */
  readonly maxDepth: number
  /** Most values (objects, arrays, strings, numbers...) in a body. Default 100,000. */
  readonly maxValues: number
  /** Most messages in a conversation. Default 1,000. */
  readonly maxMessages: number
  /** Most values in one JSON schema (an output schema, a tool's parameters). Default 2,000. */
  readonly maxSchemaValues: number
  /** Most values of one `enum`. Default 500. */
  readonly maxEnumValues: number
  /** Most steps of a plan. Default 256. */
  readonly maxPlanSteps: number
  /** Largest GBNF grammar, in bytes (UTF-8). Default 64 KiB. */
  readonly maxGrammarBytes: number
}

export const defaultLimits: Limits = {
  maxDepth: 64,
  maxValues: 100_000,
  maxMessages: 1_000,
  maxSchemaValues: 2_000,
  maxEnumValues: 500,
  maxPlanSteps: 256,
  maxGrammarBytes: 64 * 1024
}

/** A field a client sent and what is wrong with it. */
export interface Problem {
  /** The path as the client wrote it, e.g. `output.schema.properties.a.enum`. */
  readonly field: string
  readonly message: string
}

interface Node {
  readonly value: unknown
  readonly key: string | number | undefined
  readonly parent: Node | undefined
  readonly depth: number
}

const pathOf = (node: Node): string => {
  const keys: Array<string | number> = []
  for (let at: Node | undefined = node; at !== undefined && at.key !== undefined; at = at.parent) keys.push(at.key)
  keys.reverse()
  return keys.length === 0 ? "the body" : keys.slice(0, 8).join(".") + (keys.length > 8 ? ".…" : "")
}

/**
 * Depth and size of a parsed body, walked without recursion. Returns the first
 * place that goes too deep, or the count that is too large.
 */
export const checkShape = (body: unknown, limits: Limits = defaultLimits): Either.Either<void, Problem> => {
  const stack: Array<Node> = [{ value: body, key: undefined, parent: undefined, depth: 0 }]
  let values = 0
  while (stack.length > 0) {
    const node = stack.pop()!
    const value = node.value
    if (++values > limits.maxValues) {
      return Either.left({
        field: "the body",
        message: `the body holds more than ${limits.maxValues.toLocaleString("en-US")} values`
      })
    }
    if (typeof value !== "object" || value === null) continue
    if (node.depth >= limits.maxDepth) {
      return Either.left({
        field: pathOf(node),
        message: `the input is nested too deeply (more than ${limits.maxDepth} levels)`
      })
    }
    const depth = node.depth + 1
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], key: i, parent: node, depth })
    } else {
      for (const key of Object.keys(value)) {
        stack.push({ value: (value as Record<string, unknown>)[key], key: Text.excerpt(key, 40), parent: node, depth })
      }
    }
  }
  return Either.right(undefined)
}

/** The keywords of pagantic's JSON-schema subset (`JsonSchema`), which a grammar is made from. */
const subsetKeywords = new Set(["type", "description", "properties", "required", "enum", "items", "anyOf", "default"])

/**
 * Keywords that say nothing about the value (or, as `additionalProperties:
 * false`, what the grammar holds anyway): accepted and left out. Every other
 * keyword (`$ref`, `pattern`, `minLength`, `format`, `oneOf`, ...) would be
 * dropped unenforced, so it is refused instead.
 */
const annotationKeywords = new Set(["$schema", "$id", "$comment", "title", "examples"])

/** The first keyword of `schema` outside the subset, walked without recursion (size and depth are already bounded). */
const unsupportedKeyword = (schema: unknown, field: string): Problem | undefined => {
  const stack: Array<{ readonly node: unknown; readonly path: string }> = [{ node: schema, path: field }]
  while (stack.length > 0) {
    const { node, path } = stack.pop()!
    if (!Json.isObject(node)) continue
    for (const [key, child] of Object.entries(node)) {
      if (subsetKeywords.has(key) || annotationKeywords.has(key)) {
        if (key === "items") stack.push({ node: child, path: `${path}.items` })
        else if (key === "anyOf" && Array.isArray(child)) child.forEach((c, i) => stack.push({ node: c, path: `${path}.anyOf.${i}` }))
        else if (key === "properties" && Json.isObject(child)) {
          for (const [name, c] of Object.entries(child)) stack.push({ node: c, path: `${path}.properties.${Text.excerpt(name, 40)}` })
        }
        continue
      }
      if (key === "additionalProperties" && typeof child === "boolean") continue
      return {
        field: `${path}.${Text.excerpt(key, 40)}`,
        message: `the schema keyword ${JSON.stringify(Text.excerpt(key, 40))} is not supported (it would not be enforced); the subset: ${[...subsetKeywords].join(", ")}, and additionalProperties as a boolean`
      }
    }
  }
  return undefined
}

/**
 * Values in a JSON schema and the longest `enum`, walked without recursion
 * (depth is already bounded), then its keywords: within pagantic's subset.
 */
const checkSchema = (schema: unknown, field: string, limits: Limits): Problem | undefined => {
  const stack: Array<{ readonly value: unknown; readonly path: string }> = [{ value: schema, path: field }]
  let values = 0
  while (stack.length > 0) {
    const { path, value } = stack.pop()!
    if (++values > limits.maxSchemaValues) {
      return { field, message: `the schema is too large (more than ${limits.maxSchemaValues.toLocaleString("en-US")} values)` }
    }
    if (typeof value !== "object" || value === null) continue
    if (Array.isArray(value)) {
      value.forEach((item, i) => stack.push({ value: item, path: `${path}.${i}` }))
      continue
    }
    for (const [key, child] of Object.entries(value)) {
      if (key === "enum" && Array.isArray(child) && child.length > limits.maxEnumValues) {
        return {
          field: `${path}.enum`,
          message: `the enum has ${child.length.toLocaleString("en-US")} values, at most ${limits.maxEnumValues} are allowed`
        }
      }
      stack.push({ value: child, path: `${path}.${Text.excerpt(key, 40)}` })
    }
  }
  return unsupportedKeyword(schema, field)
}

const checkGrammar = (grammar: unknown, field: string, limits: Limits): Problem | undefined => {
  if (typeof grammar !== "string") return undefined
  const checked = Gbnf.check(grammar, { maxBytes: limits.maxGrammarBytes })
  return Either.isLeft(checked) ? { field, message: checked.left } : undefined
}

/** The same ranges as ExecutionHints, for the places a client sets sampling outside hints (plan steps). */
const outOfRange = (value: unknown, min: number, max: number, field: string): Problem | undefined =>
  value === undefined || (typeof value === "number" && value >= min && value <= max)
    ? undefined
    : { field, message: `expected a number ${max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`}, got ${Text.excerpt(JSON.stringify(value) ?? String(value), 40)}` }

const checkMessages = (messages: unknown, limits: Limits): Problem | undefined =>
  Array.isArray(messages) && messages.length > limits.maxMessages
    ? {
      field: "messages",
      message: `the conversation has ${messages.length.toLocaleString("en-US")} messages, at most ${limits.maxMessages} are allowed`
    }
    : undefined

const first = (...problems: ReadonlyArray<() => Problem | undefined>): Either.Either<void, Problem> => {
  for (const problem of problems) {
    const found = problem()
    if (found !== undefined) return Either.left(found)
  }
  return Either.right(undefined)
}

/** The checks of a `/v1/run` body (a SystemRequest envelope), after `checkShape`. */
export const checkRun = (body: unknown, limits: Limits = defaultLimits): Either.Either<void, Problem> => {
  if (!Json.isObject(body)) return Either.right(undefined)
  const output = Json.isObject(body.output) ? body.output : {}
  const plan = Json.isObject(body.plan) ? body.plan : {}
  return first(
    () =>
      output.grammarFile === undefined
        ? undefined
        : {
          field: "output.grammarFile",
          message: "a grammar file is a server setting, not a client's: send the grammar text in output.grammar"
        },
    () => checkMessages(body.messages, limits),
    () => (output.schema === undefined ? undefined : checkSchema(output.schema, "output.schema", limits)),
    () => checkGrammar(output.grammar, "output.grammar", limits),
    () =>
      Array.isArray(plan.steps) && plan.steps.length > limits.maxPlanSteps
        ? {
          field: "plan.steps",
          message: `the plan has ${plan.steps.length.toLocaleString("en-US")} steps, at most ${limits.maxPlanSteps} are allowed`
        }
        : undefined,
    () => {
      // a plan's infer steps may carry a whole inference request: its schema and grammar too
      if (!Array.isArray(plan.steps)) return undefined
      for (const [i, step] of plan.steps.entries()) {
        const input = Json.isObject(step) && Json.isObject(step.input) ? step.input : undefined
        if (input === undefined) continue
        const where = `plan.steps.${i}.input`
        const problem = outOfRange(input.temperature, 0, 2, `${where}.temperature`) ??
          outOfRange(input.topP, 0, 1, `${where}.topP`) ??
          outOfRange(input.maxTokens, 0, Number.MAX_SAFE_INTEGER, `${where}.maxTokens`) ??
          (input.schema === undefined ? undefined : checkSchema(input.schema, `${where}.schema`, limits)) ??
          checkGrammar(input.grammar, `${where}.grammar`, limits) ??
          checkMessages(input.messages, limits)
        if (problem !== undefined) return problem
      }
      return undefined
    }
  )
}

/**
 * The checks of a `/v1/queries` body (an `infer.query.v1` query), after
 * `checkShape`: a `core.json.v1` answer shape's inline schema is bounded as any
 * output schema (the query's own decoding bounds everything else).
 */
export const checkQuery = (body: unknown, limits: Limits = defaultLimits): Either.Either<void, Problem> => {
  if (!Json.isObject(body)) return Either.right(undefined)
  const shape = Json.isObject(body.answer_shape) ? body.answer_shape : {}
  return first(() => (shape.schema === undefined ? undefined : checkSchema(shape.schema, "answer_shape.schema", limits)))
}

/** The checks of a `/v1/chat/completions` body, after `checkShape`. */
export const checkChat = (body: unknown, limits: Limits = defaultLimits): Either.Either<void, Problem> => {
  if (!Json.isObject(body)) return Either.right(undefined)
  const format = Json.isObject(body.response_format) ? body.response_format : {}
  const jsonSchema = Json.isObject(format.json_schema) ? format.json_schema : {}
  return first(
    () => checkMessages(body.messages, limits),
    () =>
      jsonSchema.schema === undefined
        ? undefined
        : checkSchema(jsonSchema.schema, "response_format.json_schema.schema", limits),
    () => {
      if (!Array.isArray(body.tools)) return undefined
      for (const [i, tool] of body.tools.entries()) {
        const fn = Json.isObject(tool) && Json.isObject(tool.function) ? tool.function : undefined
        if (fn?.parameters === undefined) continue
        const problem = checkSchema(fn.parameters, `tools.${i}.function.parameters`, limits)
        if (problem !== undefined) return problem
      }
      return undefined
    }
  )
}
