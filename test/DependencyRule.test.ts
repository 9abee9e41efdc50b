/**
 * The dependency rule (shared/DESIGN.md) is enforced by dependency-cruiser with the
 * project's own config. These tests prove the check can fail: each builds a small
 * tree with one violating import and runs the real linter on it.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { describe, expect, it } from "vitest"

const run = promisify(execFile)
const root = path.resolve(import.meta.dirname, "..")
const depcruise = path.join(root, "node_modules", ".bin", "depcruise")
const config = path.join(root, ".dependency-cruiser.cjs")

const cruise = async (files: Record<string, string>) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagantic-deps-"))
  try {
    fs.writeFileSync(
      path.join(dir, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true } })
    )
    fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"))
    for (const [file, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true })
      fs.writeFileSync(path.join(dir, file), text)
    }
    return await run(depcruise, ["src", "--config", config], { cwd: dir }).then(
      ({ stdout }) => ({ ok: true, output: stdout }),
      (error: { stdout?: string; stderr?: string }) => ({ ok: false, output: `${error.stdout ?? ""}${error.stderr ?? ""}` })
    )
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const base = {
  "src/domain/Message.ts": `import * as Schema from "effect/Schema"\nexport const M = Schema.String\n`,
  "src/services/Engine.ts": `import { M } from "../domain/Message.js"\nexport const E = M\n`,
  "src/layers/Live.ts": `import { E } from "../services/Engine.js"\nexport const L = E\n`,
  "src/programs/Loop.ts": `import { E } from "../services/Engine.js"\nexport const P = E\n`
}

describe("dependency rule", () => {
  it("accepts a tree that follows the rule", async () => {
    const result = await cruise(base)
    expect(result.output).not.toContain("error")
    expect(result.ok).toBe(true)
  })

  it("fails when a layer imports another layer (the middle band stays apart)", async () => {
    const result = await cruise({
      ...base,
      "src/layers/Validator.ts": `import { L } from "./Live.js"\nexport const V = L\n`
    })
    expect(result.ok).toBe(false)
    expect(result.output).toContain("layers-apart")
    // a layer's own folder is fine
    const own = await cruise({
      ...base,
      "src/layers/llama/Part.ts": `export const part = 1\n`,
      "src/layers/Live.ts": `import { E } from "../services/Engine.js"\nimport { part } from "./llama/Part.js"\nexport const L = [E, part]\n`
    })
    expect(own.output).not.toContain("error")
    expect(own.ok).toBe(true)
  })

  it("fails when a program imports a layer", async () => {
    const result = await cruise({
      ...base,
      "src/programs/Loop.ts": `import { L } from "../layers/Live.js"\nexport const P = L\n`
    })
    expect(result.ok).toBe(false)
    expect(result.output).toContain("programs-never-import-layers")
  })

  it("fails when a layer imports a program", async () => {
    const result = await cruise({
      ...base,
      "src/layers/Live.ts": `import { P } from "../programs/Loop.js"\nexport const L = P\n`
    })
    expect(result.ok).toBe(false)
    expect(result.output).toContain("layers-never-import-programs")
  })

  it("fails when a service imports a layer, or the domain imports a service", async () => {
    const service = await cruise({
      ...base,
      "src/services/Engine.ts": `import { L } from "../layers/Live.js"\nexport const E = L\n`
    })
    expect(service.ok).toBe(false)
    expect(service.output).toContain("services-see-only-domain")
    const domain = await cruise({
      ...base,
      "src/domain/Message.ts": `import { E } from "../services/Engine.js"\nexport const M = E\n`
    })
    expect(domain.ok).toBe(false)
    expect(domain.output).toContain("domain-is-leaf")
  })

  it("fails when the domain imports an npm package other than effect", async () => {
    const result = await cruise({
      ...base,
      "src/domain/Message.ts": `import { jsonrepair } from "jsonrepair"\nexport const M = jsonrepair\n`
    })
    expect(result.ok).toBe(false)
    expect(result.output).toContain("domain-only-effect")
  })
})
