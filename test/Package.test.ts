/**
 * The package as a user installs it: `npm pack` (which builds dist/ first), the
 * tarball unpacked into a fresh project's node_modules beside the dependencies it
 * declares (linked from this checkout's, without tsx, TypeScript sources or
 * tests), then imported, type-checked and run from there: the main entry and a
 * subpath, one AgentLoop turn on the ScriptedEngine, and the `pagantic` command.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const run = promisify(execFile)
const root = path.resolve(import.meta.dirname, "..")
const work = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-package-"))
const project = path.join(work, "app")
const installed = path.join(project, "node_modules", "pagantic")
let files: ReadonlyArray<string> = []

beforeAll(async () => {
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", work], {
    cwd: root,
    timeout: 240_000,
    maxBuffer: 64 * 1024 * 1024
  })
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf("["))) as Array<{ filename: string; files: Array<{ path: string }> }>
  files = packed!.files.map((f) => f.path)
  fs.mkdirSync(installed, { recursive: true })
  await run("tar", ["xzf", path.join(work, packed!.filename), "-C", installed, "--strip-components=1"], { timeout: 60_000 })
  // the dependencies a user's install would bring, linked from this checkout; never tsx
  const modules = path.join(root, "node_modules")
  for (const entry of fs.readdirSync(modules)) {
    if (entry === ".bin" || entry === "tsx" || entry === "pagantic" || entry.startsWith(".")) continue
    if (entry.startsWith("@")) {
      fs.mkdirSync(path.join(project, "node_modules", entry), { recursive: true })
      for (const scoped of fs.readdirSync(path.join(modules, entry))) {
        fs.symlinkSync(path.join(modules, entry, scoped), path.join(project, "node_modules", entry, scoped))
      }
    } else {
      fs.symlinkSync(path.join(modules, entry), path.join(project, "node_modules", entry))
    }
  }
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", type: "module", private: true }))
}, 300_000)

afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

describe("the installed package", () => {
  it("holds dist with declarations and source maps, the bin, the bundled model, README, the guides it links to and LICENSE; no tests, training, bench or sources", () => {
    for (const file of ["dist/index.js", "dist/index.d.ts", "dist/index.js.map", "dist/llama.js", "dist/llama.d.ts", "dist/http.js", "dist/cli.js", "dist/openai.js", "dist/telemetry.js", "dist/durable.js", "dist/durable.d.ts", "dist/effectAi.js", "dist/effectAi.d.ts", "bin/pagantic.js", "models/pagantic-tiny.gguf", "README.md", "LICENSE", "package.json"]) {
      expect(files, file).toContain(file)
    }
    // every guide the README links to ships beside it, so the links work in node_modules/pagantic too
    const readme = fs.readFileSync(path.join(installed, "README.md"), "utf8")
    const guides = [...readme.matchAll(/\]\((docs\/[^)#]+)\)/g)].map((m) => m[1]!)
    expect(guides.length).toBeGreaterThan(5)
    for (const guide of guides) expect(files, guide).toContain(guide)
    for (const prefix of ["test/", "training/", "bench/", "scripts/", "src/", "examples/"]) {
      expect(files.filter((f) => f.startsWith(prefix)), prefix).toEqual([])
    }
    const manifest = JSON.parse(fs.readFileSync(path.join(installed, "package.json"), "utf8"))
    // effect is the application's: a peer, so Context tags are one copy
    expect(manifest.peerDependencies.effect).toMatch(/^\^3\./)
    expect(manifest.dependencies?.effect).toBeUndefined()
    expect(manifest.dependencies?.tsx).toBeUndefined()
    for (const entry of Object.values(manifest.exports) as Array<Record<string, string>>) {
      expect(Object.keys(entry)[0]).toBe("types")
    }
  })

  it("imports from the main entry and a subpath and runs a turn, with effect's tags shared", async () => {
    fs.writeFileSync(
      path.join(project, "main.mjs"),
      `import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AgentLoop, Engine, InProcessToolRegistry, ScriptedEngine } from "pagantic"
import { LlamaEngine } from "pagantic/llama"
const turn = await Effect.runPromise(
  Effect.gen(function* () {
    const agent = yield* AgentLoop.make()
    return yield* agent.chat("hi")
  }).pipe(Effect.provide(Layer.merge(ScriptedEngine.layer([ScriptedEngine.reply("hello from the package")]), InProcessToolRegistry.layer([]))))
)
console.log(JSON.stringify({ content: turn.content, engineTag: typeof Engine.Engine, llama: typeof LlamaEngine.layer }))
`
    )
    const { stdout } = await run(process.execPath, ["main.mjs"], { cwd: project, timeout: 60_000 })
    expect(JSON.parse(stdout.trim().split("\n").at(-1)!)).toEqual({
      content: "hello from the package",
      engineTag: "function",
      llama: "function"
    })
  }, 90_000)

  it("type-checks a TypeScript user of the main entry and the subpaths", async () => {
    fs.writeFileSync(
      path.join(project, "main.ts"),
      `import * as Effect from "effect/Effect"
import { AgentLoop, Failure } from "pagantic"
import { Http } from "pagantic/http"
import { OpenAiEngine } from "pagantic/openai"
export const turn: Effect.Effect<AgentLoop.TurnResult, AgentLoop.AgentLoopError, unknown> = Effect.flatMap(AgentLoop.make(), (a) => a.chat("hi"))
export const code: Failure.FailureCode = "TOOL_NOT_FOUND"
export const layers = [Http.layer, OpenAiEngine.layerConfig]
`
    )
    fs.writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, skipLibCheck: true, types: [] },
        files: ["main.ts"]
      })
    )
    const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc")
    const result = await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project, timeout: 120_000 }).then(
      () => "",
      (e: { stdout?: string }) => e.stdout ?? "failed"
    )
    expect(result).toBe("")
  }, 150_000)

  it("the pagantic command runs from the package without tsx", async () => {
    const { stdout } = await run(process.execPath, [path.join(installed, "bin", "pagantic.js"), "--help"], {
      cwd: project,
      timeout: 60_000,
      env: { ...process.env, NO_COLOR: "1" }
    })
    expect(stdout).toContain("pagantic")
    expect(stdout).toContain("chat")
    expect(fs.existsSync(path.join(project, "node_modules", "tsx"))).toBe(false)
  }, 90_000)
})
