import { describe, expect, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { readFileSync } from "node:fs"
import type { ConstraintFailure } from "../src/domain/Failure.js"
import type { TaskList } from "../src/domain/Task.js"
import * as Task from "../src/domain/Task.js"
import * as TaskParser from "../src/programs/orchestrator/TaskParser.js"
import * as XmlTaskParser from "../src/programs/orchestrator/XmlTaskParser.js"

const fixture = (name: string) => readFileSync(new URL(`./fixtures/tasks/${name}`, import.meta.url), "utf8")

const xml = XmlTaskParser.make()

const parsed = (either: Either.Either<TaskList, ConstraintFailure>) => {
  if (Either.isLeft(either)) throw new Error(`expected a task list, got ${either.left.message}`)
  return either.right
}

const rejected = (either: Either.Either<TaskList, ConstraintFailure>) => {
  if (Either.isRight(either)) throw new Error("expected a rejection")
  return either.left
}

describe("XmlTaskParser", () => {
  it("a fenced reply: attributes, description, dependencies/dep and metadata/item[@key]", () => {
    const list = parsed(xml.parse(fixture("fenced.md")))
    expect(list.tasks.map((t) => ({ ...t }))).toEqual([
      {
        id: "t1",
        type: "sentiment",
        processor: "sentiment",
        priority: 1,
        dependencies: [],
        description: "Classify: the battery lasts all day",
        metadata: { review: "the battery lasts all day" }
      },
      {
        id: "t2",
        type: "sum",
        processor: "calculator",
        priority: 2,
        dependencies: ["t1"],
        description: "Add up the scores",
        metadata: { expression: "1+1" }
      }
    ])
  })

  it("an XML declaration is stripped; priority defaults to 0 only when absent", () => {
    const list = parsed(xml.parse(fixture("declaration.xml")))
    expect(list.tasks.map((t) => [t.id, t.priority, t.dependencies])).toEqual([
      ["fetch", 2, []],
      ["parse", 1, ["fetch"]]
    ])
    const noPriority = parsed(xml.parse(fixture("tasks-prefix.txt")))
    expect(noPriority.tasks[0]!.priority).toBe(0)
  })

  it("a `tasks:` line before the section is stripped", () => {
    const list = parsed(xml.parse(fixture("tasks-prefix.txt")))
    expect(list.tasks.map((t) => [t.id, t.description])).toEqual([["only", "Say hello"]])
    expect(list.analysis).toBe("")
  })

  it("CDATA markers go and their text is kept as text (even with < and &)", () => {
    const list = parsed(xml.parse(fixture("cdata.xml")))
    expect(list.tasks[0]!.description).toBe("Check that a < b && b > c")
    expect(list.tasks[0]!.metadata).toEqual({ formula: "x<y" })
  })

  it("prose around the section: the tasks are taken out, the prose before is the analysis", () => {
    const list = parsed(xml.parse(fixture("prose.txt")))
    expect(list.tasks.map((t) => t.id)).toEqual(["a", "b", "sum"])
    expect(list.tasks[2]!.dependencies).toEqual(["a", "b"])
    expect(list.analysis).toBe("Sure! I split the request into two independent lookups and a summary.")
    const withElement = parsed(xml.parse(`<analysis>one step</analysis><tasks><task id="x" type="t" processor="p"/></tasks>`))
    expect(withElement.analysis).toBe("one step")
  })

  it("a missing closing tag is INVALID_XML with line and column in the section and the offending line", () => {
    const failure = rejected(xml.parse(fixture("missing-closing-tag.xml")))
    expect(failure.code).toBe("CONSTRAINT_SCHEMA_INVALID")
    expect(failure.retryable).toBe(true)
    expect(failure.details).toMatchObject({ xmlError: "INVALID_XML", line: 4 })
    expect(typeof failure.details.column).toBe("number")
    expect(failure.message).toMatch(/line 4, column \d+/)
    expect(failure.raw).toBe(fixture("missing-closing-tag.xml"))
    const unclosedSection = rejected(xml.parse(`<tasks><task id="a" type="t" processor="p"/>`))
    expect(unclosedSection.details.xmlError).toBe("INVALID_XML")
  })

  it("invalid XML (an unquoted attribute) is INVALID_XML naming where", () => {
    const failure = rejected(xml.parse(fixture("invalid.xml")))
    expect(failure.details).toMatchObject({ xmlError: "INVALID_XML", line: 2 })
    expect(failure.details.excerpt).toContain(`priority=1`)
    expect(failure.violations[0]).toMatch(/^tasks section, line 2, column \d+: /)
  })

  it("a missing required field is MALFORMED_TASKS naming the task and the field; requiredFields adds fields", () => {
    const failure = rejected(xml.parse(fixture("missing-required.xml")))
    expect(failure.details.xmlError).toBe("MALFORMED_TASKS")
    expect(failure.violations).toEqual([`task 2 (id "t2"): missing a processor attribute`])
    const strict = XmlTaskParser.make({ requiredFields: ["priority", "dependencies"] })
    const strictFailure = rejected(strict.parse(fixture("declaration.xml")))
    expect(strictFailure.violations).toEqual([`task 1 (id "fetch"): missing a <dependencies> element`])
    expect(Either.isRight(XmlTaskParser.make({ requiredFields: ["description"] }).parse(fixture("declaration.xml")))).toBe(true)
  })

  it("a non-integer priority and a keyless metadata item are malformed", () => {
    const failure = rejected(
      xml.parse(`<tasks><task id="a" type="t" processor="p" priority="high"><metadata><item>v</item></metadata></task></tasks>`)
    )
    expect(failure.violations).toEqual([
      `task 1 (id "a"): priority "high" is not an integer`,
      `task 1 (id "a"): a metadata <item> has no key attribute`
    ])
  })

  it("many malformed tasks: the message names five, the violations stop at fifty", () => {
    const tasks = Array.from({ length: 80 }, (_, i) => `<task id="t${i}" type="x"/>`).join("")
    const failure = rejected(xml.parse(`<tasks>${tasks}</tasks>`))
    expect(failure.violations.length).toBe(50)
    expect(failure.message).toMatch(/\(and 75 more\)$/)
  })

  it("no tasks section is NO_TASKS_SECTION; an empty section is MALFORMED_TASKS", () => {
    const none = rejected(xml.parse(fixture("no-tasks.txt")))
    expect(none.details.xmlError).toBe("NO_TASKS_SECTION")
    expect(none.details.excerpt).toContain("I am sorry")
    expect(rejected(xml.parse("<tasks></tasks>")).details.xmlError).toBe("MALFORMED_TASKS")
  })

  it("input past maxInputChars is refused before parsing", () => {
    const small = XmlTaskParser.make({ maxInputChars: 100 })
    const failure = rejected(small.parse(fixture("prose.txt")))
    expect(failure.details).toMatchObject({ reason: "tooLarge", maxInputChars: 100 })
    expect(failure.raw!.length).toBeLessThan(300)
  })
})

describe("JSON task parser", () => {
  const json = TaskParser.json()

  it("decodes the documented compact shape (and a fenced one); toJson writes it back in field order", () => {
    const text =
      `{"analysis":"a","tasks":[{"id":"t1","type":"sentiment","processor":"sentiment","priority":1,"dependencies":[],"description":"d","metadata":{"k":"v"}}]}`
    const list = parsed(json.parse(text))
    expect(Task.toJson(list)).toBe(text)
    expect(Task.toJson(parsed(json.parse("```json\n" + text + "\n```")))).toBe(text)
  })

  it("optional fields default when a client leaves them out", () => {
    const list = parsed(json.parse(`{"analysis":"","tasks":[{"id":"x","type":"t","processor":"p"}]}`))
    expect({ ...list.tasks[0]! }).toEqual({
      id: "x",
      type: "t",
      processor: "p",
      priority: 0,
      dependencies: [],
      description: "",
      metadata: {}
    })
  })

  it("not JSON and the wrong shape are two retryable constraint failures naming the path", () => {
    expect(rejected(json.parse("tasks please")).code).toBe("CONSTRAINT_JSON_INVALID")
    const wrong = rejected(json.parse(`{"analysis":"","tasks":[{"id":"","type":"t"}]}`))
    expect(wrong.code).toBe("CONSTRAINT_SCHEMA_INVALID")
    expect(wrong.violations).toContain("$.tasks[0].processor: is missing")
  })

  it("the analyzer's schema holds processor to the registered names and requires every field", () => {
    const schema = Task.taskListFor(["sentiment", "calculator"])
    const decode = (u: unknown) => Either.isRight(Schema.decodeUnknownEither(schema)(u))
    const full = { id: "t", type: "x", processor: "sentiment", priority: 1, dependencies: [], description: "", metadata: {} }
    expect(decode({ analysis: "", tasks: [full] })).toBe(true)
    expect(decode({ analysis: "", tasks: [{ ...full, processor: "search" }] })).toBe(false)
    const { metadata: _, ...noMetadata } = full
    expect(decode({ analysis: "", tasks: [noMetadata] })).toBe(false)
  })
})

