/**
 * Decoding errors said the way a caller can act on them: one line per offending
 * path ("mode: expected "chat" | "structured" | ..., got "dance""), instead of the
 * schema's whole decoding tree with every composite type spelled out.
 */
import * as ParseResult from "effect/ParseResult"
import * as Text from "./Text.js"

/** At most this many lines: a body with 10,000 wrong values gets the first ones. */
const maxIssues = 20

/**
 * A message that is not "Expected X, actual Y" (a refinement, a transformation):
 * schema-tree notation ("(Struct (Encoded side) <-> ...)") is replaced by words
 * and the whole cut to an excerpt.
 */
const plain = (message: string): string =>
  Text.excerpt(
    message
      .replace(/\((?:[^()]|\([^()]*\))*(?:Encoded side|Type side|<->)(?:[^()]|\([^()]*\))*\)/g, "the value")
      .replace(/\s+/g, " "),
    200
  )

/** Composite type names are long and internal: say what shape was wanted. */
const simplify = (type: string, atRoot: boolean, root: string): string =>
  type.startsWith("ReadonlyArray<")
    ? "an array"
    : type.includes("Struct") || type.includes("<->") || type.startsWith("{") || type.endsWith("(Encoded side)")
    ? atRoot ? root : "an object"
    : type

/**
 * One line per path. `root` names the shape the whole input should have (e.g. "a
 * SystemRequest object") and `whole` the place of an issue with no path. An optional field that is present but wrong is reported
 * once, at the deepest path that explains it (a union's "expected undefined" at the
 * field itself, and a nullable's "expected null", are dropped when a deeper path says more), and a union of literals is
 * listed once ("expected "a" | "b", got "c"").
 */
export const describe = (
  error: ParseResult.ParseError,
  root = "an object",
  whole = "the request",
  rename: (path: string) => string = (path) => path
): ReadonlyArray<string> => {
  const byPath = new Map<string, Array<string>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const where = issue.path.length > 0 ? rename(issue.path.map((key) => Text.excerpt(String(key), 40)).join(".")) : whole
    const messages = byPath.get(where) ?? []
    messages.push(issue.message)
    byPath.set(where, messages)
  }
  const absentOnly = (m: string) => /^Expected (undefined|null), actual /s.test(m)
  for (const [where, messages] of byPath) {
    const onlyUndefined = messages.every(absentOnly)
    if (onlyUndefined && [...byPath.keys()].some((other) => other.startsWith(`${where}.`))) byPath.delete(where)
    // an optional field that is present but wrong: its own problem says more than "expected undefined"
    else if (!onlyUndefined && messages.some(absentOnly)) byPath.set(where, messages.filter((m) => !absentOnly(m)))
  }
  return [...byPath.entries()].map(([where, messages]) => {
    const expected = messages.map((m) => /^Expected (.*), actual (.*)$/s.exec(m))
    if (expected.every((m) => m !== null)) {
      const types = [...new Set(expected.map((m) => simplify(m![1]!, where === whole, root)))]
      return `${where}: expected ${types.join(" | ")}, got ${Text.excerpt(expected[0]![2]!, 60)}`
    }
    return `${where}: ${messages.map((m) => plain(m)).join("; ")}`
  }).slice(0, maxIssues)
}

const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/

/** Renders a path as `$.a.b[0]["odd key"]`. */
export const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((acc, key) => {
    if (typeof key === "number") return `${acc}[${key}]`
    const name = String(key)
    return identifier.test(name) ? `${acc}.${name}` : `${acc}[${JSON.stringify(name)}]`
  }, "$")
