/**
 * Rules of src/, checked on the source itself with TypeScript's parser:
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
 *   listed, with its reason.
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

describe("source rules", () => {
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
})
