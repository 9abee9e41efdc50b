/**
 * Rules of src/ that come from what V8 does with the library's objects, checked
 * on the source itself with TypeScript's parser:
 *
 * - no object literal with a `get` or `set` accessor: V8 builds one on a slow
 *   path, and the AgentLoop's, made per call, had a fifth of what `make`
 *   allocated survive young collections;
 * - a WeakMap, WeakSet or WeakRef only where its keys are few: made once
 *   (classes, a module's schemas) or once per request and shared by its calls (a
 *   request's JSON schema, which its replicas all use). V8's scavenger keeps a
 *   WeakMap's keys alive, so one keyed by per-call objects (each message, each
 *   run) kept each call's objects through a collection. Each one in src/ is
 *   listed below with what it is keyed by; a new one fails here until it is
 *   listed, with its reason;
 * - on the hot path (the run loop, the AgentLoop's turn, the facade's chat
 *   request, their observed inferences and tool calls), no generator function is made per call: each `function*` is
 *   declared once, at the top of its module, and `Effect.gen(() => steps(...))`
 *   runs it. On Node 20 a generator function made per call costs new maps in the
 *   old generation, which keep each call's objects through a young collection;
 * - on the same hot path, no object literal that starts with a spread and goes
 *   on with fields (`{ ...base, k: v }`): Node 20's V8 builds each on a slow
 *   path (`overlay(base, { k: v })` instead: services/internal/Overlay).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const src = path.resolve(import.meta.dirname, "..", "src")

const sources = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    return entry.isDirectory() ? sources(full) : entry.name.endsWith(".ts") ? [full] : []
  })

interface Found {
  readonly file: string
  readonly line: number
  readonly text: string
}

const find = (predicate: (node: ts.Node) => boolean): Array<Found> =>
  sources(src).flatMap((file) => {
    const text = fs.readFileSync(file, "utf8")
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true)
    const found: Array<Found> = []
    const visit = (node: ts.Node) => {
      if (predicate(node)) {
        found.push({
          file: path.relative(src, file),
          line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1,
          text: node.getText().split("\n")[0]!.slice(0, 80)
        })
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
    return found
  })

/** The weak collections of src/, by file, and what their keys are. */
const allowedWeak: Readonly<Record<string, string>> = {
  "domain/Construct.ts": "Schema classes (their defaulted fields, found once per class)",
  "layers/JsonConstraint.ts": "output schemas: a module's, or a request's shared by its replicas (compiled targets, enum lookups)",
  "programs/plan/Step.ts": "a plan's step schemas (their codecs, shared by the plan's steps)",
  "programs/query/SingleShot.ts": "answer shapes (their JSON schemas, shared by a query's responders)"
}

/** Files of the hot path: every generator function in them is declared at the top of its module. */
const hotPath = [
  "programs/AgentLoop.ts",
  "programs/agent/",
  "programs/run/",
  "programs/facade/Chat.ts",
  "programs/facade/Extraction.ts",
  "programs/facade/Modes.ts",
  "programs/facade/Check.ts",
  "programs/facade/Run.ts",
  "programs/facade/Session.ts",
  "programs/facade/SessionLocks.ts",
  "programs/internal/Observed.ts",
  "programs/internal/Spans.ts",
  "programs/internal/ReplicaSampling.ts",
  "programs/RedundantLoop.ts"
]

/** The hot path's files for the spread rule: the generator rule's, and the request's own state and response. */
const spreadFree = [
  ...hotPath,
  "programs/facade/Cancellations.ts",
  "programs/facade/Inferences.ts",
  "programs/facade/Response.ts",
  "programs/facade/Spent.ts",
  "programs/Lifecycle.ts",
  "services/Engine.ts",
  "services/internal/"
]

/** Whether `node` is inside a function (not at the top of its module). */
const insideFunction = (node: ts.Node): boolean => {
  for (let up = node.parent; up !== undefined; up = up.parent) if (ts.isFunctionLike(up)) return true
  return false
}

/** Whether `node` is an object literal that starts with a spread and goes on with a field. */
const spreadThenFields = (node: ts.Node): boolean =>
  ts.isObjectLiteralExpression(node) && node.properties.length > 1 && ts.isSpreadAssignment(node.properties[0]!) &&
  node.properties.some((p) => !ts.isSpreadAssignment(p))

describe("source rules (what V8 keeps alive)", () => {
  it("no object literal in src/ has a get or set accessor", () => {
    const accessors = find((node) =>
      (ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node)) && ts.isObjectLiteralExpression(node.parent)
    )
    expect(accessors).toEqual([])
  })

  it("each WeakMap, WeakSet and WeakRef of src/ is keyed by few values (listed here, with what)", () => {
    const weak = find((node) =>
      ts.isNewExpression(node) && ts.isIdentifier(node.expression) &&
      ["WeakMap", "WeakSet", "WeakRef"].includes(node.expression.text)
    )
    // the rule can see one: there are some, all in listed files
    expect(weak.length).toBeGreaterThan(0)
    expect(weak.filter((w) => allowedWeak[w.file] === undefined)).toEqual([])
  })

  it("no generator function is made per call on the hot path (each is declared at the top of its module)", () => {
    const generators = find((node) =>
      (ts.isFunctionExpression(node) || ts.isFunctionDeclaration(node)) && node.asteriskToken !== undefined
    )
    const onHotPath = generators.filter((g) => hotPath.some((p) => g.file.startsWith(p)))
    // the rule can see them: the hot path's generator functions are there, declared once each
    expect(onHotPath.length).toBeGreaterThan(5)
    const nested = find((node) =>
      (ts.isFunctionExpression(node) || ts.isFunctionDeclaration(node)) && node.asteriskToken !== undefined && insideFunction(node)
    )
    expect(nested.filter((g) => hotPath.some((p) => g.file.startsWith(p)))).toEqual([])
    // elsewhere they are still common (made once per layer, or on paths not measured): the rule would see one
    expect(nested.length).toBeGreaterThan(0)
  })

  it("no object literal on the hot path starts with a spread and goes on with fields (overlay, keptWith or uncheckedWith instead)", () => {
    const found = find(spreadThenFields)
    // the rule can see one: elsewhere in src/ they remain (paths made once, or not measured)
    expect(found.length).toBeGreaterThan(0)
    expect(found.filter((f) => spreadFree.some((p) => f.file.startsWith(p)))).toEqual([])
  })
})
