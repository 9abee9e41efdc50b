/**
 * Which object and array literals of a hot-path row V8 allocates in the old
 * generation (allocation-site pretenuring):
 *
 *   npm run bench:pretenured -- [row] [--effect]
 *   (after `tsc -p tsconfig.bench.json`: node .tmp/bench/bench/pretenured.js [row] [--effect])
 *
 * It copies the compiled bench (.tmp/bench) to .tmp/pretenured, wraps every
 * object literal, array literal and `new` expression of the compiled src/ (and
 * of Effect's own code with --effect, in a copy of node_modules/effect) in a
 * check of where V8 put the object, runs 3,000 warm-up calls of the row (a key
 * of `ourCalls` in bench/hotpath.bench.ts, default agent; `base:<row>` for the
 * row's plain-Effect baseline) and then 5,000 calls,
 * and prints each site that allocated in the old generation during those: how
 * many of its objects were old, of how many, and `file:line:kind` in the
 * compiled JavaScript. A row whose calls keep nothing should print no site of
 * src/ (Effect's fiber internals show up wherever a row forks fibers).
 *
 * The check is V8's `%InYoungGeneration`, so the row runs in a child process
 * started with --allow-natives-syntax.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

/** Wraps each literal and `new` of the JavaScript files under `root` in `globalThis.__site(id, expr)`. */
const instrument = (root: string): number => {
  const files = (dir: string): Array<string> =>
    fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
      const f = path.join(dir, e.name)
      return e.isDirectory() ? files(f) : e.name.endsWith(".js") ? [f] : []
    })
  let sites = 0
  for (const file of files(root)) {
    const text = fs.readFileSync(file, "utf8")
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS)
    const edits: Array<readonly [number, number, string]> = []
    const visit = (node: ts.Node) => {
      if (ts.isObjectLiteralExpression(node) || ts.isArrayLiteralExpression(node) || ts.isNewExpression(node)) {
        const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1
        const kind = ts.isObjectLiteralExpression(node) ? "object" : ts.isArrayLiteralExpression(node) ? "array" : "new"
        edits.push([node.getStart(), node.getEnd(), `${path.relative(root, file)}:${line}:${kind}`])
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
    if (edits.length === 0) continue
    // openings and closings, later positions first; at one position, closings first
    const points = edits.flatMap(([start, end, id]) => [[start, 1, `globalThis.__site(${JSON.stringify(id)}, `], [end, 0, ")"]] as const)
    let out = text
    for (const [at, , insert] of [...points].sort((a, b) => b[0] - a[0] || a[1] - b[1])) out = out.slice(0, at) + insert + out.slice(at)
    fs.writeFileSync(file, out)
    sites += edits.length
  }
  return sites
}

/** The child's preload: counts, per site, the objects made and those made old (natives syntax: not TypeScript). */
const preload = `
const old = new Map(), all = new Map()
let on = false
globalThis.__site = (id, o) => {
  if (on && typeof o === "object" && o !== null) {
    all.set(id, (all.get(id) ?? 0) + 1)
    if (!%InYoungGeneration(o)) old.set(id, (old.get(id) ?? 0) + 1)
  }
  return o
}
globalThis.__sites = {
  start: () => { on = true },
  report: () => [...old.entries()].sort((a, b) => b[1] - a[1]).map(([id, n]) => ({ id, old: n, all: all.get(id) }))
}
`

const here = path.dirname(fileURLToPath(import.meta.url))

if (process.env.PRETENURED_CHILD === "1") {
  // the child: the row of the instrumented copy, warmed up, then counted
  const row = process.argv[2] ?? "agent"
  const [Effect, Scope, Exit, { baseCalls, ourCalls }] = await Promise.all([
    import("effect/Effect"),
    import("effect/Scope"),
    import("effect/Exit"),
    import("./hotpath.bench.js")
  ])
  // "base:<row>": the row's plain-Effect baseline instead (is a site Effect's own doing, or ours?)
  const base = row.startsWith("base:")
  const calls = base ? baseCalls : ourCalls
  const key = base ? row.slice("base:".length) : row
  const call = calls[key]
  if (call === undefined) throw new Error(`no row "${row}": one of ${Object.keys(calls).join(", ")}`)
  await Effect.runPromise(Effect.gen(function*() {
    const scope = yield* Scope.make()
    const run = yield* Scope.extend(call, scope)
    for (let i = 0; i < 3_000; i++) yield* run
    ;(globalThis as unknown as { __sites: { start: () => void } }).__sites.start()
    for (let i = 0; i < 5_000; i++) yield* run
    yield* Scope.close(scope, Exit.void)
  }))
  const report = (globalThis as unknown as { __sites: { report: () => unknown } }).__sites.report()
  console.log(`PRETENURED ${JSON.stringify(report)}`)
} else {
  const row = process.argv.slice(2).find((a) => !a.startsWith("--")) ?? "agent"
  const withEffect = process.argv.includes("--effect")
  // .tmp/bench/bench -> .tmp/bench -> .tmp
  const compiled = path.resolve(here, "..")
  const copy = path.resolve(compiled, "..", "pretenured")
  fs.rmSync(copy, { recursive: true, force: true })
  fs.cpSync(compiled, copy, { recursive: true })
  let sites = instrument(path.join(copy, "src"))
  if (withEffect) {
    const effect = path.dirname(fileURLToPath(import.meta.resolve("effect/package.json")))
    const target = path.join(copy, "node_modules", "effect")
    fs.cpSync(effect, target, { recursive: true })
    sites += instrument(path.join(target, "dist", "esm"))
  }
  fs.writeFileSync(path.join(copy, "preload.mjs"), preload)
  console.log(`row ${row}: ${sites} sites instrumented; 3,000 warm-up calls, then 5,000 counted`)
  const out = execFileSync(
    process.execPath,
    ["--allow-natives-syntax", "--import", path.join(copy, "preload.mjs"), path.join(copy, "bench", "pretenured.js"), row],
    { env: { ...process.env, PRETENURED_CHILD: "1" }, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, timeout: 600_000 }
  )
  const line = out.split("\n").find((l) => l.startsWith("PRETENURED "))
  if (line === undefined) throw new Error(`the row printed no report: ${out.slice(-500)}`)
  const report = JSON.parse(line.slice("PRETENURED ".length)) as ReadonlyArray<{ id: string; old: number; all: number }>
  const shown = report.filter((r) => r.old >= 50)
  if (shown.length === 0) console.log("no site allocated 50 or more objects in the old generation")
  for (const r of shown) console.log(`${String(r.old).padStart(7)} of ${String(r.all).padStart(7)}  ${r.id}`)
}
