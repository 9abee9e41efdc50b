/**
 * XmlTaskParser: a TaskList written as XML, the way many models like to write it.
 *
 *   <tasks>
 *     <task id="t1" type="analysis" processor="general" priority="1">
 *       <description>what to do</description>
 *       <dependencies><dep>t0</dep></dependencies>
 *       <metadata><item key="resource">cpu</item></metadata>
 *     </task>
 *   </tasks>
 *
 * The normalizer first cleans what models wrap around it: code fences, an XML
 * declaration, a `tasks:` line, CDATA markers (their text is kept, escaped), and
 * then takes the `<tasks>...</tasks>` section out of any prose (the analysis is an
 * `<analysis>` element when there is one, else the prose before the section). The
 * section is checked by fast-xml-parser's validator, which reports line and column,
 * then read. `requiredFields` are checked on every task (id, type and processor
 * are always needed: a Task has no meaning without them).
 *
 * Every failure is a retryable CONSTRAINT_SCHEMA_INVALID (the analyzer can be
 * asked again with it) carrying the raw text, the violations and, in `details`,
 * `xmlError`: NO_TASKS_SECTION, INVALID_XML (with `line` and `column` in the
 * section, and the offending line as `excerpt`) or MALFORMED_TASKS.
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { XMLParser, XMLValidator } from "fast-xml-parser"
import { ConstraintFailure } from "../../domain/Failure.js"
import * as Issues from "../../domain/Issues.js"
import * as Json from "../../domain/Json.js"
import * as Text from "../../domain/Text.js"
import { Task, TaskList } from "../../domain/Task.js"
import type { TaskParser } from "./TaskParser.js"
import { checkSize, defaultMaxInputChars } from "./TaskParser.js"

/** The three ways an XML reply is rejected. */
export type XmlError = "NO_TASKS_SECTION" | "INVALID_XML" | "MALFORMED_TASKS"

/** The fields of a task element that `requiredFields` may name. */
export type TaskField = "id" | "type" | "processor" | "priority" | "description" | "dependencies" | "metadata"

export interface Options {
  /** Checked on every task. id, type and processor are always required. Default `["id", "type", "processor"]`. */
  readonly requiredFields?: ReadonlyArray<TaskField> | undefined
  /** Longest reply read, in characters. Default 64,000. */
  readonly maxInputChars?: number | undefined
  /** Replaces the default format instructions. */
  readonly formatInstructions?: string | undefined
}

export const formatInstructions = [
  "Write the tasks in XML with exactly this structure, and close every tag:",
  "<tasks>",
  `  <task id="t1" type="<kind of work>" processor="<one of the processors>" priority="1">`,
  "    <description>what to do</description>",
  "    <dependencies><dep>id of a task that must finish first</dep></dependencies>",
  `    <metadata><item key="name">value</item></metadata>`,
  "  </task>",
  "</tasks>",
  "Every task has id, type and processor attributes; lower priority runs first."
].join("\n")

/** The XML parser. */
export const make = (options: Options = {}): TaskParser => {
  const required = new Set<TaskField>(["id", "type", "processor", ...(options.requiredFields ?? [])])
  const max = options.maxInputChars ?? defaultMaxInputChars
  return {
    name: "xml",
    structured: false,
    formatInstructions: options.formatInstructions ?? formatInstructions,
    parse: (raw) => Either.flatMap(checkSize(raw, max), (text) => parse(text, required))
  }
}

// ---------------------------------------------------------------------------
// Normalizing
// ---------------------------------------------------------------------------

/** The `<tasks>` section of a reply, cleaned, and the analysis around it. */
export interface Normalized {
  readonly xml: string
  readonly analysis: string
}

const escapeXml = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/** Cleans a reply and takes out its tasks section (see the module header). */
export const normalize = (raw: string): Either.Either<Normalized, ConstraintFailure> => {
  const text = raw
    .replace(/\r\n?/g, "\n")
    .replace(/^[ \t]*```[\w-]*[ \t]*$/gm, "")
    .replace(/<\?xml[\s\S]*?\?>/gi, "")
    .replace(/^[ \t]*tasks:[ \t]*$/gim, "")
    .replace(/<!\[CDATA\[([\s\S]*?)\]\]>/g, (_, body: string) => escapeXml(body))
  const start = text.search(/<tasks[\s>/]/)
  if (start < 0) {
    return Either.left(failure("NO_TASKS_SECTION", "the reply has no <tasks> section", raw, {
      violations: ["reply: a <tasks>...</tasks> section is required"]
    }))
  }
  const end = text.lastIndexOf("</tasks>")
  // Without a closing tag the section runs to the end, and the validator says where it broke.
  const xml = end < start ? text.slice(start) : text.slice(start, end + "</tasks>".length)
  const element = /<analysis>([\s\S]*?)<\/analysis>/.exec(text)
  const analysis = element?.[1] ?? text.slice(0, start)
  return Either.right({ xml, analysis: unescapeXml(analysis).trim() })
}

const unescapeXml = (s: string): string =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, "\"").replace(/&apos;/g, "'").replace(/&amp;/g, "&")

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

const xmlParser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: "@_",
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true
})

const parse = (raw: string, required: ReadonlySet<TaskField>): Either.Either<TaskList, ConstraintFailure> =>
  Either.flatMap(normalize(raw), ({ analysis, xml }) => {
    const valid = XMLValidator.validate(xml)
    if (valid !== true) {
      const { code, col, line, msg } = valid.err
      const offending = xml.split("\n")[line - 1] ?? ""
      return Either.left(
        failure("INVALID_XML", `the tasks section is not well-formed XML: ${msg} (line ${line}, column ${col})`, raw, {
          violations: [`tasks section, line ${line}, column ${col}: ${msg}`],
          details: { line, column: col, xmlCode: code, excerpt: Text.excerpt(offending.trim(), 200) }
        })
      )
    }
    const document = Either.try(() => xmlParser.parse(xml) as unknown)
    if (Either.isLeft(document)) {
      return Either.left(failure("INVALID_XML", `the tasks section could not be read: ${Text.messageOf(document.left)}`, raw))
    }
    const section = Json.isObject(document.right) ? document.right.tasks : undefined
    const elements = Json.isObject(section) ? asArray(section.task) : []
    if (elements.length === 0) {
      return Either.left(failure("MALFORMED_TASKS", "the tasks section has no <task> element", raw, {
        violations: ["tasks: at least one <task> element"]
      }))
    }
    const violations: Array<string> = []
    const tasks: Array<Task> = []
    for (const [index, element] of elements.entries()) {
      const read = readTask(element, index, required)
      if (Either.isLeft(read)) violations.push(...read.left)
      else tasks.push(read.right)
    }
    if (violations.length > 0) {
      const shown = violations.slice(0, 5).join("; ")
      const more = violations.length > 5 ? ` (and ${violations.length - 5} more)` : ""
      return Either.left(
        failure("MALFORMED_TASKS", `the tasks are malformed: ${shown}${more}`, raw, { violations: violations.slice(0, 50) })
      )
    }
    return Either.right(new TaskList({ analysis, tasks }))
  })

const asArray = (u: unknown): ReadonlyArray<unknown> => (u === undefined ? [] : Array.isArray(u) ? u : [u])

/** An element's text: a string as is, the `#text` of an element with attributes, "" otherwise. */
const textOf = (u: unknown): string =>
  typeof u === "string" ? u : Json.isObject(u) && typeof u["#text"] === "string" ? u["#text"] : ""

const attribute = (element: Record<string, unknown>, name: string): string | undefined => {
  const value = element[`@_${name}`]
  return typeof value === "string" ? value.trim() : undefined
}

/** One `<task>` element as a Task, or the violations that name it. */
const readTask = (
  element: unknown,
  index: number,
  required: ReadonlySet<TaskField>
): Either.Either<Task, ReadonlyArray<string>> => {
  const node = Json.isObject(element) ? element : {}
  const id = attribute(node, "id")
  const label = `task ${index + 1}${id === undefined || id === "" ? "" : ` (id "${Text.excerpt(id, 40)}")`}`
  const violations: Array<string> = []
  const present: Record<TaskField, boolean> = {
    id: (id ?? "") !== "",
    type: (attribute(node, "type") ?? "") !== "",
    processor: (attribute(node, "processor") ?? "") !== "",
    priority: (attribute(node, "priority") ?? "") !== "",
    description: textOf(node.description).trim() !== "",
    dependencies: "dependencies" in node,
    metadata: "metadata" in node
  }
  for (const field of required) {
    if (!present[field]) {
      const what = ["id", "type", "processor", "priority"].includes(field) ? `a ${field} attribute` : `a <${field}> element`
      violations.push(`${label}: missing ${what}`)
    }
  }
  const priorityText = attribute(node, "priority")
  const priority = priorityText === undefined || priorityText === "" ? 0 : Number(priorityText)
  if (!Number.isSafeInteger(priority)) {
    violations.push(`${label}: priority "${Text.excerpt(priorityText ?? "", 40)}" is not an integer`)
  }
  const dependencyNode = Json.isObject(node.dependencies) ? node.dependencies : {}
  const dependencies = [...asArray(dependencyNode.dep), ...asArray(dependencyNode.dependency)]
    .map((d) => textOf(d).trim())
    .filter((d) => d !== "")
  const metadata: Record<string, string> = {}
  const metadataNode = Json.isObject(node.metadata) ? node.metadata : {}
  for (const item of asArray(metadataNode.item)) {
    const key = Json.isObject(item) ? attribute(item, "key") : undefined
    if (key === undefined || key === "") violations.push(`${label}: a metadata <item> has no key attribute`)
    else Object.defineProperty(metadata, key, { value: textOf(item), enumerable: true, writable: true, configurable: true })
  }
  if (violations.length > 0) return Either.left(violations)
  const decoded = Schema.decodeUnknownEither(Task, { errors: "all" })({
    id,
    type: attribute(node, "type"),
    processor: attribute(node, "processor"),
    priority,
    dependencies,
    description: textOf(node.description),
    metadata
  })
  return Either.mapLeft(decoded, (error) =>
    ParseResult.ArrayFormatter.formatErrorSync(error).map((i) =>
      `${label}: ${Issues.formatPath(i.path)}: ${Text.excerpt(i.message, 200)}`
    ))
}

const failure = (
  xmlError: XmlError,
  message: string,
  raw: string,
  fields: {
    readonly violations?: ReadonlyArray<string> | undefined
    readonly details?: Record<string, unknown> | undefined
  } = {}
): ConstraintFailure =>
  ConstraintFailure.schemaInvalid(message, {
    raw,
    violations: fields.violations ?? [message],
    details: { xmlError, excerpt: Text.excerpt(raw.trim(), 200), ...fields.details }
  })
